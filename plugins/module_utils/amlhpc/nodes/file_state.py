# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""What a few files and folders on a node hold, read with one POSIX shell command.

An action plugin whose module writes files (``files.ensure_file`` / ``ensure_dir``) can read
their state first with :func:`read_command` (no Python on the node: a shell command costs the
node a few ms of CPU where a module run costs about 0.16 s, bench/task_kinds_bench.py),
parse it with :func:`parse_read`, and run the module only where :func:`file_unchanged` or
:func:`dir_unchanged` says the module would change something. Any output it does not expect
makes :func:`parse_read` return None: the module runs then, as before.

Standard library only.
"""

from __future__ import annotations

import base64
import binascii
import shlex
from dataclasses import dataclass
from typing import Optional, Sequence

MARK = "@@amlhpc-file"
SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")


@dataclass(frozen=True)
class FileState:
    """``kind``: ``file``, ``dir``, ``other`` (something else is there) or ``absent``;
    for a file or folder its owner, group and permission bits (``mode & 0o7777``), for a
    file its text (UTF-8)."""

    kind: str
    uid: int = -1
    gid: int = -1
    mode: int = 0
    text: Optional[str] = None


def which_command(name: str, var: str) -> str:
    """Shell that sets ``$var`` to the executable ``name`` as a module finds it: a path as
    given, when it can run; a bare name on PATH, then in the sbin folders
    (``AnsibleModule.get_bin_path``). Empty when there is none."""
    quoted = shlex.quote(name)
    if "/" in name:
        return f'{var}={quoted}; if [ ! -x "${var}" ] || [ -d "${var}" ]; then {var}=; fi'
    return (f'{var}=; IFS=:; for d in $PATH:{":".join(SBIN)}; do '
            f'if [ -x "$d/{quoted}" ] && [ ! -d "$d/{quoted}" ]; then {var}="$d/{quoted}"; break; fi; done; unset IFS')


def read_command(paths: Sequence[str], users: Sequence[str] = (), groups: Sequence[str] = ()) -> str:
    """One shell command printing each path's state (symlinks followed, as ``os.stat`` and
    ``open`` do) and each user's passwd line; it prints a failure mark when ``stat``,
    ``base64``, ``getent`` or ``cut`` is missing. A path ``~USER/rest`` is under that user's
    home folder (from the passwd database, as ``pwd.getpwnam``)."""
    steps = [f'for t in stat base64 getent cut; do command -v "$t" >/dev/null 2>&1 || '
             f'{{ echo "{MARK} missing $t"; exit 0; }}; done']
    for i, path in enumerate(paths):
        if path.startswith("~") and "/" in path:
            user, rest = path[1:].split("/", 1)
            where = f'p="$(getent passwd {shlex.quote(user)} | cut -d: -f6)"/{shlex.quote(rest)}'
        else:
            where = f"p={shlex.quote(path)}"
        steps.append(
            f'{where}; if [ -d "$p" ]; then echo "{MARK} {i} dir $(stat -L -c "%u %g %a" "$p")"; '
            f'elif [ -f "$p" ]; then echo "{MARK} {i} file $(stat -L -c "%u %g %a" "$p")"; base64 -w0 < "$p"; echo; '
            f'elif [ -e "$p" ] || [ -L "$p" ]; then echo "{MARK} {i} other"; '
            f'else echo "{MARK} {i} absent"; fi')
    for user in users:
        steps.append(f'echo "{MARK} user $(getent passwd {shlex.quote(user)} || true)"')
    for group in groups:
        steps.append(f'echo "{MARK} group $(getent group {shlex.quote(group)} || true)"')
    return "; ".join(steps)


def parse_read(stdout: str, paths: Sequence[str], users: Sequence[str] = (), groups: Sequence[str] = ()
               ) -> Optional[tuple[dict[str, FileState], dict[str, Optional[tuple[int, int, str]]]]]:
    """``({path: FileState}, {user: (uid, gid, home) or None when there is no such user})``
    from :func:`read_command`'s output (with ``groups``, also ``{"group:NAME": (gid, gid, "")}``
    or None); None when the output is not what it prints."""
    lines = stdout.splitlines()
    states: dict[str, FileState] = {}
    found: dict[str, Optional[tuple[int, int, str]]] = {}
    i = 0
    try:
        for n, path in enumerate(paths):
            head = lines[i].split(" ")
            i += 1
            if head[:2] != [MARK, str(n)]:
                return None
            kind = head[2]
            if kind in ("other", "absent") and len(head) == 3:
                states[path] = FileState(kind)
                continue
            if kind not in ("dir", "file") or len(head) != 6:
                return None
            uid, gid, mode = int(head[3]), int(head[4]), int(head[5], 8) & 0o7777
            text = None
            if kind == "file":
                text = base64.b64decode(lines[i], validate=True).decode("utf-8")
                i += 1
            states[path] = FileState(kind, uid, gid, mode, text)
        for user in users:
            entry = _database_entry(lines[i], "user", user, 7)
            i += 1
            found[user] = None if entry is None else (int(entry[2]), int(entry[3]), entry[5])
        for group in groups:
            entry = _database_entry(lines[i], "group", group, 4)
            i += 1
            found[f"group:{group}"] = None if entry is None else (int(entry[2]), int(entry[2]), "")
    except (IndexError, ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if i != len(lines):
        return None
    return states, found


def _database_entry(line: str, kind: str, name: str, fields: int) -> Optional[list[str]]:
    """The fields of a ``getent`` line the read printed for ``name`` (None: no such entry);
    ValueError when the line is not one."""
    prefix = f"{MARK} {kind} "
    if not (line.startswith(prefix) or line == prefix.rstrip()):
        raise ValueError(line)
    entry = line[len(prefix):].split(":")
    if entry == [""]:
        return None
    if len(entry) != fields or entry[0] != name:
        raise ValueError(line)
    return entry


def dir_unchanged(state: FileState, uid: int, gid: int, mode: int, enforce: bool = True) -> bool:
    """Whether ``files.ensure_dir`` would leave this folder as it is."""
    if state.kind != "dir":
        return False
    return not enforce or (state.uid, state.gid, state.mode) == (uid, gid, mode)


def file_unchanged(state: FileState, text: str, uid: int, gid: int, mode: int) -> bool:
    """Whether ``files.ensure_file`` would leave this file as it is."""
    return state.kind == "file" and state.text == text and (state.uid, state.gid, state.mode) == (uid, gid, mode)
