# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.nccl_config: reads the user's topology file on the
controller, reads the node with one shell command and, where the module would write nothing,
returns the module's result for that case without running it (module_utils/amlhpc/nccl_read.py;
the VM size must be known, as the inventory plugin gives it: the instance metadata is the
module's to ask); otherwise runs the module on the node (one module run). It makes the facts it returns
host variables of the play, as ansible.builtin.set_fact does (not cached), so that no
set_fact task per node is needed. Where the play imported the role without Ansible's own
argument check, it checks the role's variables first (plugin_utils/role_args.py)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import VariableLayer

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nccl_read import (
    CONFIG_ARGUMENT_SPEC,
    read_command,
    unchanged_outcome,
)
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.node_read import unchanged_result
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.role_args import RoleCheckedAction


class ActionModule(RoleCheckedAction):
    """Run nccl_config on the node; its facts become host variables."""

    def run_checked(self, result: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
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
        facts = result.get("facts")
        self.register_host_variables({}, VariableLayer.CACHEABLE_FACT)  # facts of the play, never cached
        if isinstance(facts, dict) and not result.get("failed"):
            self.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)
        return result
