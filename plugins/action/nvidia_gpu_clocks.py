# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.nvidia_gpu_clocks: runs the module. Where the play
imported the gpu_clocks role without Ansible's own argument check (its own host-task per
node), the role's variables are checked here first, in the role's one task per node
(plugin_utils/role_args.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.role_args import RoleCheckedAction


class ActionModule(RoleCheckedAction):
    """Check the role's variables when Ansible did not, then run the module."""

    def run_checked(self, result: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
        result.update(self._execute_module(module_name="amlhpc.azureml.nvidia_gpu_clocks", module_args=self._task.args,
                                           task_vars=task_vars))
        return result
