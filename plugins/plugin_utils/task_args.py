# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Task arguments that hand one variable on, resolved without compiling a template.

A role's one task per node passes most of the role's variables to its action as
``option: "{{ role_variable }}"``. Ansible compiles each such string into a Jinja template in
the worker it forks for that one host-task, and keeps nothing for the next worker: every node
pays for every argument again, 0.6-1 ms of controller CPU each (AMD EPYC,
``bench/task_args_bench.py``), about 70 of them per node over the node roles.

The value of ``"{{ name }}"`` is the value of the variable ``name``, templated. Where an
argument (or a value inside a dict or list argument) is exactly that, a trusted template
naming a variable the host has, :func:`passed_on` puts the variable's own value in its place,
and the templar templates the whole argument as before: a plain value is returned as it is
(no compile), a template in the variable is rendered as Jinja would render it, ``omit`` drops
the argument as before. Anything else (a filter, two names, ``omit`` itself, a name the host
does not have, which must fail as Ansible fails it) is left to Ansible's own templating.

The actions hook in through ``ActionBase.finalize_task_arg``, which ansible-core (2.19 and
later) calls for each task argument (its own ``assert`` action uses it). A test runs the real
``Task.post_validate`` of every role's task both ways and compares each argument
(``tests/unit/test_task_args.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.template import is_trusted_as_template

_ONE_NAME = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}\Z")
# What a variable's own value is when it comes from YAML, the inventory or a fact.
_PLAIN = (str, int, float, bool, type(None), dict, list)


def passed_variable(value: Any) -> str | None:
    """The name ``value`` hands on when it is exactly a trusted ``{{ name }}``, else None."""
    if not isinstance(value, str) or "{{" not in value or not is_trusted_as_template(value):
        return None
    found = _ONE_NAME.match(value)  # exactly: a space around it makes Jinja return a string
    return found.group(1) if found and found.group(1) != "omit" else None


def passed_on(value: Any, variables: Mapping[str, Any]) -> tuple[bool, Any]:
    """(True, ``value`` with each ``{{ name }}`` replaced by the variable's own value) where
    there is at least one to replace; (False, ``value``) otherwise."""
    name = passed_variable(value)
    if name is not None:
        if name in variables and isinstance(variables[name], _PLAIN):
            return True, variables[name]
        return False, value
    if isinstance(value, dict):
        keys = list(value)
        found = [passed_on(value[k], variables) for k in keys]
        if any(done for done, resolved in found):
            return True, {k: resolved for k, (done, resolved) in zip(keys, found)}
    elif isinstance(value, list):
        found = [passed_on(v, variables) for v in value]
        if any(done for done, resolved in found):
            return True, [resolved for done, resolved in found]
    return False, value


class PassedOnArgs:
    """Mixin for an action plugin (before ``ActionBase`` in its bases): its task's arguments
    that hand a variable on are resolved by :func:`passed_on`."""

    @classmethod
    def finalize_task_arg(cls, name: str, value: Any, templar: Any, context: Any) -> Any:
        """ansible-core's hook for each task argument (``ActionBase.finalize_task_arg``)."""
        done, resolved = passed_on(value, templar.available_variables)
        if done:
            return templar.template(resolved)
        return super().finalize_task_arg(name, value, templar, context)  # type: ignore[misc]
