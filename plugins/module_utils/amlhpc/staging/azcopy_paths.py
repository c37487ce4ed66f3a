# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Paths built from blob names and node listings stay inside their folder.

A blob name is the planner's and the stage's only handle on a file: ``os.path.join(stage_dir,
name)`` with ``name = "/etc/x"`` is ``/etc/x``, and with ``../x`` a file next to the folder.
Azure allows such names (``<prefix>//etc/x.gz`` lists as ``/etc/x.gz`` below the prefix), and
some that a Linux file system cannot hold (a segment over 255 bytes, a NUL, a file and a folder
of one name). So a name is checked where it is planned (:func:`name_problem`,
:func:`listing_problems`, on the controller) and again on the node before anything is written
or removed under it (:func:`inside`), which also refuses a name whose folder on the way is a
link, out of the stage folder or back into it (``self -> .``: ``self/x`` would remove ``x``, a
file no list named). Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

STAGING_DIRNAME = ".amlhpc-staging"
MANIFEST_DIRNAME = ".amlhpc-staged"
RESERVED = (STAGING_DIRNAME, MANIFEST_DIRNAME)
NAME_MAX = 255  # bytes in one path segment (ext4, xfs, BeeGFS)
PATH_MAX = 4096  # bytes in a whole path (Linux)
# azcopy downloads <folder>/<name> as <folder>/.azDownload-<job id>-<name> first.
AZCOPY_TEMP_OVERHEAD = len(".azDownload-") + 36 + 1
# Room the planner leaves for the stage folder and .amlhpc-staging/<rank>/ in front of a name.
PLAN_ROOM = 512


class UnsafePath(ValueError):
    """A name that would leave its folder or cannot be held there; ``name`` and ``why``."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{name!r} ({why})")
        self.name = name
        self.why = why


def name_problem(name: object, room: int = PLAN_ROOM) -> str | None:
    """Why ``name`` (relative, ``/``-separated) cannot be a file inside a folder, else None.

    Refused: not a string or empty; NUL or another control character (azcopy's list of files
    is one name a line); absolute (a leading ``/``); an empty, ``.`` or ``..`` segment (``//``,
    a trailing ``/``); a first segment that is one of the stage's own folders; a segment over
    255 bytes, a file name too long for azcopy's temporary name; a name that with ``room``
    bytes of folder in front would pass 4096 bytes.
    """
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a name"
    if not name:
        return "it is empty"
    if "\x00" in name:
        return "it holds a NUL character"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "it holds a control character such as a line break"
    if name.startswith("/"):
        return "it starts with '/', which would make it an absolute path"
    segments = name.split("/")
    if "" in segments:
        return "it has an empty path segment ('//' or a trailing '/')"
    if "." in segments or ".." in segments:
        return "it has a '.' or '..' path segment, which would climb out of or around its folder"
    if segments[0] in RESERVED:
        return f"it lies in the stage's own folder {segments[0]}"
    try:
        sizes = [len(s.encode("utf-8")) for s in segments]
        total = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    longest = max(sizes)
    if longest > NAME_MAX:
        return f"a path segment is {longest} bytes, over the file system's {NAME_MAX}"
    if sizes[-1] + AZCOPY_TEMP_OVERHEAD > NAME_MAX:
        return (f"its file name is {sizes[-1]} bytes: azcopy's temporary name for it (.azDownload-<job id>-<name>) "
                f"would pass the file system's {NAME_MAX}")
    if total + room > PATH_MAX:
        return f"it is {total} bytes long, too long for a path of at most {PATH_MAX} bytes with its folder in front"
    return None


def listing_problems(names: Iterable[str]) -> dict[str, str]:
    """``{name: why}`` for names of one folder that the file system cannot hold together: two
    names for one file, or a file whose name is a folder on another's path."""
    seen: set[str] = set()
    folders: dict[str, str] = {}
    out: dict[str, str] = {}
    names = list(names)
    for name in names:
        if name in seen:
            out[name] = "two blobs would be staged as this one file"
        seen.add(name)
        parts = name.split("/")
        for i in range(1, len(parts)):
            folders.setdefault("/".join(parts[:i]), name)
    for name in names:
        if name in folders and name not in out:
            out[name] = f"it would be a file and also the folder of {folders[name]!r}"
    return out


def inside(root: str, name: str) -> str:
    """The path of ``name`` under ``root`` (absolute), where writing or removing it stays in
    ``root``; UnsafePath otherwise: a bad name (:func:`name_problem`, with the real ``root``'s
    length) or a folder on its way that is a link (out of ``root``, or back into it, which would
    make the name another file's)."""
    why = name_problem(name, room=len(os.fsencode(root)) + 1)
    if why is not None:
        raise UnsafePath(name, why)
    path = os.path.join(root, name)
    real_root = os.path.realpath(root)
    parent = os.path.realpath(os.path.dirname(path))
    if parent != real_root and not parent.startswith(real_root.rstrip(os.sep) + os.sep):
        raise UnsafePath(name, f"a folder on its way is a link out of the stage folder, to {parent}")
    if parent != os.path.normpath(os.path.join(real_root, os.path.dirname(name))):
        raise UnsafePath(name, f"a folder on its way is a link, to {parent}, so the name is another file's")
    return path


def unsafe_names(names: Iterable[str], room: int = PLAN_ROOM) -> dict[str, str]:
    """``{name: why}`` for every name :func:`name_problem` refuses."""
    out = {}
    for name in names:
        why = name_problem(name, room)
        if why is not None:
            out[name] = why
    return out


def folder_problem(path: object) -> str | None:
    """Why ``path`` cannot be a stage folder (relative, the root folder, ``.`` or ``..`` in it,
    a NUL), else None."""
    if not isinstance(path, str) or not path:
        return "it is empty"
    if "\x00" in path:
        return "it holds a NUL character"
    if not path.startswith("/"):
        return "it is a relative path: give an absolute one"
    if path.rstrip("/") == "":
        return "it is the root folder /"
    if any(s in (".", "..") for s in path.split("/")):
        return "it has a '.' or '..' segment"
    return None


def shown_problems(problems: dict[str, str], limit: int = 5) -> str:
    """``'a' (why), 'b' (why) and N more``."""
    items = [f"{name!r} ({why})" for name, why in list(problems.items())[:limit]]
    more = len(problems) - limit
    return "; ".join(items) + (f" and {more} more" if more > 0 else "")


def occupied(root: str, names: Iterable[str]) -> dict[str, str]:
    """``{name: why}`` for the file names of ``names`` that the folder ``root`` cannot take as
    it is: a folder already there under that name, or a file where one of its folders goes."""
    out: dict[str, str] = {}
    for name in names:
        path = os.path.join(root, name)
        if os.path.isdir(path):
            out[name] = f"{path} is a folder"
            continue
        parts = name.split("/")
        for i in range(1, len(parts)):
            folder = os.path.join(root, *parts[:i])
            if os.path.lexists(folder) and not os.path.isdir(folder):
                out[name] = f"{folder} is a file, where its folder goes"
                break
    return out


def check_all(names: Sequence[str], root: str) -> dict[str, str]:
    """``{name: why}`` for the names of ``names`` that :func:`inside` refuses under ``root``."""
    out = {}
    for name in names:
        try:
            inside(root, name)
        except UnsafePath as exc:
            out[name] = exc.why
    return out
