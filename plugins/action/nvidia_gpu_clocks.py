# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.nvidia_gpu_clocks. It reads the GPUs with one shell command,
no Python on the node, and where nothing is to change returns the module's own result for that
case (module_utils/amlhpc/nodes/gpu_clocks.py); otherwise, or when the read is not what it expects,
the module runs, reads again on the node and acts. A rerun so costs the node a shell command
instead of a module run."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.gpu_clocks import (
    ARGUMENT_SPEC,
    probe_command,
    unchanged_outcome,
)
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.node_read import unchanged_result


class ActionModule(ActionBase):
    """Read the GPUs; run the module only where something is to change."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        unchanged = unchanged_result(
            self, self._task.args, ARGUMENT_SPEC,
            lambda p: probe_command(p["nvidia_smi"], p["state"], p["check_supported"]), unchanged_outcome)
        if unchanged is not None:
            result.update(unchanged)
            return result
        result.update(self._execute_module(module_name="amlhpc.azureml.nvidia_gpu_clocks", module_args=self._task.args,
                                           task_vars=task_vars))
        return result
