# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin for the azcopy_stage module: its arguments carry a secret, so it runs pipelined on
every connection or not at all (see plugins/plugin_utils/pipelined.py).

As the stage role's one task per node (the module's ``version`` set, the role imported with
``rolespec_validate: false``), it first does on the controller what the role's separate probe
task did: the role's argument check (plugins/plugin_utils/role_args.py), then the stage's
inputs (a shard in the plan, a SAS with auth sas), and a node that fails them is not
contacted. The module then probes azcopy and stages in one run on the node; its answers
become the host variables ``stage_shard``, ``stage_azcopy_needed`` and
``stage_azcopy_src_kind``, as ansible.builtin.set_fact makes them (not cached).

A rerun reads the node first with one shell command (module_utils/amlhpc/stage_read.py,
through plugin_utils/node_read.py): ``azcopy --version`` and one digest of the stage folder.
Where azcopy runs as pinned and a node-local folder holds exactly this shard and its
manifest, the module's own result for that case is returned and no module runs."""

from __future__ import annotations

import time
from typing import Any

from ansible.plugins.action import VariableLayer

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.azcopy_install import stage_input_error
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.stage_read import (
    ARGUMENT_SPEC,
    REQUIRED_IF,
    read_command,
    unchanged_outcome,
)
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.node_read import unchanged_result
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.pipelined import run_pipelined
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.role_args import RoleCheckedAction


class ActionModule(RoleCheckedAction):
    """azcopy_stage, pipelined only; with ``version``, the stage role's checks first."""

    def run_checked(self, result: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
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
            result = run_pipelined(self, result, task_vars, args)
        if probing and not result.get("failed") and "needed" in result:
            self.register_host_variables({"stage_shard": args["shard"], "stage_azcopy_needed": result["needed"],
                                          "stage_azcopy_src_kind": result["src_kind"]}, VariableLayer.EPHEMERAL_FACT)
        return result
