# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin for the dataset_upload module.

Its arguments carry a secret, so the module runs pipelined on every connection or not at all
(see plugins/plugin_utils/pipelined.py).

Where the module would run on the controller itself (the local connection, no become, no
async), a task that only has to read is answered here, in the worker, with the module's own
functions (``dataset_prep.upload_answer``): check mode, and a rerun that finds every
compressed copy current and every blob in the container. The module's run on the controller
is a new Python interpreter, its payload and its imports: about 0.35 s of CPU and half a
second of a rerun's wall time, for a listing and a stat of each file. Anything to compress
or upload, any error, and arguments the module would refuse, run the module as before.
"""

from __future__ import annotations

from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.arg_secrets import no_log_values
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.data.dataset_prep import (
    UPLOAD_ARGUMENT_SPEC,
    UPLOAD_MUTUALLY_EXCLUSIVE,
    UPLOAD_REQUIRED_ONE_OF,
    upload_answer,
)
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.pipelined import run_pipelined


def answered_here(action: ActionBase, args: dict[str, Any]) -> dict[str, Any] | None:
    """The module's result, found in this process where the module would run on the
    controller and has only to read; None otherwise (module docstring)."""
    # pylint: disable=protected-access
    if action._connection.transport != "local" or action._play_context.become or action._task.async_val:
        return None
    checked = ArgumentSpecValidator(UPLOAD_ARGUMENT_SPEC, mutually_exclusive=UPLOAD_MUTUALLY_EXCLUSIVE,
                                    required_one_of=UPLOAD_REQUIRED_ONE_OF).validate(dict(args))
    if checked.error_messages:
        return None  # the module refuses them, in its own words
    params = checked.validated_parameters
    try:
        answer = upload_answer(params, bool(action._task.check_mode))
    except Exception:  # noqa: BLE001 - the module runs and reports the error in its own words
        return None
    if answer is None:
        return None
    answer["invocation"] = {"module_args": params}
    return remove_values(answer, no_log_values(UPLOAD_ARGUMENT_SPEC, params))


class ActionModule(ActionBase):
    """dataset_upload: answered on the controller where reading is all it takes, else the
    module, pipelined only."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        answer = answered_here(self, self._task.args)
        if answer is not None:
            result.update(answer)
            return result
        return run_pipelined(self, result, task_vars, self._task.args)
