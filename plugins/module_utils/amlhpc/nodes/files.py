# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Idempotent file writes for modules that set several files in one call (one module run
on the controller per node instead of a copy/file task per file, each of which costs two).

Runs on the node (shipped by AnsiballZ); plain stdlib plus the AnsibleModule it is given.
"""

from __future__ import annotations

import grp
import os
import pwd
import tempfile
from typing import Any


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def ensure_dir(module: Any, path: str, uid: int, gid: int, mode: int, changed: list[str],
               enforce: bool = True) -> None:
    """``path`` a directory; owner and mode set when ``enforce`` (as ansible.builtin.file
    state=directory does), else only when it is made."""
    if os.path.isdir(path):
        if not enforce:
            return
        st = os.stat(path)
        if (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (uid, gid, mode):
            return
        changed.append(path)
        if not module.check_mode:
            os.chown(path, uid, gid)
            os.chmod(path, mode)
        return
    changed.append(path)
    if not module.check_mode:
        os.makedirs(path, mode=mode)
        os.chown(path, uid, gid)
        os.chmod(path, mode)


def ensure_file(module: Any, path: str, text: str, uid: int, gid: int, mode: int,
                changed: list[str], diffs: list[dict[str, str]], backup: bool = False) -> str | None:
    """``path`` holds ``text`` with this owner and mode; written atomically only when not.
    Returns the backup file made (``backup`` and the content changed), else None."""
    before = read_text(path)
    st = os.stat(path) if before is not None else None
    if before == text and st is not None and (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (uid, gid, mode):
        return None
    changed.append(path)
    if before != text:
        diffs.append({"before_header": path, "after_header": path, "before": before or "", "after": text})
    if module.check_mode:
        return None
    if before == text:
        os.chown(path, uid, gid)
        os.chmod(path, mode)
        return None
    made = module.backup_local(path) if backup and before is not None else None
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".amlhpc-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chown(tmp, uid, gid)
    os.chmod(tmp, mode)
    module.atomic_move(tmp, path, unsafe_writes=False)
    # atomic_move gives a new file the umask's mode, not the temporary file's
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return made


def ensure_absent(module: Any, path: str, changed: list[str], diffs: list[dict[str, str]]) -> None:
    if not os.path.lexists(path):
        return
    changed.append(path)
    diffs.append({"before_header": path, "after_header": path, "before": read_text(path) or "", "after": ""})
    if not module.check_mode:
        os.remove(path)


def _ids(module: Any, item: dict[str, Any]) -> tuple[int, int, int]:
    try:
        return pwd.getpwnam(item["owner"]).pw_uid, grp.getgrnam(item["group"]).gr_gid, int(item["mode"], 8)
    except (KeyError, ValueError) as exc:
        module.fail_json(msg=f"{item['path']}: owner {item['owner']!r}, group {item['group']!r}, "
                             f"mode {item['mode']!r}: {exc}")
        raise  # fail_json exits; for type checkers


def apply(module: Any, directories: list[dict[str, Any]], files: list[dict[str, Any]]) -> dict[str, Any]:
    """Directories (``path``, ``owner``, ``group``, ``mode``) then files (``path``, ``content``,
    ``state`` present/absent, ``owner``, ``group``, ``mode``, ``backup``), as amlhpc_files
    takes them (owner and group default to root, modes to 0755 and 0644). Returns
    ``changed``, ``changed_files``, ``backups`` (by path) and ``diff``."""
    changed: list[str] = []
    diffs: list[dict[str, str]] = []
    backups: dict[str, str] = {}
    for d in directories:
        d = {"owner": "root", "group": "root", "mode": "0755", **d}
        uid, gid, mode = _ids(module, d)
        ensure_dir(module, d["path"], uid, gid, mode, changed)
    for f in files:
        f = {"owner": "root", "group": "root", "mode": "0644", "state": "present", "content": "", "backup": False, **f}
        if f["state"] == "absent":
            ensure_absent(module, f["path"], changed, diffs)
            continue
        uid, gid, mode = _ids(module, f)
        made = ensure_file(module, f["path"], f["content"], uid, gid, mode, changed, diffs, backup=f["backup"])
        if made:
            backups[f["path"]] = made
    return {"changed": bool(changed), "changed_files": changed, "backups": backups, "diff": diffs}


def ensure_folder(path: str, mode: int, check_mode: bool) -> dict[str, Any] | None:
    """``path`` a folder with ``mode``, as ansible.builtin.file state=directory makes it: the
    missing folders on the way made with that mode too, an existing one's mode set (owner
    left as it is). Returns the diff (``before``, ``after``) when something changed (or would,
    in check mode), else None. Raises NotADirectoryError when something else is there."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        now = os.stat(path).st_mode & 0o7777
        if now == mode:
            return None
        if not check_mode:
            os.chmod(path, mode)
        return {"before": {"path": path, "mode": f"{now:04o}"}, "after": {"path": path, "mode": f"{mode:04o}"}}
    missing = []
    here = path
    while not os.path.isdir(here):
        if os.path.lexists(here):
            raise NotADirectoryError(f"{here} exists and is not a folder")
        missing.append(here)
        here = os.path.dirname(here)
    if not check_mode:
        for folder in reversed(missing):
            try:
                os.mkdir(folder, mode)
            except FileExistsError:
                if not os.path.isdir(folder):
                    raise
                continue
            os.chmod(folder, mode)  # mkdir's mode is filtered by the umask
    return {"before": {"path": path, "state": "absent"}, "after": {"path": path, "state": "directory"}}
