# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""A rerun without a module run: read the node with one shell command, decide on the controller.

On a rerun most nodes have nothing to change, and a module run costs the node about 0.16 s
of CPU where one shell command costs a few ms (bench/task_kinds_bench.py). The actions of
nvidia_gpu_clocks, ssh_trust_node, nccl_config, nvme_raid and azcopy_stage call :func:`unchanged_result` first: it
validates the task's arguments against the module's own spec, runs the module's read as one
shell command (``ActionBase._low_level_execute_command``, as the task's become user) and
hands the output to a pure function of ``plugins/module_utils/amlhpc`` that returns the
module's result for "nothing to change", or None. None (also on arguments the module would
refuse, a path under a home folder, a failed read) means: run the module, as before.

healthcheck_node's action uses it the same way, but its command is the module's whole work:
the probe's code run on the node's Python (:func:`python_interpreter`), judged on the
controller into the module's result; None there also means: run the module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.arg_secrets import no_log_values


def unchanged_result(action: ActionBase, args: Mapping[str, Any], spec: Mapping[str, Any],
                     command: Callable[[dict[str, Any]], Optional[str]],
                     outcome: Callable[[dict[str, Any], str], Optional[dict[str, Any]]],
                     home_paths: Sequence[str] = (),
                     required_if: Sequence[Any] = ()) -> Optional[dict[str, Any]]:
    """The module's result when one read of the node shows nothing to change, else None.

    ``command(params)`` is the shell read (None: the module has to run anyway);
    ``outcome(params, stdout)`` the decision. ``home_paths`` names the path options a ``~``
    would make the node's to expand (the validator would expand it on the controller);
    ``required_if`` is the module's. As a module's result, it carries the invocation, and
    the values of ``no_log`` options are masked in all of it."""
    if any(str(args.get(k) or "").startswith("~") for k in home_paths):
        return None
    checked = ArgumentSpecValidator(dict(spec), required_if=list(required_if) or None).validate(dict(args))
    if checked.error_messages:
        return None  # the module refuses them, in its own words
    params = checked.validated_parameters
    shell = command(params)
    if shell is None:
        return None
    read = action._low_level_execute_command(shell, sudoable=True)  # pylint: disable=protected-access
    if read.get("rc") != 0:
        return None
    result = outcome(params, read.get("stdout", ""))
    if result is None:
        return None
    result["invocation"] = {"module_args": params}
    return remove_values(result, no_log_values(spec, params))


def python_interpreter(action: ActionBase, task_vars: Mapping[str, Any]) -> Optional[str]:
    """The node's Python as a module run of this task would use it, where it is known without
    asking the node: ``ansible_python_interpreter`` set to a plain path, else the interpreter
    Ansible discovered on an earlier module run (the cached fact). None otherwise (a template,
    ``auto``, a delegated task): the module runs, and Ansible finds the interpreter."""
    if action._task.delegate_to:  # pylint: disable=protected-access
        return None
    chosen = task_vars.get("ansible_python_interpreter")
    if chosen is None:
        chosen = (task_vars.get("ansible_facts") or {}).get("discovered_interpreter_python")
    if isinstance(chosen, str) and chosen.startswith("/") and not any(c.isspace() or c in "{}'\"" for c in chosen):
        return chosen
    return None
