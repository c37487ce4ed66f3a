# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.azcopy_probe: the stage role's first task on a node. On the
controller: the role's argument check (plugin_utils/role_args.py) and the stage's inputs (a
shard in the plan, a SAS with auth sas); then the module on the node (the azcopy probe and the
install decision, never the shard or a secret); its answers become host variables of the
play, as ansible.builtin.set_fact makes them (not cached)."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import VariableLayer

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.azcopy_install import stage_input_error
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.role_args import RoleCheckedAction


class ActionModule(RoleCheckedAction):
    """Check the stage's inputs, then probe azcopy on the node; the answers become host variables."""

    def run_checked(self, result: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
        args = dict(self._task.args)
        shard = args.pop("shard", None)
        auth = args.get("auth", "sas")
        host = str((task_vars or {}).get("inventory_hostname", ""))
        error = stage_input_error(host, shard, auth, boolean(args.pop("has_sas", False)))
        if error:
            result.update(failed=True, msg=error)
            return result
        result.update(self._execute_module(module_name="amlhpc.azureml.azcopy_probe", module_args=args,
                                           task_vars=task_vars))
        if not result.get("failed"):
            self.register_host_variables({"stage_shard": shard, "stage_azcopy_needed": result["needed"],
                                          "stage_azcopy_src_kind": result["src_kind"]}, VariableLayer.EPHEMERAL_FACT)
        return result
