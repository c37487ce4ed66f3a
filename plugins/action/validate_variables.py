# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin: every role variable the run reads, checked before anything changes.

Documentation: plugins/modules/validate_variables.py (the action-only plugin's doc stub).
Logic: plugins/module_utils/amlhpc/validate/variable_checks.py.
"""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_sas import redact
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.validate.variable_checks import (
    spec_problems,
    variable_problems,
)

_ARGS = {
    "roles_dir": {"type": "path", "required": True},
    "roles": {"type": "list", "elements": "str", "required": True},
    "node_count": {"type": "raw"},
    "fail_on_problems": {"type": "bool", "default": True},
}


class ActionModule(ActionBase):
    """Read each role's argument spec, template each variable it names that the run sets (one at
    a time: one that cannot be read here is a warning, not a stop), and hold them to the specs
    and to the rules between variables."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _unused, args = self.validate_argument_spec(argument_spec=_ARGS)
        specs: dict[str, dict[str, Any]] = {}
        for role in args["roles"]:
            path = os.path.join(args["roles_dir"], role, "meta", "argument_specs.yml")
            try:
                specs[role] = dict(self._loader.load_from_file(path)["argument_specs"]["main"]["options"])
            except (AnsibleError, KeyError, TypeError) as exc:
                raise AnsibleActionFail(f"validate_variables: cannot read the argument spec of role {role} ({path}): "
                                        f"{exc}") from None
        warnings: list[str] = []
        values: dict[str, Any] = {}
        for name in sorted({n for options in specs.values() for n in options}):
            if name not in task_vars:
                continue
            try:
                values[name] = self._templar.template(task_vars[name])
            except AnsibleError as exc:
                detail = (redact(str(exc)).splitlines() or [type(exc).__name__])[0][:200]
                warnings.append(f"{name} could not be read before the run ({detail}): it is checked when its role runs")
        try:
            count = int(args["node_count"]) if args["node_count"] not in (None, "") else None
        except (TypeError, ValueError):
            count = None
        problems = [p for role, options in specs.items() for p in spec_problems(role, options, values)]
        rules = variable_problems(values, specs, count)
        problems += rules["problems"]
        warnings += rules["warnings"]
        result.update(changed=False, problems=problems, checked=list(specs), variables=len(values))
        if warnings:
            result["warnings"] = warnings
        if problems and args["fail_on_problems"]:
            result["failed"] = True
            result["msg"] = "; ".join(problems)
        else:
            result["msg"] = (f"{len(values)} variable(s) of {', '.join(specs)} checked: "
                             + ("; ".join(problems) if problems else "no problem"))
        return result
