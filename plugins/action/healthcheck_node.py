# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.healthcheck_node: runs the module on the node (one module
run) and makes the facts it returns host variables of the play, as ansible.builtin.set_fact
does (not cached), so that no set_fact task per check and node is needed. Where the play
imported the role without Ansible's own argument check, it checks the role's variables
first (plugin_utils/role_args.py)."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import VariableLayer

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.role_args import RoleCheckedAction


class ActionModule(RoleCheckedAction):
    """Run healthcheck_node on the node; its facts become host variables."""

    def run_checked(self, result: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
        result.update(self._execute_module(module_name="amlhpc.azureml.healthcheck_node", module_args=self._task.args,
                                           task_vars=task_vars))
        facts = result.get("facts")
        if isinstance(facts, dict) and not result.get("failed"):
            self.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)
        return result
