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
    INVENTORY_HOST_VARS,
    names_set_in,
    spec_problems,
    unknown_variable_findings,
    variable_problems,
)

_YAML = (".yml", ".yaml", ".json")

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
        names = self._unknown_names(args["roles_dir"], task_vars)
        problems += names["problems"]
        warnings += names["warnings"]
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

    def _yaml_files(self, folder: str) -> list[str]:
        out = []
        for top, _dirs, files in os.walk(folder):
            # group_vars/all, without an extension, is read by Ansible too.
            out += [os.path.join(top, f) for f in files if f.endswith(_YAML) or "." not in f]
        return sorted(out)

    def _load(self, path: str) -> Any:
        try:
            return self._loader.load_from_file(path)
        except AnsibleError:
            return None  # not this check's to report: Ansible reports a file it cannot read

    def _unknown_names(self, roles_dir: str, task_vars: dict[str, Any]) -> dict[str, list[str]]:
        """Names the run sets that no role of the collection reads (variable_checks.py,
        unknown_variable_findings), each with the group_vars or host_vars file that set it."""
        specs: dict[str, dict[str, Any]] = {}
        known: set[str] = set(INVENTORY_HOST_VARS)
        for role in sorted(os.listdir(roles_dir)):
            spec = os.path.join(roles_dir, role, "meta", "argument_specs.yml")
            if not os.path.isfile(spec):
                continue
            data = self._load(spec) or {}
            specs[role] = dict(((data.get("argument_specs") or {}).get("main") or {}).get("options") or {})
            for kind in ("defaults", "vars"):
                for path in self._yaml_files(os.path.join(roles_dir, role, kind)):
                    data = self._load(path)
                    if isinstance(data, dict):
                        known.update(str(k) for k in data)
            for kind in ("tasks", "handlers"):
                for path in self._yaml_files(os.path.join(roles_dir, role, kind)):
                    known |= names_set_in(self._load(path))
        for path in self._yaml_files(os.path.join(os.path.dirname(roles_dir), "playbooks")):
            known |= names_set_in(self._load(path))
        names = [n for n in task_vars if isinstance(n, str)]
        return unknown_variable_findings(names, specs, known, where=self._where_set(task_vars))

    def _where_set(self, task_vars: dict[str, Any]) -> dict[str, list[str]]:
        """name -> the group_vars and host_vars files beside the inventory sources and the
        playbook that set it (the folders Ansible reads them from), as the user wrote them."""
        folders = [str(task_vars.get("playbook_dir") or "")]
        for source in task_vars.get("ansible_inventory_sources") or []:
            folders.append(str(source) if os.path.isdir(str(source)) else os.path.dirname(str(source)))
        where: dict[str, list[str]] = {}
        seen = set()
        for folder in folders:
            for kind in ("group_vars", "host_vars"):
                base = os.path.join(folder, kind)
                if not folder or base in seen or not os.path.isdir(base):
                    continue
                seen.add(base)
                for path in self._yaml_files(base):
                    data = self._load(path)
                    if isinstance(data, dict):
                        for name in data:
                            where.setdefault(str(name), []).append(os.path.relpath(path))
        return where
