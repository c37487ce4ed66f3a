# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugins of modules whose arguments carry a secret: run them pipelined on every
connection, or not at all.

The arguments carry a secret (a SAS token, an account key or a client secret). Without
pipelining Ansible writes the module payload with its arguments to a file on the target
(``AnsiballZ_<module>.py``) for the length of the task: the local connection does so too
unless pipelining is on for it, and ``[ssh_connection] pipelining`` in ansible.cfg applies to
ssh only. :class:`PipelinedOnlyAction` turns pipelining on for the task's connection and
refuses to run when it still cannot be used (a become method or connection without
pipelining, ``ANSIBLE_KEEP_REMOTE_FILES``, or async), so the payload only ever travels on the
interpreter's stdin.

Under Mitogen for Ansible (its strategy swaps every connection for its own) there is no
pipelining to turn on: its runner hands a new-style module its arguments in memory
(``ansible.module_utils.basic._ANSIBLE_ARGS``), never in a file, so the module runs as it is,
unless async (Mitogen's async job is another process).
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase


def _is_mitogen(connection: Any) -> bool:
    """Whether the task runs on one of Mitogen's connections (they all derive from
    ``ansible_mitogen.connection.Connection``; the plugin loader names the plugin's own
    module after Ansible's, so the base classes tell, not the class itself)."""
    return any(cls.__module__.startswith("ansible_mitogen.") for cls in type(connection).__mro__)


def run_pipelined(action: ActionBase, result: dict[str, Any], task_vars: dict[str, Any] | None,
                  module_args: dict[str, Any]) -> dict[str, Any]:
    """The task's module with ``module_args``, run by ``action`` pipelined (or refused, saying
    why it cannot be), into ``result``."""
    # pylint: disable=protected-access
    wrap_async = bool(action._task.async_val)
    mitogen = _is_mitogen(action._connection)
    if not mitogen and action._connection.has_pipelining:
        try:
            action._connection.set_option("pipelining", True)
        except (KeyError, AnsibleError):
            # A connection that declares no pipelining option of its own (community.docker's
            # docker) follows Ansible's setting: ANSIBLE_PIPELINING or ansible_pipelining.
            pass
    # Mitogen keeps a module's arguments in memory unless async; elsewhere only pipelining does.
    in_memory = not wrap_async if mitogen else action._is_pipelining_enabled("new", wrap_async)
    if not in_memory:
        raise AnsibleActionFail(
            f"{action._task.action} carries a secret and runs only pipelined (module and arguments on the interpreter's "
            f"stdin, never in a file): connection {action._connection.transport!r}"
            + (f" with become method {action._play_context.become_method!r}" if action._play_context.become else "")
            + " cannot pipeline here (async, ANSIBLE_KEEP_REMOTE_FILES, a become method without "
            "pipelining such as su, or a connection without a pipelining option of its own while "
            "ANSIBLE_PIPELINING is off). Run it without async, with become_method sudo, and with "
            "ansible_pipelining: true for such a connection.")
    result.update(action._execute_module(module_name=action._task.action, module_args=module_args,
                                         task_vars=task_vars, wrap_async=wrap_async))
    return result


class PipelinedOnlyAction(ActionBase):
    """Run the task's module pipelined, or fail saying why it cannot be."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        return run_pipelined(self, result, task_vars, self._task.args)
