# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""A role's argument check inside the role's one task per node, instead of a task of its own.

Ansible checks a role's variables against its ``meta/argument_specs.yml`` with a task it
puts in front of the role's tasks (``ansible.builtin.validate_argument_spec``), one more
host-task per node: on the controller it costs about as much as a module run. The node
playbooks import nvme_raid, gpu_clocks and nccl with ``rolespec_validate: false``, and the
role's first task, whose action runs on every node anyway, makes the same check with
:func:`role_argument_errors` before it does anything: the same spec, the same variables
templated the same way, the same message and ``argument_errors`` when it fails. Where the
role was loaded with Ansible's own check (``roles:``, ``include_role`` without
``rolespec_validate: false``), nothing is checked twice.

One difference in cost, not in verdict: a dict or list whose spec does not look inside it
(no ``options``, ``elements`` or ``choices``) is not templated, because the validator's
verdict on it is its type alone, and templating does not change the type of a dict or a
list. That spares every node's check the walk of ``stage_plan`` (the azcopy_shards result
every node of the play holds, every blob of the data set in it): 2.3 s of controller CPU
per node for a 65,536-file data set (``bench/role_check_bench.py``). A template inside such a
value is still resolved, and fails when it cannot be, where a task uses the value.

The variables are templated in the spec's order, each one with those already templated in
place of their templates: a role variable built from others (healthcheck_nccl_node_args from
healthcheck_nccl_message from healthcheck_vm_size from aml_vm_size) is not templated again for
each variable that names it. The values are the same; the health check's role check compiled 12
templates fewer per node.
"""

from __future__ import annotations

import os
from collections import ChainMap
from collections.abc import Mapping
from typing import Any

import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.task_args import PassedOnArgs


_SPECS: dict[str, dict[str, Any]] = {}
"""The specs read in this process, by role path. The template_cache callback reads a role's
spec in the main process when its first task starts (:func:`role_argspecs`), so that the
worker forked for each node finds it read instead of reading the file again."""


def role_argspecs(role: Any) -> dict[str, Any]:
    """The role's ``argument_specs``, as ``Role._get_role_argspecs`` finds them (its
    ``meta/argument_specs.yml``, else ``meta/main.yml``'s), read with libyaml, once per
    process and role (:data:`_SPECS`).

    The check runs in every node's task, in a worker forked for that task alone, so nothing
    read there is kept for the next: Ansible's own loader took about 9 ms of CPU for a 4.5 kB
    spec, libyaml 1-3 ms in a worker (the specs are plain YAML: no vault, no tags), a spec
    the main process read before the fork nothing."""
    # pylint: disable=protected-access
    known = _SPECS.get(role._role_path)
    if known is not None:
        return known
    specs = None
    for ext in (".yml", ".yaml"):
        path = os.path.join(role._role_path, "meta", "argument_specs" + ext)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                data = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # nosec B506: a safe loader
            specs = (data.get("argument_specs") if isinstance(data, dict) else None) or {}
            break
    if specs is None:
        specs = role._get_role_argspecs() or {}
    _SPECS[role._role_path] = specs
    return specs


def read_before_fork(role: Any) -> None:
    """In the main process, at a role's first task: read its spec where its tasks check it
    themselves (loaded with ``rolespec_validate: false``), for the workers to inherit."""
    if role is not None and not getattr(role, "_should_validate", True) and getattr(role, "_role_path", None):
        try:
            role_argspecs(role)
        except Exception:  # pylint: disable=broad-exception-caught  # the task's own read fails and says why
            pass


def _as_checked(templar: Any, value: Any, option: dict[str, Any]) -> tuple[bool, Any]:
    """What the validator gets for one option: (True, the value templated), or, for a dict or
    list whose spec checks only its type, (False, an empty one of that type): the same
    verdict, without templating and copying what it holds."""
    kind = option.get("type", "str")
    if not any(k in option for k in ("options", "elements", "choices")) and (
            (kind == "dict" and isinstance(value, Mapping)) or (kind == "list" and isinstance(value, list))):
        return False, {} if kind == "dict" else []
    return True, templar.template(value)


def checked_values(templar: Any, task_vars: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """The values the validator gets, in the spec's order; each variable templated is put in
    place of its template for the variables after it (module docstring)."""
    templated: dict[str, Any] = {}
    over = templar.copy_with_new_env(available_variables=ChainMap(templated, task_vars))
    provided = {}
    for k in options:
        if k in task_vars:
            done, provided[k] = _as_checked(over, task_vars[k], options[k] or {})
            if done:
                templated[k] = provided[k]
    return provided


def role_argument_errors(action: Any, task_vars: dict[str, Any]) -> dict[str, Any] | None:
    """A failed result like validate_argument_spec's when the task's role was loaded
    without its argument check and its variables do not fit the role's spec for its entry
    point; None otherwise."""
    # pylint: disable=protected-access
    role = getattr(action._task, "_role", None)
    if role is None or getattr(role, "_should_validate", True):
        return None
    entry = (getattr(role, "_from_files", None) or {}).get("tasks") or "main"
    spec = role_argspecs(role).get(entry) or {}
    options = spec.get("options") or {}
    if not options:
        return None
    provided = checked_values(action._templar, task_vars, options)
    errors = ArgumentSpecValidator(options).validate(provided, validate_role_argument_spec=True).error_messages
    if not errors:
        return None
    return {"failed": True, "msg": "Validation of arguments failed:\n" + "\n".join(errors),
            "argument_errors": errors, "argument_spec_data": options,
            "validate_args_context": {"type": "role", "name": role.get_name(), "argument_spec_name": entry,
                                      "path": role._role_path}}


class RoleCheckedAction(PassedOnArgs, ActionBase):
    """The action of a role's one task per node: the role's argument check first
    (:func:`role_argument_errors`), then the task's own work, :meth:`run_checked`. Its
    arguments that hand a variable on are resolved without a template (task_args.py)."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        invalid = role_argument_errors(self, task_vars or {})
        if invalid:
            result.update(invalid)
            return result
        return self.run_checked(result, task_vars)

    def run_checked(self, result: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
        """The task's work once the role's variables passed; ``result`` is ActionBase's."""
        raise NotImplementedError
