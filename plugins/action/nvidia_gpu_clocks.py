# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.nvidia_gpu_clocks. Where the play imported the gpu_clocks
role without Ansible's own argument check (its own host-task per node), the role's variables
are checked here first, in the role's one task per node (plugin_utils/role_args.py).

Then it reads the GPUs with one shell command, no Python on the node, and where nothing is to
change returns the module's own result for that case (module_utils/amlhpc/gpu_clocks.py);
otherwise, or when the read is not what it expects, the module runs, reads again on the node
and acts. A rerun so costs the node a shell command instead of a module run."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.gpu_clocks import (
    ARGUMENT_SPEC,
    probe_command,
    unchanged_outcome,
)
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.role_args import RoleCheckedAction


class ActionModule(RoleCheckedAction):
    """Check the role's variables when Ansible did not; read the GPUs; run the module only
    where something is to change."""

    def run_checked(self, result: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
        unchanged = self._unchanged()
        if unchanged is not None:
            result.update(unchanged)
            return result
        result.update(self._execute_module(module_name="amlhpc.azureml.nvidia_gpu_clocks", module_args=self._task.args,
                                           task_vars=task_vars))
        return result

    def _unchanged(self) -> dict[str, Any] | None:
        """The module's result when one read of the node shows nothing to change, else None."""
        checked = ArgumentSpecValidator(ARGUMENT_SPEC).validate(dict(self._task.args))
        if checked.error_messages:
            return None  # the module refuses them, in its own words
        params = checked.validated_parameters
        read = self._low_level_execute_command(probe_command(params["nvidia_smi"], params["state"],
                                                             params["check_supported"]), sudoable=True)
        if read.get("rc") != 0:
            return None
        outcome = unchanged_outcome(params, read.get("stdout", ""))
        if outcome is not None:
            outcome["invocation"] = {"module_args": params}
        return outcome
