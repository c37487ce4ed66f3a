# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.aml_job: on the controller (a local connection), a job whose
completed run this controller recorded and downloaded is answered here, in the worker Ansible
forked for the task, with the module's own answer for that case
(module_utils/amlhpc/azure/aml_job_options.py ``recorded_answer``): no module run, no interpreter, no
SDK import. Everything else, and arguments the module would refuse, goes to the module."""

from __future__ import annotations

import os
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.azure.aml_job_options import (
    ARGUMENT_SPEC,
    REQUIRED_IF,
    recorded_answer,
)

_LOCAL = ("local", "ansible.builtin.local")


class ActionModule(ActionBase):
    """Answer a recorded, completed run on the controller; run aml_job otherwise."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        if self._connection.transport in _LOCAL:
            checked = ArgumentSpecValidator(ARGUMENT_SPEC, required_if=REQUIRED_IF).validate(dict(self._task.args))
            answer = None if checked.error_messages else recorded_answer(
                checked.validated_parameters, bool(self._task.check_mode), os.environ)
            if answer is not None:
                result.update(answer)
                return result
        result.update(self._execute_module(module_name="amlhpc.azureml.aml_job", module_args=self._task.args,
                                           task_vars=task_vars))
        return result
