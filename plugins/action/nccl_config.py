# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.nccl_config: reads the user's topology file on the
controller, reads the node with one shell command and, where the module would write nothing,
returns the module's result for that case without running it (module_utils/amlhpc/nodes/nccl_read.py;
the VM size must be known, as the inventory plugin gives it: the instance metadata is the
module's to ask); otherwise runs the module on the node (one module run). The facts it finds
are in the result's ``facts``; the role's next task sets them for the play."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nccl_read import (
    CONFIG_ARGUMENT_SPEC,
    read_command,
    unchanged_outcome,
)
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.node_read import unchanged_result


class ActionModule(ActionBase):
    """Run nccl_config on the node where one read shows something to write."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        src = args.get("topo_file_src") or ""
        if src and args.get("topo_file_content") is None:
            try:
                path = self._find_needle("files", src)
                with open(path, encoding="utf-8") as fh:
                    args["topo_file_content"] = fh.read()
            except (AnsibleError, OSError, UnicodeDecodeError) as exc:
                raise AnsibleActionFail(f"nccl_topo_file_src {src!r}: {exc}") from exc
        unchanged = unchanged_result(
            self, args, CONFIG_ARGUMENT_SPEC,
            # the module asks the instance metadata for a VM size the inventory does not give
            lambda p: None if p["imds"] and not p["vm_size"] else read_command(p), unchanged_outcome,
            home_paths=("topo_file_dest", "conf_path", "env_path"))
        if unchanged is not None:
            result.update(unchanged)
        else:
            result.update(self._execute_module(module_name="amlhpc.azureml.nccl_config", module_args=args,
                                               task_vars=task_vars))
        return result
