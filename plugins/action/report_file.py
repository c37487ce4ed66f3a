# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin: write the run's report page on the controller, with no module run.

Documentation: plugins/modules/report_file.py (the action-only plugin's doc stub).
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.report.report_file import (
    point_link,
    write_new_page,
    write_page,
)

_ARGS = {
    "dest": {"type": "path", "required": True},
    "content": {"type": "str", "required": True},
    "mode": {"type": "raw", "default": "0644"},
    "link": {"type": "path"},
    "unique": {"type": "bool", "default": False},
}
_LOCAL = ("local", "ansible.builtin.local")
_CONTROLLER = ("localhost", "127.0.0.1", "::1")


def file_mode(value: Any) -> int:
    """An octal mode given as a string (``"0644"``) or an int written in octal (``0o644``)."""
    if isinstance(value, int):
        return value
    try:
        return int(str(value), 8)
    except ValueError:
        raise AnsibleActionFail(f"report_file: mode {value!r} is not an octal mode such as '0644'") from None


class ActionModule(ActionBase):
    """Write the page where the play runs, which must be the controller."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _unused, args = self.validate_argument_spec(argument_spec=_ARGS)
        delegated = self._task.delegate_to and str(self._task.delegate_to) not in _CONTROLLER
        if self._play_context.connection not in _LOCAL or delegated:
            raise AnsibleActionFail(
                "report_file writes on the controller: run it in a play on localhost with connection: local "
                f"(this task's connection is {self._play_context.connection!r}"
                f"{', delegated to ' + str(self._task.delegate_to) if self._task.delegate_to else ''})")
        write = write_new_page if args["unique"] else write_page
        try:
            outcome = write(args["dest"], args["content"], file_mode(args["mode"]), check_mode=bool(self._task.check_mode))
        except OSError as exc:
            raise AnsibleActionFail(f"report_file: cannot write {args['dest']}: {exc}") from exc
        if args["link"]:
            try:
                outcome["linked"] = point_link(args["link"], outcome["dest"], check_mode=bool(self._task.check_mode))
            except OSError as exc:
                raise AnsibleActionFail(f"report_file: cannot point {args['link']} at {outcome['dest']}: {exc}") from exc
            outcome["link"] = args["link"]
        result.update(outcome)
        return result
