# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Stage one node's shard: bring the stage folder in line with the plan, safely and resumably.

Shared by the ``azcopy_stage`` module (Ansible) and ``workload/cosmoflow/stage.py`` (the
training job), so both stage the same way. Standard library only.

With the listing (``expected``: name, size after staging, SHA-256 of every blob of the
shard), a run is a sync:

1. Survey: every planned file is checked on disk, its size always, its content too with
   ``verify="checksum"``. Files that are missing or wrong are the ones to fetch; the
   others are left alone (a rerun compares the plan with the disk by name and size, never
   by count).
2. Fetch: wrong files are removed, then one azcopy copies exactly the files to fetch
   (``--list-of-files``, never the whole shard again; a shard fetched whole in suffix mode
   goes by its ``--include-pattern``, which azcopy enumerates much faster) into
   ``<stage_dir>/.amlhpc-staging/<rank>/`` with ``--overwrite=false``: what a killed run
   finished there is not fetched again; azcopy's ``.azDownload-*`` leftovers are removed
   first. Only after azcopy reports the job complete are the files moved (``os.replace``)
   to their final names (``.gz`` dropped when azcopy decompressed them), so a file under
   its final name is always whole. Each fetched file is checked again; one still wrong
   fails the stage, named.
3. Gone: files this node staged before (its manifest ``.amlhpc-staged/<rank>.json``) or,
   in suffix mode, files carrying its suffixes, whose blob is no longer listed. They are
   reported, and removed only with ``prune``.
4. Handed over (node-local storage, ``shared=False``): a file whose blob another node's
   shard holds now (the nodes changed between runs) is removed, as are the files an
   earlier rank of this node staged in the folder, since node-scope training refuses a
   file held by two nodes. On shared storage such a file is the other node's and stays.

``changed`` is true exactly when a file was fetched or removed.

Without the listing (a node without the Azure SDK, suffix mode) azcopy's own transfer
count is the plan and a finished stage is recognised by its manifest.

No secret is written anywhere: a SAS travels only in azcopy's argv (with an identity there
is none, see ``azcopy_cmd``), azcopy's job plans and logs go to a private temporary folder
that is removed afterwards, and every message goes through ``redact``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Container, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .azcopy_cmd import copy_download_command, with_auth_env
from .azcopy_files import (
    MANIFEST_DIRNAME,
    STAGING_DIRNAME,
    VERIFY_MODES,
    ExpectedFile,
    check_file,
    finalize,
    locate,
    private_azcopy_env,
    remove_partial,
    shown,
    walk_files,
)
from .azcopy_progress import ProgressSeries, explain_failure, run_azcopy
from .shards import suffix_of


class StageError(RuntimeError):
    """Staging failed; the message is one or a few sentences a person can act on (no secrets)."""


def _shard_key(source_url: str, include_pattern: str | None, blobs: Sequence[str] | None, decompress: bool) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([source_url, include_pattern or "", list(blobs or []), decompress]).encode())
    return h.hexdigest()


def _manifest_path(stage_dir: str, rank: int) -> str:
    return os.path.join(stage_dir, MANIFEST_DIRNAME, f"{rank}.json")


def _read_manifest(stage_dir: str, rank: int) -> dict[str, Any]:
    try:
        with open(_manifest_path(stage_dir, rank), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _manifest_ok(stage_dir: str, rank: int, key: str) -> dict[str, int] | None:
    data = _read_manifest(stage_dir, rank)
    if data.get("key") != key:
        return None
    files = data.get("files", {})
    for name, size in files.items():
        path = os.path.join(stage_dir, name)
        if not os.path.isfile(path) or os.path.getsize(path) != size:
            return None
    return files


def _write_json_atomic(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def survey(stage_dir: str, expected: Sequence[ExpectedFile], decompress: bool,
           verify: str = "size") -> dict[str, str]:
    """``{blob: why}`` for every planned file that is missing or wrong on disk."""
    if verify not in VERIFY_MODES:
        raise ValueError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
    bad = {}
    for e in expected:
        why = check_file(stage_dir, e, decompress, verify)
        if why is not None:
            bad[e.blob] = why
    return bad


def _manifest_names(stage_dir: str, rank: int | None) -> set[str]:
    """Files a manifest lists: this rank's, or with ``rank=None`` every rank's in the folder."""
    if rank is not None:
        return set(_read_manifest(stage_dir, rank).get("files", {}))
    names: set[str] = set()
    for other in _manifest_ranks(stage_dir):
        names |= set(_read_manifest(stage_dir, other).get("files", {}))
    return names


def _manifest_ranks(stage_dir: str) -> list[int]:
    try:
        entries = os.listdir(os.path.join(stage_dir, MANIFEST_DIRNAME))
    except OSError:
        return []
    return sorted(int(e[:-5]) for e in entries if e.endswith(".json") and e[:-5].isdigit())


def find_strays(stage_dir: str, rank: int, expected: Sequence[ExpectedFile], decompress: bool, *,
                suffixes: Sequence[int] | None = None, known: Container[str] | None = None,
                shared: bool = True) -> tuple[list[str], list[str]]:
    """Files on disk that are not in this node's plan: ``(gone, handed)``.

    ``gone``: their blob is no longer listed (reported; removed only with ``prune``).
    ``handed``: their blob is listed (``known``: every blob of the whole listing) and another
    node's shard holds it now; only on node-local storage (``shared=False``), where such a
    file would be on two nodes, which node-scope training refuses. On shared storage
    (``shared=True``, BeeOND) it is the other node's file, at the path that node reads: kept.

    Candidates on shared storage: what this rank's manifest (``.amlhpc-staged/<rank>.json``)
    says it staged before and, in suffix mode, every data file carrying one of its suffixes.
    On node-local storage every file of the folder is this node's, so the candidates are
    what any manifest there lists (a node whose rank changed left its files under its old
    rank) and every CosmoFlow data file. Without ``known`` every candidate is ``gone``.
    """
    planned = {e.staged_name(decompress) for e in expected} | {e.blob for e in expected}
    candidates = _manifest_names(stage_dir, rank if shared else None)
    if suffixes or not shared:
        wanted = set(suffixes or ())
        candidates |= {n for n in walk_files(stage_dir, skip_hidden_stage_dirs=True)
                       if suffix_of(n) is not None and (not shared or suffix_of(n) in wanted)}
    gone: list[str] = []
    handed: list[str] = []
    for name in sorted(candidates - planned):
        if not os.path.isfile(os.path.join(stage_dir, name)):
            continue
        listed = known is not None and (name in known or f"{name}.gz" in known)
        if not listed:
            gone.append(name)
        elif not shared:
            handed.append(name)
    return gone, handed


def plan_sync(*, stage_dir: str, rank: int, expected: Sequence[ExpectedFile], decompress: bool = True,
              verify: str = "size", suffixes: Sequence[int] | None = None,
              known: Container[str] | None = None, shared: bool = True) -> dict[str, Any]:
    """What a stage would do (check mode): ``fetch`` {blob: why}, ``gone`` and ``handed`` names
    (see :func:`find_strays`)."""
    stage_dir = os.path.abspath(stage_dir)
    gone, handed = find_strays(stage_dir, rank, expected, decompress, suffixes=suffixes, known=known, shared=shared)
    return {"fetch": survey(stage_dir, expected, decompress, verify), "gone": gone, "handed": handed}


def shard_is_staged(*, source_url: str, stage_dir: str, rank: int, include_pattern: str | None = None,
                    blobs: Sequence[str] | None = None, decompress: bool = True) -> bool:
    """Without a listing: True when a finished stage of exactly this shard is on disk."""
    key = _shard_key(source_url, include_pattern, blobs, decompress)
    return _manifest_ok(os.path.abspath(stage_dir), rank, key) is not None


def _run_copy(*, azcopy: str, source_url: str, sas: str, staging: str, include_pattern: str | None,
              blobs: Sequence[str] | None, decompress: bool, cap_mbps: float | None, env: Mapping[str, str],
              auth: str, auth_options: Mapping[str, str], timeout: float | None, node: str,
              on_progress: Callable[[dict[str, Any]], None]) -> Any:
    os.makedirs(staging, exist_ok=True)
    remove_partial(staging)
    workdir = tempfile.mkdtemp(prefix="amlhpc-azcopy-")
    secrets = [sas] + [v for k, v in auth_options.items() if k == "client_secret"]
    try:
        os.chmod(workdir, 0o700)
        run_env = private_azcopy_env(with_auth_env(env, auth, **auth_options), workdir)
        list_file = None
        if blobs is not None:
            list_file = os.path.join(workdir, "list-of-files.txt")
            with open(list_file, "w", encoding="utf-8") as f:
                f.write("".join(f"{b}\n" for b in blobs))
        cmd = copy_download_command(azcopy, source_url, sas if auth == "sas" else "", staging,
                                    include_pattern=include_pattern, list_file=list_file, decompress=decompress,
                                    cap_mbps=cap_mbps)
        try:
            result = run_azcopy(cmd, run_env, secrets=secrets, progress=on_progress, timeout=timeout)
        except FileNotFoundError as exc:
            raise StageError(f"azcopy was not found at {azcopy}: install it (role stage) or set its path") from exc
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if not result.ok:
        raise StageError(f"{node}: {explain_failure(result)}")
    return result


def _cleanup_staging(stage_dir: str, staging: str) -> None:
    shutil.rmtree(staging, ignore_errors=True)
    try:
        os.rmdir(os.path.join(stage_dir, STAGING_DIRNAME))
    except OSError:
        pass


NAMED = 5
"""How many names of the fetched, repaired, gone, handed and removed files a result carries
(with the count of each): the report's line names them, and the rest as "and N more"."""


def stage_result(files: Mapping[str, int], *, seconds: float, verify: str, progress: list[dict[str, Any]],
                 **kw: Any) -> dict[str, Any]:
    """A stage's result (see :func:`stage_shard`) for ``files`` (this shard on disk, name:
    size), what the run did (``kw``: fetched, removed, bytes_over_wire, ...; none given:
    nothing) and its measured ``seconds``."""
    wire = kw.pop("bytes_over_wire", 0)
    out = {"files": len(files), "bytes": sum(files.values()), "bytes_over_wire": wire,
           "seconds": round(seconds, 3),
           "throughput_mb_s": round(wire / seconds / 1e6, 3) if seconds > 0 and wire else 0.0,
           "fetched": 0, "fetched_files": [], "repaired": [], "repaired_count": 0, "gone": [], "gone_count": 0,
           "handed": [], "handed_count": 0, "removed": 0, "removed_files": [],
           "skipped_existing": 0, "azcopy_runs": 0, "verify": verify, "progress": progress,
           "fetched_planned_bytes": None, "fetched_planned_raw_bytes": None}
    out.update(kw)
    out["changed"] = bool(out["fetched"] or out["removed"])
    return out


def manifest_text(files: Mapping[str, int], key: str = "listed") -> str:
    """The manifest ``.amlhpc-staged/<rank>.json`` as a stage writes it."""
    return json.dumps({"key": key, "files": dict(files)}, indent=1, sort_keys=True)


@contextmanager
def stage_lock(stage_dir: str, rank: int, node: str):
    """Hold the lock of this rank's stage in the folder, ``<stage_dir>/.amlhpc-staged/<rank>.lock``
    (per rank: on shared storage every node stages into one folder), or raise StageError naming
    its holder: two runs never stage one shard into one folder at once, and the stage of an
    interrupted run, still running on the node, is found and named by the next one. The file
    holds the stage's pid, host and start; the kernel drops the lock (flock) when the holder
    ends, however it ends."""
    path = os.path.join(stage_dir, MANIFEST_DIRNAME, f"{rank}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StageError(holder_refusal(node, stage_dir, _read_holder(fd))) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode())
        yield
    finally:
        os.close(fd)  # closing it drops the lock


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 4096).decode() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def holder_refusal(node: str, stage_dir: str, holder: Mapping[str, Any]) -> str:
    """One sentence for a stage folder another stage holds, naming that stage."""
    who = (f"pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('since')}" if holder.get("pid")
           else "a process that has not said which")
    return (f"{node}: another stage is running in {stage_dir} ({who}), for instance one of a run that was "
            "interrupted: wait for it to end, or stop it (kill that pid; its azcopy ends with it), then rerun, "
            "which resumes where it stopped.")


def prune_refusal(gone: Sequence[str], expected: Sequence[ExpectedFile], bad: Mapping[str, str], source_url: str,
                  node: str) -> str | None:
    """One sentence refusing a prune that would remove most (more than half) of the data files
    staged in the folder (the ``gone`` ones, and the planned ones that :func:`survey` did not
    find ``missing`` in ``bad``), since their blobs are gone from ``source_url``: what a wrong
    prefix or container looks like. None where fewer would go."""
    present = len(gone) + sum(1 for e in expected if bad.get(e.blob) != "missing")
    if not gone or 2 * len(gone) <= present:
        return None
    return (f"{node}: stage_prune would remove {len(gone)} of the {present} files staged here, whose blobs "
            f"{source_url} no longer lists ({shown(gone)}), so nothing was fetched or removed: check "
            "stage_container and stage_prefix, or set stage_prune_most: true if those files are to go.")


def stage_shard(*, azcopy: str, source_url: str, sas: str = "", stage_dir: str, rank: int,
                include_pattern: str | None = None, blobs: Sequence[str] | None = None,
                expected: Sequence[ExpectedFile] | None = None, decompress: bool = True,
                cap_mbps: float | None = None, progress: Callable[[dict[str, Any]], None] | None = None,
                env: Mapping[str, str] | None = None, timeout: float | None = None,
                node: str | None = None, progress_file: str | None = None, verify: str = "size",
                prune: bool = False, suffixes: Sequence[int] | None = None, known: Container[str] | None = None,
                shared: bool = True, auth: str = "sas", auth_options: Mapping[str, str] | None = None,
                prune_most: bool = False) -> dict[str, Any]:
    """Stage one node's shard into ``stage_dir`` (see the module docstring). Resumable.

    Give ``include_pattern`` (suffix mode) or ``blobs`` (names relative to ``source_url``,
    balanced mode). ``expected`` (from the listing) makes the run a sync against the plan.

    Returns files and bytes (this shard on disk), fetched, repaired (``name (why)``, a
    few) and repaired_count, gone (a few names) and gone_count, removed, bytes_over_wire,
    seconds, throughput_mb_s, skipped_existing, changed, azcopy_runs and ``progress``: at
    most 64 points ``{t, bytes, files}`` (seconds since the start, bytes over the wire and
    files done so far). ``progress_file`` (optional) is rewritten with the latest progress.
    """
    node = node or f"node {rank}"
    if (include_pattern is None) == (blobs is None):
        raise ValueError("give include_pattern or blobs")
    if verify not in VERIFY_MODES:
        raise ValueError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
    auth_options = dict(auth_options or {})
    stage_dir = os.path.abspath(stage_dir)
    started = time.monotonic()
    series = ProgressSeries()
    base_env = env if env is not None else os.environ
    staging = os.path.join(stage_dir, STAGING_DIRNAME, str(rank))

    def on_progress(p: dict[str, Any]) -> None:
        series.add(time.monotonic() - started, p.get("bytes_over_wire", 0), p.get("completed", 0))
        if progress is not None:
            progress(p)
        if progress_file:
            _write_json_atomic(progress_file, {"node": node, **p})

    def done(files: dict[str, int], **kw: Any) -> dict[str, Any]:
        return stage_result(files, seconds=time.monotonic() - started, verify=verify, progress=series.series(), **kw)

    os.makedirs(os.path.join(stage_dir, MANIFEST_DIRNAME), exist_ok=True)
    with stage_lock(stage_dir, rank, node):
        if expected is None:
            return _stage_unlisted(azcopy=azcopy, source_url=source_url, sas=sas, stage_dir=stage_dir, rank=rank,
                                   staging=staging, include_pattern=include_pattern, blobs=blobs, decompress=decompress,
                                   cap_mbps=cap_mbps, env=base_env, auth=auth, auth_options=auth_options,
                                   timeout=timeout, node=node, on_progress=on_progress, done=done)

        bad = survey(stage_dir, expected, decompress, verify)
        gone, handed = find_strays(stage_dir, rank, expected, decompress, suffixes=suffixes, known=known,
                                   shared=shared)
        if prune and not prune_most:
            refused = prune_refusal(gone, expected, bad, source_url, node)
            if refused:
                raise StageError(refused)
        repaired = [f"{e.staged_name(decompress)} ({bad[e.blob]})" for e in expected
                    if e.blob in bad and bad[e.blob] != "missing"]
        result = None
        if bad:
            for e in expected:  # a wrong file goes before its replacement is fetched
                if e.blob in bad and bad[e.blob] != "missing":
                    path = locate(stage_dir, e, decompress)
                    if path:
                        os.unlink(path)
            # A whole shard in suffix mode goes by its pattern: azcopy enumerates a --list-of-files
            # entry by entry, 2.6x slower for 192 small files here.
            whole = include_pattern is not None and len(bad) == len(expected)
            result = _run_copy(azcopy=azcopy, source_url=source_url, sas=sas, staging=staging,
                               include_pattern=include_pattern if whole else None,
                               blobs=None if whole else [e.blob for e in expected if e.blob in bad], decompress=decompress,
                               cap_mbps=cap_mbps, env=base_env, auth=auth, auth_options=auth_options,
                               timeout=timeout, node=node, on_progress=on_progress)
            finalize(staging, stage_dir, decompress)
            still = {e.staged_name(decompress): check_file(stage_dir, e, decompress, verify)
                     for e in expected if e.blob in bad}
            still = {n: why for n, why in still.items() if why is not None}
            if still:
                raise StageError(f"{node}: {len(still)} file(s) are still wrong after fetching them again: "
                                 f"{shown(f'{n} ({w})' for n, w in still.items())}. The blob's metadata may not match "
                                 "its content: run prepare_dataset again, then the stage.")
            _cleanup_staging(stage_dir, staging)
        removed_files = handed + (gone if prune else [])
        for name in removed_files:
            os.unlink(os.path.join(stage_dir, name))
        removed = len(removed_files)
        if not shared:  # every earlier file of this folder has been sorted out above, under this rank
            for other in _manifest_ranks(stage_dir):
                if other != rank:
                    os.unlink(_manifest_path(stage_dir, other))
        files = {}
        for e in expected:
            path = locate(stage_dir, e, decompress)
            if path is not None:
                files[os.path.relpath(path, stage_dir).replace(os.sep, "/")] = os.path.getsize(path)
        # Files reported gone but kept stay in the manifest, so the next run reports them again.
        kept = {n: os.path.getsize(os.path.join(stage_dir, n)) for n in gone if not prune}
        _write_json_atomic(_manifest_path(stage_dir, rank), {"key": "listed", "files": {**files, **kept}})
        fetched = [e for e in expected if e.blob in bad]
        planned_wire = sum(e.size for e in fetched) if all(e.size is not None for e in fetched) else None
        planned_raw = sum(e.raw_size for e in fetched) if all(e.raw_size is not None for e in fetched) else None
        return done(files, fetched=len(bad), fetched_files=[e.staged_name(decompress) for e in fetched][:NAMED],
                    repaired=repaired[:NAMED], repaired_count=len(repaired), removed_files=removed_files[:NAMED],
                    fetched_planned_bytes=planned_wire, fetched_planned_raw_bytes=planned_raw,
                    gone=gone[:NAMED], gone_count=len(gone), handed=handed[:NAMED], handed_count=len(handed), removed=removed,
                    skipped_existing=len(expected) - len(bad) + (result.skipped if result else 0),
                    bytes_over_wire=result.bytes_over_wire if result else 0, azcopy_runs=1 if result else 0)


def _stage_unlisted(*, azcopy: str, source_url: str, sas: str, stage_dir: str, rank: int, staging: str,
                    include_pattern: str | None, blobs: Sequence[str] | None, decompress: bool,
                    cap_mbps: float | None, env: Mapping[str, str], auth: str, auth_options: Mapping[str, str],
                    timeout: float | None, node: str, on_progress: Callable[[dict[str, Any]], None],
                    done: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """No listing: azcopy's count is the plan; a manifest recognises a finished stage."""
    key = _shard_key(source_url, include_pattern, blobs, decompress)
    have = _manifest_ok(stage_dir, rank, key)
    if have is not None:
        return done(have, skipped_existing=len(have))
    if blobs is not None and not blobs:
        _write_json_atomic(_manifest_path(stage_dir, rank), {"key": key, "files": {}})
        return done({})
    result = _run_copy(azcopy=azcopy, source_url=source_url, sas=sas, staging=staging,
                       include_pattern=include_pattern, blobs=blobs, decompress=decompress, cap_mbps=cap_mbps,
                       env=env, auth=auth, auth_options=auth_options, timeout=timeout, node=node,
                       on_progress=on_progress)
    moved = finalize(staging, stage_dir, decompress)
    if len(moved) < result.completed:
        raise StageError(f"{node}: azcopy reported {result.completed} file(s) copied, but {len(moved)} arrived in "
                         f"{stage_dir}. Rerun the stage.")
    previous = _read_manifest(stage_dir, rank).get("files", {}) if _read_manifest(stage_dir, rank).get("key") == key \
        else {}
    files = {**previous, **moved}
    files = {n: os.path.getsize(os.path.join(stage_dir, n)) for n in files if os.path.isfile(os.path.join(stage_dir, n))}
    if len(files) < result.completed + result.skipped:
        raise StageError(f"{node}: azcopy reported {result.completed + result.skipped} file(s), "
                         f"but {len(files)} are in {stage_dir}. Rerun the stage.")
    _write_json_atomic(_manifest_path(stage_dir, rank), {"key": key, "files": files})
    _cleanup_staging(stage_dir, staging)
    return done(files, fetched=result.completed, fetched_files=sorted(moved)[:NAMED], skipped_existing=result.skipped,
                bytes_over_wire=result.bytes_over_wire, azcopy_runs=1)
