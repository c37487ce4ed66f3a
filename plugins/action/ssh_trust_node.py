# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.ssh_trust_node: it reads the files the module writes (the
user's authorized_keys, the nodefile, known_hosts, and their folders) with one shell command,
no Python on the node, and where the module would change nothing returns the module's result
for that case (module_utils/amlhpc/trust/ssh_trust.py ``node_unchanged``). Otherwise, or where the
read is not what it expects, the module runs, reads again on the node and writes. A rerun so
costs the node a shell command instead of a module run."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.file_state import read_command
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.trust.ssh_trust import (
    NODE_ARGUMENT_SPEC,
    node_read,
    node_unchanged,
)
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.node_read import unchanged_result

UNCHANGED = {"changed": False, "changed_files": [], "diff": []}
"""The module's result where it writes nothing."""


class ActionModule(ActionBase):
    """Read the node's files; run ssh_trust_node only where it would change something."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        unchanged = unchanged_result(
            self, self._task.args, NODE_ARGUMENT_SPEC, lambda p: read_command(*node_read(p)),
            lambda p, out: dict(UNCHANGED) if node_unchanged(p, out) else None, home_paths=("nodefile", "known_hosts"))
        if unchanged is not None:
            result.update(unchanged)
            return result
        result.update(self._execute_module(module_name="amlhpc.azureml.ssh_trust_node", module_args=self._task.args,
                                           task_vars=task_vars))
        return result
