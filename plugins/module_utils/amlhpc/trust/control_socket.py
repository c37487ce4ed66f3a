# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Whether ssh can make a node's control socket, before any task connects.

Ansible's ssh connection keeps one ssh master per node (ControlMaster/ControlPersist) behind a
unix socket at ``control_path`` with ``%(directory)s`` replaced by ``control_path_dir`` (a
relative folder is taken from the controller's working folder, as the ssh connection does). ssh
binds the socket at ``<path>.<16 random characters>`` first and renames it (OpenSSH's mux.c),
and a unix socket's path holds at most 107 bytes: past that ssh refuses the node ("too long for
Unix domain socket") on every task. The project's ``control_path_dir`` is ``.cache/cp`` of the
project, so a project folder deeper than about 67 characters meets it. Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Mapping
from typing import Any

from .host_key_checks import ARG_OPTIONS, resolved

UNIX_PATH_MAX = 107
"""The bytes of a unix socket's path (``sun_path``'s 108, less the closing NUL)."""
SSH_TEMP_SUFFIX = 17
"""What ssh adds to the control path while it binds the socket: ``.`` and 16 random characters."""
SSH_CONNECTIONS = frozenset({"ssh", "smart", "ansible.builtin.ssh", "ansible.legacy.ssh"})

CONTROL_PATH_VARS = ("ansible_control_path",)
CONTROL_PATH_DIR_VARS = ("ansible_control_path_dir",)
DEFAULT_CONTROL_PATH_DIR = "~/.ansible/cp"
DEFAULT_SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=60s"
"""The ssh connection's ``ssh_args`` where none is set (its documented default)."""


def _makes_control_path(settings: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """Whether Ansible's ssh connection adds a ControlPath of its own: where ControlPersist is on
    ssh's command line (ssh_args, common and extra args) and no ControlPath is (its rule,
    ``_persistence_controls``)."""
    words = []
    for option, names, _where in ARG_OPTIONS:
        if option not in ("ssh_args", "ssh_common_args", "ssh_extra_args"):
            continue  # sftp's and scp's, for file transfers
        value, _unused = resolved(settings, config, option, names, "")
        words.append(DEFAULT_SSH_ARGS if option == "ssh_args" and value is None else str(value or ""))
    said = " ".join(words).lower()
    return "controlpersist" in said and "controlpath" not in said


def _ssh_tokens(path: str, host: str, port: str, user: str) -> str:
    """``path`` with ssh's ControlPath tokens spelled out as ssh would (``%C`` is 40 hex digits)."""
    out, i = [], 0
    while i < len(path):
        if path[i] == "%" and i + 1 < len(path):
            token = path[i + 1]
            out.append({"%": "%", "C": "0" * 40, "h": host, "n": host, "p": port, "r": user,
                        "l": socket.gethostname(), "L": socket.gethostname().split(".")[0]}.get(token, path[i:i + 2]))
            i += 2
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def control_socket_path(settings: Mapping[str, Any], config: Mapping[str, Any] | None = None, *,
                        host: str = "", cwd: str | None = None) -> str:
    """The path of the node's ssh control socket, as Ansible's ssh connection and ssh make it.

    ``settings``: the host's variables (``ansible_host``, ``ansible_port``, ``ansible_user``, those
    of :data:`CONTROL_PATH_VARS` and :data:`CONTROL_PATH_DIR_VARS`); ``config``: the ssh
    connection's ``control_path`` and ``control_path_dir`` from the environment and ansible.cfg;
    ``host``: the inventory name, the address where ``ansible_host`` is not set."""
    config = config or {}
    folder, _unused = resolved(settings, config, "control_path_dir", CONTROL_PATH_DIR_VARS, "")
    folder = DEFAULT_CONTROL_PATH_DIR if folder is None else str(folder)
    # ansible.utils.path.unfrackpath, as the ssh connection takes the folder
    folder = os.path.normpath(os.path.realpath(os.path.join(cwd or os.getcwd(),
                                                            os.path.expanduser(os.path.expandvars(folder)))))
    host = str(settings.get("ansible_host") or host)
    port = str(settings.get("ansible_port") or 22)
    user = str(settings.get("ansible_user") or "")
    template, _unused = resolved(settings, config, "control_path", CONTROL_PATH_VARS, "")
    if not template:  # the ssh connection's own: 10 hex digits of a hash of host, port and user
        template = "%(directory)s/" + hashlib.sha1(f"{host}-{port}-{user}".encode()).hexdigest()[:10]
    try:
        path = str(template) % {"directory": folder}  # as the ssh connection fills it in
    except (TypeError, ValueError, KeyError):
        path = str(template).replace("%(directory)s", folder).replace("%%", "%")
    return _ssh_tokens(path, host, port, user)


def control_socket_problem(host: str, settings: Mapping[str, Any], config: Mapping[str, Any] | None = None, *,
                           cwd: str | None = None) -> str:
    """``""`` where ssh can make ``host``'s control socket (or the host is not reached over ssh, or
    Ansible makes no control path for it), else the sentence that names the length and the fix."""
    config = config or {}
    connection = str(settings.get("ansible_connection") or "ssh")
    if connection not in SSH_CONNECTIONS or not _makes_control_path(settings, config):
        return ""
    path = control_socket_path(settings, config, host=host, cwd=cwd)
    length = len(path.encode()) + SSH_TEMP_SUFFIX
    if length <= UNIX_PATH_MAX:
        return ""
    return (f"host {host}: ssh's control socket would be {length} bytes long ({path}.<16 characters>), past the "
            f"{UNIX_PATH_MAX} a unix socket takes, and ssh would refuse the node ('too long for Unix domain socket'): "
            "set ANSIBLE_SSH_CONTROL_PATH_DIR (or control_path_dir in ansible.cfg's [ssh_connection]) to a shorter "
            "folder, such as /tmp/amlhpc-cp")
