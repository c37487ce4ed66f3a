# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.ssh_trust_node: it reads the files the module writes (the
user's authorized_keys, the nodefile, known_hosts, and their folders) with one shell command,
no Python on the node, and where the module would change nothing returns the module's result
for that case (module_utils/amlhpc/ssh_trust.py ``node_unchanged``). Otherwise, or where the
read is not what it expects, the module runs, reads again on the node and writes. A rerun so
costs the node a shell command instead of a module run."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.file_state import read_command
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.ssh_trust import (
    NODE_ARGUMENT_SPEC,
    node_read,
    node_unchanged,
)


class ActionModule(ActionBase):
    """Read the node's files; run ssh_trust_node only where it would change something."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        checked = ArgumentSpecValidator(NODE_ARGUMENT_SPEC).validate(dict(self._task.args))
        # a path under a home folder is the node's to expand (the validator expands it here)
        home_paths = any(str(self._task.args.get(k) or "").startswith("~") for k in ("nodefile", "known_hosts"))
        if not checked.error_messages and not home_paths:
            params = checked.validated_parameters
            paths, users = node_read(params)
            read = self._low_level_execute_command(read_command(paths, users), sudoable=True)
            if read.get("rc") == 0 and node_unchanged(params, read.get("stdout", "")):
                result.update(changed=False, changed_files=[], diff=[], invocation={"module_args": params})
                return result
        result.update(self._execute_module(module_name="amlhpc.azureml.ssh_trust_node", module_args=self._task.args,
                                           task_vars=task_vars))
        return result
