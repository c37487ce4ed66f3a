# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Which staged files a node no longer needs, decided from exact data on the controller.

A node's stage folder may hold files outside its shard of this plan: files whose blob is gone
(``gone``: reported, removed only with ``stage_prune``) and, the nodes having changed between
runs, files whose blob another node's shard holds now (``handed``: on node-local storage they
are removed, since node-scope training refuses a file held by two nodes; on shared storage
they are that node's, and stay). Which is which is decided from the plan's exact listing, a
set, never a structure that can say "maybe" (whose false positives would remove files that
neither ``stage_prune`` nor the plan gave away).

The listing stays on the controller: each node's folder is read with one shell command
(:func:`read_command`: its data files and the stage's manifests, no Python), and
:func:`plan_handoff` gives each node its exact ``handed`` and ``gone`` lists, which the
module checks again before it removes anything (names inside the folder, the file there, not
in its own shard). Inside the training job, which has the listing itself,
:func:`local_handoff` decides the same from a walk of the folder. Standard library only.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shlex
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from .azcopy_paths import MANIFEST_DIRNAME, STAGING_DIRNAME, name_problem
from .shards import suffix_of

MARK = "@@amlhpc-stage-folder"
HANDOFF_KEYS = ("handed", "gone")


def staged_names(blob: str, gzip_encoded: bool, decompress: bool) -> tuple[str, ...]:
    """The names a blob can have on disk: ``.gz`` dropped when decompressed, and the blob's own."""
    if decompress and gzip_encoded and blob.endswith(".gz"):
        return (blob[:-3], blob)
    return (blob,)


def candidates(files: Iterable[str], manifests: Mapping[int, Iterable[str]], rank: int,
               suffixes: Sequence[int] | None, shared: bool) -> set[str]:
    """The files that may be this node's and outside its shard.

    Shared storage: what this rank's manifest says it staged before and, in suffix mode,
    every data file carrying one of its suffixes (the other files are other nodes'). Node-local
    storage: every file of the folder is this node's, so what any manifest there lists (a node
    whose rank changed left its files under its old rank) and every CosmoFlow data file.
    """
    if shared:
        out = set(manifests.get(rank, ()))
        wanted = set(suffixes or ())
        if wanted:
            out |= {n for n in files if suffix_of(n) in wanted}
        return out
    out = set()
    for names in manifests.values():
        out |= set(names)
    return out | {n for n in files if suffix_of(n) is not None}


def sort_strays(found: Iterable[str], planned: Container[str], listed: Container[str], shared: bool,
                present: Container[str] | None = None) -> dict[str, list[str]]:
    """``{"handed": [...], "gone": [...]}`` for the ``found`` names outside this node's
    ``planned`` ones (staged names and blob names): a name whose blob is in the plan's
    ``listed`` blob names (exactly, or with ``.gz``) is another node's (``handed`` on node-local
    storage, nothing on shared storage); any other is ``gone``. With ``present`` (the files on
    disk, where known), names not there are left out."""
    handed: list[str] = []
    gone: list[str] = []
    for name in sorted(set(found)):
        if name in planned or (present is not None and name not in present):
            continue
        if name_problem(name) is not None:
            continue  # a name the stage would never write; never removed
        if name in listed or f"{name}.gz" in listed:
            if not shared:
                handed.append(name)
        else:
            gone.append(name)
    return {"handed": handed, "gone": gone}


def planned_names(expected: Iterable[Mapping[str, Any]], decompress: bool) -> set[str]:
    """Every name a shard's files can have on disk (from the plan's ``expected`` rows)."""
    out: set[str] = set()
    for row in expected:
        out.update(staged_names(str(row["name"]), bool(row.get("gzip")), decompress))
    return out


# --- on the controller ---------------------------------------------------------------------


def read_command(dest: str, rank: int, shared: bool, suffixes: Sequence[int] | None = None) -> str:
    """One POSIX shell command listing what :func:`candidates` needs from a node's stage folder,
    base64-encoded so any name survives: the data files (node-local storage: every file
    outside the stage's own folders; shared storage: only files carrying ``suffixes``) and the
    manifests (node-local: every rank's; shared: this rank's). Prints nothing for a missing
    folder; always exits 0 where the commands exist."""
    d = shlex.quote(dest.rstrip("/") or "/")
    steps = ["export LC_ALL=C", f"cd {d} 2>/dev/null || exit 0"]
    prune = f"\\( -path ./{STAGING_DIRNAME} -o -path ./{MANIFEST_DIRNAME} \\) -prune"
    if not shared:
        steps.append(f'printf "{MARK} files "; find . {prune} -o -type f -printf "%P\\0" | base64 -w0; echo')
        manifests = f"./{MANIFEST_DIRNAME}/[0-9]*.json"
    else:
        names = " -o ".join(f"-name {shlex.quote(f'*_{s:03d}.tfrecord')} -o -name {shlex.quote(f'*_{s:03d}.tfrecord.gz')}"
                            for s in sorted(set(suffixes or ())))
        if names:
            steps.append(f'printf "{MARK} files "; find . {prune} -o -type f \\( {names} \\) -printf "%P\\0" '
                         '| base64 -w0; echo')
        manifests = f"./{MANIFEST_DIRNAME}/{int(rank)}.json"
    steps.append(f'for m in {manifests}; do case "$m" in *.progress.json) continue;; esac; '
                 f'[ -f "$m" ] || continue; printf "{MARK} manifest %s " "${{m##*/}}"; base64 -w0 <"$m"; echo; done')
    return "; ".join(steps)


def parse_read(stdout: str) -> tuple[list[str], dict[int, list[str]]]:
    """``(files, {rank: names})`` from :func:`read_command`'s output (both empty for a missing
    folder); ValueError for output it does not print."""
    files: list[str] = []
    manifests: dict[int, list[str]] = {}
    for line in stdout.replace("\r\n", "\n").split("\n"):
        if not line.strip():
            continue
        fields = line.split(" ")
        if fields[0] != MARK or len(fields) < 2:
            raise ValueError(f"unexpected line in the stage folder's read: {line[:80]!r}")
        try:
            if fields[1] == "files" and len(fields) <= 3:
                raw = base64.b64decode(fields[2] if len(fields) == 3 else "", validate=True)
                files += [n.decode("utf-8", "surrogateescape") for n in raw.split(b"\0") if n]
            elif fields[1] == "manifest" and len(fields) == 4 and fields[2].endswith(".json"):
                data = json.loads(base64.b64decode(fields[3], validate=True).decode("utf-8") or "{}")
                listed = data.get("files", {}) if isinstance(data, dict) else {}
                manifests[int(fields[2][:-5])] = [str(n) for n in (listed if isinstance(listed, dict) else {})]
            else:
                raise ValueError(f"unexpected line in the stage folder's read: {line[:80]!r}")
        except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"the stage folder's read does not decode: {exc}") from None
    return files, manifests


def plan_handoff(plan: Mapping[str, Any], reads: Mapping[str, str], *, shared: bool,
                 decompress: bool = True) -> dict[str, dict[str, list[str]]]:
    """``{host: {"handed": [...], "gone": [...]}}`` for the hosts of ``reads`` (``host: the
    stdout of read_command``), from the plan (``azcopy_shards``' result, with its listing).

    Exact: ``handed`` holds only names a file of the folder has and another host's shard plans
    (node-local storage), ``gone`` only names no shard of the plan holds. A host whose read
    does not parse, or a plan without the listing, gets empty lists: nothing is removed there.
    """
    shards = plan.get("shards") or {}
    listed: set[str] = set()
    for entry in shards.values():
        listed.update(entry.get("list_of_files") or [])
    out: dict[str, dict[str, list[str]]] = {}
    for host, stdout in reads.items():
        entry = shards.get(host)
        empty = {"handed": [], "gone": []}
        if entry is None or "expected" not in entry or not plan.get("listed"):
            out[host] = empty
            continue
        try:
            files, manifests = parse_read(stdout or "")
        except ValueError:
            out[host] = empty
            continue
        rank = int(entry.get("rank", 0))
        suffixes = [int(x) for x in entry.get("suffixes") or []] if entry.get("mode") == "suffix" else None
        found = candidates(files, manifests, rank, suffixes, shared)
        present = set(files) if not shared else None
        out[host] = sort_strays(found, planned_names(entry["expected"], decompress), listed, shared, present)
    return out


# --- on the node ---------------------------------------------------------------------------


def local_handoff(stage_dir: str, rank: int, expected: Iterable[Mapping[str, Any]], listed: Container[str], *,
                  suffixes: Sequence[int] | None, shared: bool, decompress: bool = True) -> dict[str, list[str]]:
    """:func:`plan_handoff` for one node that has the listing itself (the training job's stage):
    the folder walked and its manifests read here."""
    files = []
    for dirpath, dirs, names in os.walk(stage_dir):
        dirs[:] = [x for x in dirs if dirpath != stage_dir or x not in (STAGING_DIRNAME, MANIFEST_DIRNAME)]
        files += [os.path.relpath(os.path.join(dirpath, n), stage_dir).replace(os.sep, "/") for n in names]
    manifests: dict[int, list[str]] = {}
    folder = os.path.join(stage_dir, MANIFEST_DIRNAME)
    try:
        entries = os.listdir(folder)
    except OSError:
        entries = []
    for e in entries:
        if not (e.endswith(".json") and e[:-5].isdigit()) or (shared and int(e[:-5]) != rank):
            continue
        try:
            with open(os.path.join(folder, e), encoding="utf-8") as f:
                data = json.load(f)
            manifests[int(e[:-5])] = [str(n) for n in (data.get("files") or {})]
        except (OSError, ValueError, AttributeError):
            continue
    found = candidates(files, manifests, rank, suffixes, shared)
    return sort_strays(found, planned_names(expected, decompress), listed, shared, set(files))


def handoff_problem(handoff: object) -> str | None:
    """Why a module's ``handoff`` option is not ``{"handed": [names], "gone": [names]}``."""
    if not isinstance(handoff, Mapping):
        return "it is not a dict"
    unknown = sorted(set(handoff) - set(HANDOFF_KEYS))
    if unknown:
        return f"it has unknown keys {unknown}: use {', '.join(HANDOFF_KEYS)}"
    for key in HANDOFF_KEYS:
        names = handoff.get(key, [])
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            return f"{key} is not a list of names"
    return None


# --- the stage role's filters ----------------------------------------------------------------


def shard_read_command(shard: Mapping[str, Any], dest: str, shared: bool) -> str:
    """:func:`read_command` for one host's entry of the plan (its rank and suffixes); ValueError
    for a stage folder that cannot be one (``azcopy_paths.folder_problem``)."""
    from .azcopy_paths import folder_problem  # noqa: PLC0415

    why = folder_problem(dest)
    if why is not None:
        raise ValueError(f"stage_dir {dest!r} cannot be a stage folder: {why}.")
    suffixes = [int(x) for x in shard.get("suffixes") or []] if shard.get("mode", "suffix") == "suffix" else None
    return read_command(dest, int(shard.get("rank", 0)), bool(shared), suffixes)


def stage_handoff(plan: Mapping[str, Any], reads: Mapping[str, Any], shared: bool = True,
                  decompress: bool = True) -> dict[str, dict[str, list[str]]]:
    """:func:`plan_handoff` with ``reads`` as the role registers them: ``{host: the raw task's
    result (its stdout) or the stdout itself}``; a skipped or failed read counts as empty."""
    texts = {}
    for host, read in (reads or {}).items():
        if isinstance(read, Mapping):
            read = "" if read.get("skipped") or read.get("failed") else read.get("stdout", "")
        texts[str(host)] = str(read or "")
    return plan_handoff(plan, texts, shared=bool(shared), decompress=bool(decompress))
