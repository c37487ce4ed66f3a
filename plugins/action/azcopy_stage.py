# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin for the azcopy_stage module: its arguments carry a secret, so it runs pipelined on
every connection or not at all (see plugins/plugin_utils/pipelined.py).

As the stage role's task per node (the module's ``version`` set), it first checks on the
controller the stage's inputs (a shard in the plan, a SAS with auth sas), and a node that
fails them is not contacted. The module then probes azcopy and stages in one run on the node;
its result says whether the pinned azcopy is still to be installed (``needed``, ``src_kind``).

A rerun reads the node first with one shell command (module_utils/amlhpc/staging/stage_read.py,
through plugin_utils/node_read.py): ``azcopy --version`` and one digest of the stage folder.
Where azcopy runs as pinned and a node-local folder holds exactly this shard and its
manifest, the module's own result for that case is returned and no module runs.

While the module runs, the worker watches its controller (plugin_utils/controller_watch.py):
killed, its worker ends its ssh client (or, on the local connection, the module), and the
module on the node stops azcopy, removes its temporary folder and drops its lock."""

from __future__ import annotations

import time
from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_install import stage_input_error
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.stage_read import (
    ARGUMENT_SPEC,
    REQUIRED_IF,
    read_command,
    unchanged_outcome,
)
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.controller_watch import ends_with_controller
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.node_read import unchanged_result
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.pipelined import run_pipelined


class ActionModule(ActionBase):
    """azcopy_stage, pipelined only; with ``version``, the stage's inputs checked first."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        probing = bool(args.get("version"))
        if probing:
            host = str((task_vars or {}).get("inventory_hostname", ""))
            error = stage_input_error(host, args.get("shard"), args.get("auth", "sas"), bool(args.get("sas")))
            if error:
                result.update(failed=True, msg=error)
                return result
        # A rerun reads the node with one shell command (no secret in it); where the folder holds
        # exactly this shard and azcopy runs as pinned, the module's result without running it.
        started = time.monotonic()
        unchanged = unchanged_result(
            self, args, ARGUMENT_SPEC, read_command,
            lambda p, out: unchanged_outcome(p, out, check_mode=bool(self._task.check_mode), started=started),
            home_paths=("azcopy", "dest"), required_if=REQUIRED_IF)
        if unchanged is not None:
            result.update(unchanged)
        else:
            with ends_with_controller():
                result = run_pipelined(self, result, task_vars, args)
        return result
