# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Write the run's report page on the controller (the ``report_file`` action): the folder made
where missing, the page replaced atomically (a reader never sees half a page), nothing written
in check mode. Plain functions, tested directly."""

from __future__ import annotations

import os
import tempfile
from typing import Any


def write_page(dest: str, content: str, mode: int = 0o644, dir_mode: int = 0o755,
               check_mode: bool = False) -> dict[str, Any]:
    """Write ``content`` (UTF-8) to ``dest``, making its folder (``dir_mode``) where missing.

    Returns ``{"dest", "size", "changed", "created_dir"}``: ``changed`` is true where the bytes
    or the mode on disk differ (or would, in check mode, where nothing is written). The page is
    written to a temporary file in the same folder and renamed over ``dest``; on an error the
    temporary file is removed and the ``OSError`` raised.
    """
    data = content.encode("utf-8")
    folder = os.path.dirname(os.path.abspath(dest))
    created_dir = not os.path.isdir(folder)
    try:
        with open(dest, "rb") as f:
            same = f.read() == data and (os.stat(dest).st_mode & 0o7777) == mode
    except FileNotFoundError:
        same = False
    result = {"dest": dest, "size": len(data), "changed": not same, "created_dir": created_dir}
    if check_mode or same:
        return result
    tmp = _temporary_copy(folder, data, mode, dir_mode, created_dir)
    try:
        os.replace(tmp, dest)
    except OSError:
        os.unlink(tmp)
        raise
    return result


def _temporary_copy(folder: str, data: bytes, mode: int, dir_mode: int, created_dir: bool) -> str:
    """``data`` in a new temporary file in ``folder`` (made where missing), ``mode`` set; its
    name. Removed again where writing it fails."""
    if created_dir:
        os.makedirs(folder, mode=dir_mode, exist_ok=True)
        os.chmod(folder, dir_mode)  # makedirs' mode is masked by the umask
    fd, tmp = tempfile.mkstemp(prefix=".report-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
    except OSError:
        os.unlink(tmp)
        raise
    return tmp


def _numbered(dest: str, n: int) -> str:
    stem, ext = os.path.splitext(dest)
    return dest if n == 1 else f"{stem}-{n}{ext}"


def write_new_page(dest: str, content: str, mode: int = 0o644, dir_mode: int = 0o755,
                   check_mode: bool = False) -> dict[str, Any]:
    """Write ``content`` as a page of its own: at ``dest`` where nothing is there, else at the
    first free ``<stem>-2<ext>``, ``<stem>-3<ext>``, ... Taken atomically (the temporary file is
    hard-linked to the name, which fails where a file is), so two runs that name their pages the
    same (started in the same second) keep two pages. Returns :func:`write_page`'s keys, ``dest``
    the name taken (in check mode the one that would be)."""
    data = content.encode("utf-8")
    folder = os.path.dirname(os.path.abspath(dest))
    created_dir = not os.path.isdir(folder)
    if check_mode:
        n = 1
        while os.path.lexists(_numbered(dest, n)):
            n += 1
        return {"dest": _numbered(dest, n), "size": len(data), "changed": True, "created_dir": created_dir}
    tmp = _temporary_copy(folder, data, mode, dir_mode, created_dir)
    try:
        n = 1
        while True:
            try:
                os.link(tmp, _numbered(dest, n))
                break
            except FileExistsError:
                n += 1
    finally:
        os.unlink(tmp)
    return {"dest": _numbered(dest, n), "size": len(data), "changed": True, "created_dir": created_dir}


def point_link(link: str, target: str, check_mode: bool = False) -> bool:
    """Make ``link`` a symbolic link to ``target`` (relative to the link's folder where the
    target is beside or below it), replacing what is there (an older run's page, a link)
    atomically; True where it changed (or would, in check mode)."""
    folder = os.path.dirname(os.path.abspath(link))
    rel = os.path.relpath(os.path.abspath(target), folder)
    value = rel if not rel.startswith("..") else os.path.abspath(target)
    if os.path.islink(link) and os.readlink(link) == value:
        return False
    if check_mode:
        return True
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".link-{os.getpid()}-{os.path.basename(link)}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(value, tmp)
    try:
        os.replace(tmp, link)
    except OSError:
        os.unlink(tmp)
        raise
    return True
