# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugins of modules whose arguments carry a secret: run them pipelined, or not at all.

The arguments carry a secret (a SAS token, an account key or a client secret). Without
pipelining Ansible writes the module payload with its arguments to a file on the target
(``AnsiballZ_<module>.py``) for the length of the task; the local connection does so too.
Pipelining is the user's setting, read by Ansible as for any connection: ``pipelining`` in
ansible.cfg's ``[connection]`` section (or ``[ssh_connection]`` for ssh), ``ANSIBLE_PIPELINING``,
or the ``ansible_pipelining`` variable (inventory or play vars; it wins). :func:`run_pipelined`
changes none of it: it asks the task's connection, through its public interface, whether the
module will be pipelined, and refuses in one sentence where it will not (pipelining off, a
become method or connection without pipelining, ``ANSIBLE_KEEP_REMOTE_FILES``, or async), so
the payload only ever travels on the interpreter's stdin.

Under Mitogen for Ansible (its strategy swaps every connection for its own) there is no
pipelining to ask about: its runner hands a new-style module its arguments in memory
(``ansible.module_utils.basic._ANSIBLE_ARGS``), never in a file, so the module runs as it is,
unless async (Mitogen's async job is another process).
"""

from __future__ import annotations

from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

_FIX = ("set ansible_pipelining: true (inventory or play vars) or pipelining = true in ansible.cfg's [connection] "
        "section")


def _is_mitogen(connection: Any) -> bool:
    """Whether the task runs on one of Mitogen's connections (they all derive from
    ``ansible_mitogen.connection.Connection``; the plugin loader names the plugin's own
    module after Ansible's, so the base classes tell, not the class itself)."""
    return any(cls.__module__.startswith("ansible_mitogen.") for cls in type(connection).__mro__)


def _pipelining_setting(connection: Any, play_context: Any) -> bool:
    """The connection's pipelining option as the user set it (False where it has none)."""
    try:
        return bool(connection.get_option("pipelining"))
    except (KeyError, AttributeError, ValueError):  # a connection without the option: the play's setting
        return bool(getattr(play_context, "pipelining", False))


def why_not_pipelined(connection: Any, play_context: Any, wrap_async: bool, keep_remote_files: bool) -> str | None:
    """Why a new-style module would not be pipelined on ``connection`` (None: it will be).

    The conditions are ansible-core's own, through the connection's public interface:
    ``is_pipelining_enabled`` (ansible-core 2.19 and later: the option, the become plugin, async);
    on 2.18 the same from ``has_pipelining``, the ``pipelining`` option, ``always_pipeline_modules``
    and the become method (su cannot pipeline). ``ANSIBLE_KEEP_REMOTE_FILES`` writes the file anyway."""
    if keep_remote_files:
        return "ANSIBLE_KEEP_REMOTE_FILES keeps the module in a file on the node: unset it"
    if wrap_async:
        return "async runs the module from a file on the node: run it without async"
    become = getattr(connection, "become", None)
    become_name = getattr(become, "name", None) if become is not None else None
    check = getattr(connection, "is_pipelining_enabled", None)  # public since ansible-core 2.19
    if check is not None:
        if check(wrap_async):
            return None
    elif (connection.has_pipelining and (_pipelining_setting(connection, play_context)
                                         or connection.always_pipeline_modules) and become_name != "su"):
        return None
    if not connection.has_pipelining:
        return f"connection {connection.transport!r} cannot pipeline: use ssh or local"
    if become_name and not getattr(become, "pipelining", become_name != "su"):
        return f"become method {become_name!r} cannot pipeline: use become_method sudo"
    return f"pipelining is off for connection {connection.transport!r}: {_FIX}"


def run_pipelined(action: ActionBase, result: dict[str, Any], task_vars: dict[str, Any] | None,
                  module_args: dict[str, Any]) -> dict[str, Any]:
    """The task's module with ``module_args``, run by ``action`` pipelined (or refused, saying
    why it cannot be), into ``result``."""
    # _task, _connection, _play_context, _execute_module: what ActionBase hands its plugins.
    # pylint: disable=protected-access
    wrap_async = bool(action._task.async_val)
    if _is_mitogen(action._connection):
        # Mitogen keeps a module's arguments in memory unless async.
        refused = "async runs the module from a file on the node: run it without async" if wrap_async else None
    else:
        refused = why_not_pipelined(action._connection, action._play_context, wrap_async,
                                    bool(C.DEFAULT_KEEP_REMOTE_FILES))
    if refused:
        raise AnsibleActionFail(
            f"{action._task.action} carries a secret and runs only pipelined (module and arguments on the interpreter's "
            f"stdin, never in a file), and {refused}.")
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
