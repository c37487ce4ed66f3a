# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.healthcheck_node: measures the node with one shell command
that runs the module's own probe (module_utils/amlhpc/health/health_probe.py, with health_ib.py,
health.py and fsbench.py, standard library only) on the node's Python, without Ansible's
module payload, and judges the outputs on the controller with the module's own functions, for the module's own
result. Where the node's Python is not known yet (no interpreter discovered on an earlier
module run), the mount test's folder is to be created, the arguments or thresholds are refused
or the command gives no answer, it runs the module instead (one module run). Either way the
result's ``facts`` hold the verdicts; the role's next task sets them for the play."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.health import (
    benchmarks,
    checks,
    devices,
    fsbench,
    health,
    health_ib,
    health_probe,
)
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.node_read import python_interpreter, unchanged_result


def probe_sources() -> list[tuple[str, str]]:
    """(import name, source) of the probe's files, as probe_command takes them."""
    modules = (health_ib, checks, devices, benchmarks, health, fsbench, health_probe)
    return [(name, Path(mod.__file__).read_text(encoding="utf-8")) for name, mod in zip(health_probe.MODULE_NAMES, modules)]


class ActionModule(ActionBase):
    """Measure the node: its probe as one shell command, else the module."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        interpreter = python_interpreter(self, task_vars or {})
        check_mode = bool(self._task.check_mode)

        def command(p: dict[str, Any]) -> Optional[str]:
            if interpreter is None:
                return None
            try:
                health.thresholds_for(p["vm_size"], p["thresholds"])
            except ValueError:
                return None  # the module refuses them, in its own words
            return health_probe.probe_command(interpreter, p, check_mode, probe_sources())

        measured = unchanged_result(self, self._task.args, health_probe.ARGUMENT_SPEC, command,
                                    lambda p, out: health_probe.read_outcome(p, out, check_mode),
                                    home_paths=("fs_path",))
        if measured is not None:
            result.update(measured)
        else:
            result.update(self._execute_module(module_name="amlhpc.azureml.healthcheck_node",
                                               module_args=self._task.args, task_vars=task_vars))
        return result
