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
3. Strays (files outside this node's shard): which ones are ``gone`` (no blob of the listing)
   and which ``handed`` (another node's shard holds their blob now) is decided from exact
   data, the plan's listing (``azcopy_handoff``): by the controller, from one read of the
   node's folder, or inside the training job, which has the listing. Gone files are reported
   and removed only with ``prune``; handed files are removed on node-local storage
   (``shared=False``), since node-scope training refuses a file held by two nodes, and kept on
   shared storage, where they are the other node's. Nothing else is ever removed.

Every name the plan or the handoff gives is checked before anything changes: a name that would
leave ``stage_dir`` or that the file system cannot hold (``azcopy_paths``) refuses the whole
stage, naming it. Each write and removal goes through ``azcopy_paths.inside`` again.

Bounded: azcopy is stopped past a time limit (by default the staging model's prediction for
what this run fetches, times a margin, ``azcopy_model.time_limit``), when nothing moves for
``stall`` seconds, or, once every byte is in, when transfers stay open (a blob whose
Content-Encoding lies); the failing or open blobs are named from azcopy's job plan
(``azcopy jobs show``) and log. A ``cancel`` (the controller went away) stops it too.

``changed`` is true exactly when a file was fetched or removed.

Without the listing (a node without the Azure SDK, suffix mode) azcopy's own transfer
count is the plan and a finished stage is recognised by its manifest.

No secret is written anywhere: a SAS travels only in azcopy's argv (with an identity there
is none, see ``azcopy_cmd``), azcopy's job plans and logs go to a private temporary folder
that is removed afterwards (by the next stage, where this one was killed: ``azcopy_lock``),
and every message goes through ``redact``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

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
)
from .azcopy_lock import WORKDIR_PREFIX, Held, LockBusy, holder_refusal, stage_lock
from .azcopy_model import TIME_LIMIT_MARGIN, Rates, time_limit
from .azcopy_paths import UnsafePath, check_all, folder_problem, inside, occupied, shown_problems
from .azcopy_progress import Cancel, JobResult, ProgressSeries, explain_failure, job_transfers, log_failures, run_azcopy

STALL_S = 60.0
"""Seconds without progress (no byte over the wire, no transfer started or ended) after which
azcopy is stopped (the default of ``stage_stall_seconds``)."""


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


def _manifest_ranks(stage_dir: str) -> list[int]:
    try:
        entries = os.listdir(os.path.join(stage_dir, MANIFEST_DIRNAME))
    except OSError:
        return []
    return sorted(int(e[:-5]) for e in entries if e.endswith(".json") and e[:-5].isdigit())


def name_refusal(node: str, stage_dir: str, problems: Mapping[str, str]) -> str:
    """One sentence refusing a stage whose plan or handoff names a path that would leave the
    stage folder or that the file system cannot hold; nothing was fetched or removed."""
    return (f"{node}: {len(problems)} name(s) of the plan would be staged or removed outside {stage_dir}, or cannot "
            f"be held by its file system: {shown_problems(problems)}. Nothing was fetched or removed: rename or remove "
            "those blobs (or choose a stage_prefix that leaves them out), then plan and stage again.")


def check_names(*, stage_dir: str, node: str, expected: Sequence[ExpectedFile] | None = None,
                blobs: Sequence[str] | None = None, handoff: Mapping[str, Sequence[str]] | None = None,
                decompress: bool = True) -> None:
    """StageError (:func:`name_refusal`) unless every name of the plan (the blobs, their staged
    names) and of the handoff (``handed``, ``gone``) lies inside ``stage_dir``
    (``azcopy_paths.inside``); also for a ``stage_dir`` that cannot be one (relative, ``/``)."""
    why = folder_problem(stage_dir)
    if why is not None:
        raise StageError(f"{node}: the stage folder {stage_dir!r} cannot be used: {why}.")
    names: list[str] = [e.blob for e in expected or ()] + list(blobs or ())
    for key in ("handed", "gone"):
        names += list((handoff or {}).get(key) or ())
    problems = check_all(list(dict.fromkeys(names)), stage_dir)
    staged = [e.staged_name(decompress) for e in expected or () if e.blob not in problems]
    problems.update(check_all([n for n in dict.fromkeys(staged) if n not in problems], stage_dir))
    if problems:
        raise StageError(name_refusal(node, stage_dir, problems))
    taken = occupied(stage_dir, dict.fromkeys(staged if expected else list(blobs or ())))
    if taken:
        raise StageError(
            f"{node}: {len(taken)} file(s) of the plan cannot be written in {stage_dir}, which holds something else "
            f"under their name: {shown_problems(taken)}. Nothing was fetched or removed: remove or move that folder "
            "(or file) out of the stage folder, which the stage never removes itself, or rename the blob, then stage "
            "again.")


def present_strays(stage_dir: str, handoff: Mapping[str, Sequence[str]] | None,
                   expected: Sequence[ExpectedFile], decompress: bool, shared: bool) -> tuple[list[str], list[str]]:
    """``(gone, handed)``: the handoff's names that are files in ``stage_dir`` now and not in
    this node's plan; ``handed`` only on node-local storage. Without a handoff, none: a file is
    never removed on a guess. A name in both lists (the controller's plan never sends one) is a
    contradiction, not an order: it stays."""
    if not handoff:
        return [], []
    planned = {e.staged_name(decompress) for e in expected} | {e.blob for e in expected}
    contradicted = set(handoff.get("gone") or ()) & set(handoff.get("handed") or ())
    kept = planned | contradicted

    def there(names: Sequence[str] | None) -> list[str]:
        return sorted(n for n in set(names or ()) if n not in kept and os.path.isfile(inside(stage_dir, n)))

    return there(handoff.get("gone")), ([] if shared else there(handoff.get("handed")))


def plan_sync(*, stage_dir: str, rank: int, expected: Sequence[ExpectedFile], decompress: bool = True,
              verify: str = "size", handoff: Mapping[str, Sequence[str]] | None = None, shared: bool = True,
              node: str | None = None) -> dict[str, Any]:
    """What a stage would do (check mode): ``fetch`` {blob: why}, ``gone`` and ``handed`` names
    (see :func:`present_strays`). Refuses the names :func:`check_names` refuses."""
    node = node or f"node {rank}"
    check_names(stage_dir=stage_dir, node=node, expected=expected, handoff=handoff, decompress=decompress)
    stage_dir = os.path.abspath(stage_dir)
    gone, handed = present_strays(stage_dir, handoff, expected, decompress, shared)
    return {"fetch": survey(stage_dir, expected, decompress, verify), "gone": gone, "handed": handed}


def shard_is_staged(*, source_url: str, stage_dir: str, rank: int, include_pattern: str | None = None,
                    blobs: Sequence[str] | None = None, decompress: bool = True) -> bool:
    """Without a listing: True when a finished stage of exactly this shard is on disk."""
    key = _shard_key(source_url, include_pattern, blobs, decompress)
    return _manifest_ok(os.path.abspath(stage_dir), rank, key) is not None


class Limits:
    """How long one azcopy run may take: ``timeout`` (seconds; None: derived from the staging
    model for what the run fetches), its ``margin``, the model's ``rates`` and ``nodes``, the
    bandwidth cap, and ``stall`` (seconds without progress; 0 for none)."""

    def __init__(self, *, timeout: float | None = None, margin: float = TIME_LIMIT_MARGIN, rates: Rates | None = None,
                 nodes: int = 1, cap_mbps: float | None = None, stall: float = STALL_S) -> None:
        self.timeout = timeout if timeout and timeout > 0 else None
        self.margin = margin
        self.rates = rates or Rates()
        self.nodes = nodes
        self.cap_mbps = cap_mbps
        self.stall = stall if stall and stall > 0 else None

    def for_fetch(self, wire: int | None, raw: int | None) -> tuple[float, str]:
        """``(seconds, how)`` for a run fetching ``wire`` bytes (``raw`` on disk)."""
        if self.timeout is not None:
            return float(self.timeout), f"stage_timeout, {self.timeout:g} s"
        return time_limit(wire, raw, self.rates, nodes=self.nodes, margin=self.margin, cap_mbps=self.cap_mbps)


@dataclass(frozen=True)
class StageSource:
    """Where the shard comes from: ``azcopy`` (the tool's path), ``source_url`` (the container and
    prefix, no token: ``blob_url``), how azcopy signs in (``auth``: ``sas`` with ``sas``, or an
    identity with ``auth_options``, see ``azcopy_cmd``) and the environment it runs in (``env``;
    None: this process's). The SAS, the auth options and the environment never show in its repr."""

    azcopy: str
    source_url: str
    sas: str = field(default="", repr=False)
    auth: str = "sas"
    auth_options: Mapping[str, str] | None = field(default=None, repr=False)
    env: Mapping[str, str] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ShardPlan:
    """What this node's shard is: the folder (``stage_dir``) and ``rank`` it is staged under, its
    blobs (``include_pattern``, suffix mode, or ``blobs``, names below the source), the listing
    (``expected``: the run is a sync against it) and ``handoff`` (``{"handed": [...], "gone":
    [...]}``, exact, ``azcopy_handoff``), and how it is kept: ``decompress``, ``verify``,
    ``prune`` (``prune_most``: even most of the folder), ``shared`` storage. ``node`` names it in
    messages (empty: ``node <rank>``). Refuses what cannot be a shard, naming it."""

    stage_dir: str
    rank: int
    include_pattern: str | None = None
    blobs: Sequence[str] | None = None
    expected: Sequence[ExpectedFile] | None = None
    handoff: Mapping[str, Sequence[str]] | None = None
    decompress: bool = True
    verify: str = "size"
    prune: bool = False
    prune_most: bool = False
    shared: bool = True
    node: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "node", self.node or f"node {self.rank}")
        if (self.include_pattern is None) == (self.blobs is None):
            raise ValueError("give include_pattern or blobs")
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {self.verify!r}")
        if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank < 0:
            raise StageError(f"{self.node}: the rank {self.rank!r} is not a number 0 or above: pass the plan's shard "
                             "(it carries it).")


@dataclass(frozen=True)
class StageWatch:
    """How the run is bounded and watched: ``limits`` (time limit, stall rule, bandwidth cap),
    ``cancel`` (stops azcopy from another thread), ``lock_wait`` (seconds to wait for another
    stage of the shard; None: ``azcopy_lock``'s default), ``progress`` (called with azcopy's
    progress) and ``progress_file`` (rewritten with the latest progress)."""

    limits: Limits = field(default_factory=Limits)
    cancel: Cancel | None = None
    lock_wait: float | None = None
    progress: Callable[[dict[str, Any]], None] | None = None
    progress_file: str | None = None


@dataclass(frozen=True)
class _Run:
    """One stage under way, as its steps share it: the three objects, the folder (absolute), the
    rank's staging folder, the lock held, the progress callback and the result's maker."""

    source: StageSource
    plan: ShardPlan
    watch: StageWatch
    stage_dir: str
    staging: str
    held: Held
    on_progress: Callable[[dict[str, Any]], None]
    done: Callable[..., dict[str, Any]]


def _blob_of(url: str, source_url: str) -> str:
    """The blob name below the source of an azcopy transfer's source URL."""
    url = url.split("?", 1)[0]
    base = source_url.split("?", 1)[0].rstrip("/") + "/"
    return unquote(url[len(base):]) if url.startswith(base) else unquote(url.rsplit("/", 1)[-1])


def _name_failures(result: JobResult, *, azcopy: str, env: Mapping[str, str], source_url: str,
                   staging: str, secrets: Sequence[str], gzip_blobs: Container[str] = ()) -> None:
    """Fill the result's ``failed_transfers`` (failed ones, with azcopy's reason from its log)
    and ``in_flight`` (transfers open when azcopy was stopped) from its job plan, and remove the
    open ones' files from ``staging``, so that a rerun fetches them again."""
    reasons = log_failures(env.get("AZCOPY_LOG_LOCATION", ""), secrets)
    if result.failed or not result.ok:
        failed = job_transfers(azcopy, result.job_id, env, "Failed", secrets)
        if failed:
            result.failed_transfers = failed
    for t in result.failed_transfers:
        t["blob"] = _blob_of(str(t.get("src", "")), source_url)
        t["why"] = reasons.get(str(t.get("src", "")).split("?", 1)[0], "")
    if result.stopped:
        result.in_flight = job_transfers(azcopy, result.job_id, env, "Started", secrets)
        for t in result.in_flight:
            t["blob"] = _blob_of(str(t.get("src", "")), source_url)
            result.decompressing = result.decompressing or t["blob"] in gzip_blobs
            dst = os.path.realpath(str(t.get("dst", "")))
            if dst.startswith(os.path.realpath(staging).rstrip(os.sep) + os.sep) and os.path.isfile(dst):
                os.unlink(dst)  # whatever azcopy wrote of it is not whole


def _make_workdir(held: Held) -> str:
    """azcopy's temporary folder (its job plans and logs, which carry the SAS): named in the lock
    file before it exists, so that a stage killed at any moment after leaves a folder the next
    stage removes (azcopy_lock.stage_lock), and made 0700 (owner only) from birth."""
    while True:
        workdir = os.path.join(tempfile.gettempdir(), f"{WORKDIR_PREFIX}{os.getpid()}-{os.urandom(6).hex()}")
        held.note(workdir=workdir)
        try:
            os.mkdir(workdir, 0o700)  # the umask can only take bits away
            return workdir
        except FileExistsError:
            continue


def _run_copy(run: _Run, *, include_pattern: str | None, blobs: Sequence[str] | None, limit: tuple[float, str],
              gzip_blobs: Container[str] = ()) -> Any:
    """One azcopy run of the stage ``run``: the shard's ``include_pattern`` or these ``blobs``,
    stopped past ``limit`` (seconds, how they were found)."""
    source, decompress, node, staging = run.source, run.plan.decompress, run.plan.node, run.staging
    auth_options = dict(source.auth_options or {})
    os.makedirs(staging, exist_ok=True)
    remove_partial(staging)
    workdir = _make_workdir(run.held)
    secrets = [source.sas] + [v for k, v in auth_options.items() if k == "client_secret"]
    try:
        env = source.env if source.env is not None else os.environ
        run_env = private_azcopy_env(with_auth_env(env, source.auth, **auth_options), workdir)
        list_file = None
        if blobs is not None:
            list_file = os.path.join(workdir, "list-of-files.txt")
            with open(list_file, "w", encoding="utf-8") as f:
                f.write("".join(f"{b}\n" for b in blobs))
        cmd = copy_download_command(source.azcopy, source.source_url, source.sas if source.auth == "sas" else "",
                                    staging, include_pattern=include_pattern, list_file=list_file,
                                    decompress=decompress, cap_mbps=run.watch.limits.cap_mbps)
        try:
            result = run_azcopy(cmd, run_env, secrets=secrets, progress=run.on_progress, timeout=limit[0],
                                stall=run.watch.limits.stall, cancel=run.watch.cancel)
        except FileNotFoundError as exc:
            raise StageError(f"azcopy was not found at {source.azcopy}: install it (role stage) or set its "
                             "path") from exc
        if not result.ok:
            _name_failures(result, azcopy=source.azcopy, env=run_env, source_url=source.source_url, staging=staging,
                           secrets=secrets, gzip_blobs=gzip_blobs if decompress else ())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        run.held.note(workdir="")
    if not result.ok:
        if result.stopped == "time limit":
            result.stopped_detail += f" ({limit[1]})"
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
           "fetched_planned_bytes": None, "fetched_planned_raw_bytes": None, "time_limit": {}}
    out.update(kw)
    out["changed"] = bool(out["fetched"] or out["removed"])
    return out


def manifest_text(files: Mapping[str, int], key: str = "listed") -> str:
    """The manifest ``.amlhpc-staged/<rank>.json`` as a stage writes it."""
    return json.dumps({"key": key, "files": dict(files)}, indent=1, sort_keys=True)


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


def stage_shard(source: StageSource, plan: ShardPlan, watch: StageWatch | None = None) -> dict[str, Any]:
    """Stage one node's shard (``plan``) from ``source`` into its ``stage_dir`` (see the module
    docstring), bounded and watched by ``watch`` (default: the staging model's time limit and the
    stall rule). Resumable.

    ``plan.expected`` (from the listing) makes the run a sync against the plan; ``plan.handoff``
    says which files outside the shard are gone and which another node's.

    Returns files and bytes (this shard on disk), fetched, repaired (``name (why)``, a
    few) and repaired_count, gone (a few names) and gone_count, removed, bytes_over_wire,
    seconds, throughput_mb_s, skipped_existing, changed, azcopy_runs, ``time_limit`` (the
    seconds azcopy was given, and how they were found) and ``progress``: at most 64 points
    ``{t, bytes, files}`` (seconds since the start, bytes over the wire and files done so far).
    ``watch.progress_file`` (optional) is rewritten with the latest progress.
    """
    watch = watch or StageWatch()
    node, rank = plan.node, plan.rank
    check_names(stage_dir=plan.stage_dir, node=node, expected=plan.expected, blobs=plan.blobs, handoff=plan.handoff,
                decompress=plan.decompress)
    stage_dir = os.path.abspath(plan.stage_dir)
    started = time.monotonic()
    series = ProgressSeries()

    def on_progress(p: dict[str, Any]) -> None:
        series.add(time.monotonic() - started, p.get("bytes_over_wire", 0), p.get("completed", 0))
        if watch.progress is not None:
            watch.progress(p)
        if watch.progress_file:
            _write_json_atomic(watch.progress_file, {"node": node, **p})

    def done(files: dict[str, int], **kw: Any) -> dict[str, Any]:
        return stage_result(files, seconds=time.monotonic() - started, verify=plan.verify, progress=series.series(),
                            **kw)

    os.makedirs(os.path.join(stage_dir, MANIFEST_DIRNAME), exist_ok=True)
    try:
        locked = stage_lock(stage_dir, rank, **({} if watch.lock_wait is None else {"wait": watch.lock_wait}))
        held = locked.__enter__()
    except LockBusy as busy:
        raise StageError(holder_refusal(node, stage_dir, rank, busy.holder)) from None
    try:
        run = _Run(source=source, plan=plan, watch=watch, stage_dir=stage_dir,
                   staging=os.path.join(stage_dir, STAGING_DIRNAME, str(rank)), held=held, on_progress=on_progress,
                   done=done)
        return _stage_unlisted(run) if plan.expected is None else _stage_listed(run, plan.expected)
    except UnsafePath as exc:
        raise StageError(name_refusal(node, stage_dir, {exc.name: exc.why})) from None
    finally:
        locked.__exit__(None, None, None)


def _stage_listed(run: _Run, expected: Sequence[ExpectedFile]) -> dict[str, Any]:
    """With the listing (``expected``): a sync against the plan (see the module docstring)."""
    plan, stage_dir, staging = run.plan, run.stage_dir, run.staging
    node, rank, decompress, verify, prune = plan.node, plan.rank, plan.decompress, plan.verify, plan.prune
    bad = survey(stage_dir, expected, decompress, verify)
    gone, handed = present_strays(stage_dir, plan.handoff, expected, decompress, plan.shared)
    if prune and not plan.prune_most:
        refused = prune_refusal(gone, expected, bad, run.source.source_url, node)
        if refused:
            raise StageError(refused)
    repaired = [f"{e.staged_name(decompress)} ({bad[e.blob]})" for e in expected
                if e.blob in bad and bad[e.blob] != "missing"]
    fetched = [e for e in expected if e.blob in bad]
    planned_wire = sum(e.size for e in fetched) if all(e.size is not None for e in fetched) else None
    planned_raw = sum(e.raw_size for e in fetched) if all(e.raw_size is not None for e in fetched) else None
    limit = run.watch.limits.for_fetch(planned_wire, planned_raw)
    result = None
    if bad:
        for e in expected:  # a wrong file goes before its replacement is fetched
            if e.blob in bad and bad[e.blob] != "missing":
                path = locate(stage_dir, e, decompress)
                if path:
                    os.unlink(inside(stage_dir, os.path.relpath(path, stage_dir).replace(os.sep, "/")))
        # A whole shard in suffix mode goes by its pattern: azcopy enumerates a --list-of-files
        # entry by entry, 2.6x slower for 192 small files here.
        whole = plan.include_pattern is not None and len(bad) == len(expected)
        result = _run_copy(run, include_pattern=plan.include_pattern if whole else None,
                           blobs=None if whole else [e.blob for e in fetched], limit=limit,
                           gzip_blobs={e.blob for e in fetched if e.gzip_encoded})
        finalize(staging, stage_dir, decompress)
        still = {e.staged_name(decompress): check_file(stage_dir, e, decompress, verify) for e in fetched}
        still = {n: why for n, why in still.items() if why is not None}
        if still:
            raise StageError(f"{node}: {len(still)} file(s) are still wrong after fetching them again: "
                             f"{shown(f'{n} ({w})' for n, w in still.items())}. The blob's metadata may not match "
                             "its content: run prepare_dataset again, then the stage.")
        _cleanup_staging(stage_dir, staging)
    removed_files = handed + (gone if prune else [])
    for name in removed_files:
        os.unlink(inside(stage_dir, name))
    if plan.handoff and not plan.shared:  # every earlier file of this folder has been sorted out above, under this rank
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
    return run.done(files, fetched=len(bad), fetched_files=[e.staged_name(decompress) for e in fetched][:NAMED],
                    repaired=repaired[:NAMED], repaired_count=len(repaired), removed_files=removed_files[:NAMED],
                    fetched_planned_bytes=planned_wire, fetched_planned_raw_bytes=planned_raw,
                    gone=gone[:NAMED], gone_count=len(gone), handed=handed[:NAMED], handed_count=len(handed),
                    removed=len(removed_files),
                    skipped_existing=len(expected) - len(bad) + (result.skipped if result else 0),
                    bytes_over_wire=result.bytes_over_wire if result else 0, azcopy_runs=1 if result else 0,
                    time_limit={"seconds": limit[0], "how": limit[1]} if result else {})


def _stage_unlisted(run: _Run) -> dict[str, Any]:
    """No listing: azcopy's count is the plan; a manifest recognises a finished stage."""
    plan, stage_dir, staging = run.plan, run.stage_dir, run.staging
    node, rank, decompress = plan.node, plan.rank, plan.decompress
    key = _shard_key(run.source.source_url, plan.include_pattern, plan.blobs, decompress)
    have = _manifest_ok(stage_dir, rank, key)
    if have is not None:
        return run.done(have, skipped_existing=len(have))
    if plan.blobs is not None and not plan.blobs:
        _write_json_atomic(_manifest_path(stage_dir, rank), {"key": key, "files": {}})
        return run.done({})
    limit = run.watch.limits.for_fetch(None, None)
    result = _run_copy(run, include_pattern=plan.include_pattern, blobs=plan.blobs, limit=limit)
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
    return run.done(files, fetched=result.completed, fetched_files=sorted(moved)[:NAMED],
                    skipped_existing=result.skipped, bytes_over_wire=result.bytes_over_wire, azcopy_runs=1,
                    time_limit={"seconds": limit[0], "how": limit[1]})
