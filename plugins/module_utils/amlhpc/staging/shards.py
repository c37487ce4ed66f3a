# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Split a data set between the nodes that stage it: one shard per node, in rank order.

Two modes:

``suffix``
    The CosmoFlow data set names its files ``univ_ics_2019-03_a<UUUUUU>_<SSS>.tfrecord[.gz]``
    where ``SSS`` (000..063) is the sub-volume of a universe; any name ending in
    ``_<SSS>.tfrecord[.gz]`` is taken (other CosmoFlow-style namings carry the same suffix). Each node gets a contiguous
    block of suffixes, as evenly as 64 splits (sizes differ by at most one suffix), handed
    to azcopy as ``--include-pattern`` globs. No listing is needed. With more than 64
    nodes there are not enough suffixes to go round: the planner refuses (one sentence that
    names ``balanced``) unless ``allow_idle`` is set, in which case nodes 64.. get an
    empty shard and are reported in ``idle_hosts``.

``balanced``
    Needs the listing (name and size of every blob). Blobs are dealt out largest first to
    the node with the fewest bytes so far (LPT greedy; ties broken by file count, then rank;
    blobs of equal size by name), so every node gets nearly the same number of bytes for
    any node count. Handed to azcopy as ``--list-of-files``.

Both are deterministic: the same listing and node count always give the same plan, and
every blob lands in exactly one shard. Standard library only.
"""

from __future__ import annotations

import heapq
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .azcopy_paths import listing_problems, shown_problems, unsafe_names

SUFFIXES = 64
MODES = ("suffix", "balanced")
# CosmoFlow-style naming: anything, then the sub-volume suffix _<NNN>, then .tfrecord[.gz]
# (univ_ics_2019-03_a<universe>_<NNN>.tfrecord.gz in the MLPerf HPC v0.7 data set).
NAME_RE = re.compile(r"^.*[^_]_(?P<suffix>\d{3})\.tfrecord(?:\.gz)?$")
# The smallest gzip stream (10-byte header, empty deflate block, 8-byte trailer): a blob that
# says Content-Encoding gzip and is shorter than this is no gzip, and azcopy --decompress
# waits on it for ever.
MIN_GZIP_BYTES = 20


class ShardError(ValueError):
    """A plan that cannot be made; the message says why and what to do."""


@dataclass(frozen=True)
class Blob:
    """One blob of the listing.

    ``name`` is relative to the data set prefix (``train/univ_..._000.tfrecord.gz``), ``size``
    is what goes over the wire, ``raw_size`` what lands on disk after decompression when it
    is known (``None``: unknown, e.g. a gzip-encoded blob without the size in its metadata),
    ``raw_sha256`` the SHA-256 of those bytes when the metadata records it.
    """

    name: str
    size: int
    raw_size: int | None = None
    content_encoding: str = ""
    raw_sha256: str | None = None

    @property
    def gzip_encoded(self) -> bool:
        return self.content_encoding.strip().lower() == "gzip"


@dataclass
class Shard:
    """What one node stages."""

    host: str
    rank: int
    suffixes: list[int] = field(default_factory=list)
    blobs: list[Blob] = field(default_factory=list)

    @property
    def files(self) -> int:
        return len(self.blobs)

    @property
    def bytes(self) -> int:
        return sum(b.size for b in self.blobs)

    @property
    def raw_bytes(self) -> int | None:
        """Bytes on disk after staging, or ``None`` when one blob's size after decompression is unknown."""
        total = 0
        for b in self.blobs:
            if b.raw_size is None:
                return None
            total += b.raw_size
        return total


def suffix_of(name: str) -> int | None:
    """The sub-volume suffix (0..63) of a name ending in ``_<NNN>.tfrecord[.gz]``, else ``None``."""
    m = NAME_RE.match(posixpath.basename(name))
    if not m:
        return None
    value = int(m.group("suffix"))
    return value if value < SUFFIXES else None


def split_suffixes(num_hosts: int, allow_idle: bool = False) -> list[list[int]]:
    """The suffixes of each host: contiguous blocks whose sizes differ by at most one.

    More than 64 hosts: refused unless ``allow_idle`` (hosts 64.. then get none).
    """
    if num_hosts < 1:
        raise ShardError(f"there must be at least one host to stage to, got {num_hosts}")
    if num_hosts > SUFFIXES and not allow_idle:
        raise ShardError(
            f"suffix mode splits the {SUFFIXES} sub-volume suffixes 000-063 between nodes, so {num_hosts} "
            f"nodes would leave {num_hosts - SUFFIXES} of them without data: use shard mode 'balanced' "
            "(or allow idle nodes)")
    active = min(num_hosts, SUFFIXES)
    out: list[list[int]] = []
    for i in range(num_hosts):
        if i >= active:
            out.append([])
            continue
        lo, hi = (i * SUFFIXES) // active, ((i + 1) * SUFFIXES) // active
        out.append(list(range(lo, hi)))
    return out


def include_pattern(suffixes: Iterable[int]) -> str:
    """azcopy ``--include-pattern`` for the suffixes: ``*_000.tfrecord;*_000.tfrecord.gz;...``."""
    parts = []
    for s in sorted(set(suffixes)):
        if not 0 <= s < SUFFIXES:
            raise ShardError(f"suffix {s} is outside 000-{SUFFIXES - 1:03d}")
        parts += [f"*_{s:03d}.tfrecord", f"*_{s:03d}.tfrecord.gz"]
    return ";".join(parts)


def list_of_files(blobs: Iterable[Blob]) -> str:
    """Content of an azcopy ``--list-of-files`` file: one blob path a line, relative to the source."""
    return "".join(f"{b.name}\n" for b in blobs)


def _balanced(blobs: Sequence[Blob], num_hosts: int) -> list[list[Blob]]:
    """LPT greedy: largest blob first, to the host with the fewest bytes (then files, then rank)."""
    heap = [(0, 0, rank) for rank in range(num_hosts)]
    out: list[list[Blob]] = [[] for _unused in range(num_hosts)]
    for blob in sorted(blobs, key=lambda b: (-b.size, b.name)):
        total, count, rank = heap[0]
        out[rank].append(blob)
        heapq.heapreplace(heap, (total + blob.size, count + 1, rank))
    for shard in out:
        shard.sort(key=lambda b: b.name)
    return out


def balanced_loads(sizes_desc: Sequence[int], num_hosts: int) -> list[int]:
    """Bytes per host that balanced mode gives, from sizes sorted largest first (fast path for benches).

    The same greedy and tie-breaks as ``plan_shards(..., "balanced")`` (names only order
    blobs of equal size, which does not change the loads), without building the shards.
    """
    heap = [(0, 0, rank) for rank in range(num_hosts)]
    replace = heapq.heapreplace
    for size in sizes_desc:
        total, count, rank = heap[0]
        replace(heap, (total + size, count + 1, rank))
    loads = [0] * num_hosts
    for total, _count, rank in heap:
        loads[rank] = total
    return loads


def staged_name(blob: Blob) -> str:
    """The name a blob gets on disk when the stage decompresses (the default): ``.gz`` dropped
    from a gzip-encoded blob."""
    return blob.name[:-3] if blob.gzip_encoded and blob.name.endswith(".gz") else blob.name


def _check_listing(blobs: Sequence[Blob]) -> None:
    """Refuse, before anything is planned, a listing that cannot be staged as it is: a name
    twice, a negative size, a name that would leave the stage folder or that a Linux file
    system cannot hold, two blobs for one file, a gzip-encoded blob too short to be gzip."""
    seen: set[str] = set()
    for b in blobs:
        if b.name in seen:
            raise ShardError(f"the listing names blob {b.name!r} twice")
        if b.size < 0:
            raise ShardError(f"blob {b.name!r} has a negative size {b.size}")
        seen.add(b.name)
    bad = unsafe_names(b.name for b in blobs)
    if bad:
        raise ShardError(
            f"{len(bad)} blob name(s) below the prefix cannot be staged: {shown_problems(bad)}. Each would be "
            "written outside the stage folder or cannot be held by a Linux file system, so nothing was staged or "
            "removed: rename or remove those blobs, or choose a stage_prefix that leaves them out.")
    raw = {name: why for name, why in listing_problems(b.name for b in blobs).items() if "folder" in why}
    if raw:
        raise ShardError(
            f"{len(raw)} blob name(s) below the prefix are both a file and a folder: {shown_problems(raw)}; a file "
            "system cannot hold a file and a folder under one name, and azcopy would never finish the stage. Nothing "
            "was staged or removed: rename the file blob of each pair in the container (or move the blobs under it to "
            "another folder), or choose a stage_prefix that leaves them out.")
    clash = listing_problems(staged_name(b) for b in blobs)
    if clash:
        raise ShardError(
            f"{len(clash)} blob name(s) below the prefix cannot be staged side by side: {shown_problems(clash)} "
            "(a gzip-encoded <name>.gz is staged as <name>). Nothing was staged or removed: rename or remove one "
            "blob of each pair, or choose a stage_prefix that leaves them out.")
    short = {b.name: f"{b.size} bytes" for b in blobs if b.gzip_encoded and b.size < MIN_GZIP_BYTES}
    if short:
        raise ShardError(
            f"{len(short)} blob(s) say Content-Encoding gzip but are too short to be gzip (at least "
            f"{MIN_GZIP_BYTES} bytes): {shown_problems(short)}; azcopy --decompress would wait on them for ever, "
            "so nothing was staged or removed: upload them again (playbooks/prepare_dataset.yml) or clear their "
            "Content-Encoding.")


def plan_shards(hosts: Sequence[str], mode: str = "suffix", blobs: Sequence[Blob] | None = None,
                allow_idle: bool = False) -> list[Shard]:
    """One shard per host (``hosts`` in rank order).

    ``suffix`` mode works without a listing (``blobs=None``: only the suffixes are known);
    with one, every blob must follow the CosmoFlow naming, or it would be staged nowhere.
    ``balanced`` mode needs the listing.
    """
    if mode not in MODES:
        raise ShardError(f"shard mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not hosts:
        raise ShardError("there must be at least one host to stage to, got none")
    if len(set(hosts)) != len(hosts):
        raise ShardError(f"the host list names a host twice: {list(hosts)}")
    if blobs is not None:
        _check_listing(blobs)
    if mode == "balanced":
        if blobs is None:
            raise ShardError("balanced mode needs the container listing (name and size of every blob)")
        groups = _balanced(blobs, len(hosts))
        return [Shard(host=h, rank=i, blobs=groups[i]) for i, h in enumerate(hosts)]
    per_host = split_suffixes(len(hosts), allow_idle=allow_idle)
    shards = [Shard(host=h, rank=i, suffixes=per_host[i]) for i, h in enumerate(hosts)]
    if blobs is not None:
        owner = {s: i for i, suffixes in enumerate(per_host) for s in suffixes}
        strangers = [b.name for b in blobs if suffix_of(b.name) is None]
        if strangers:
            shown = ", ".join(strangers[:3]) + (f" and {len(strangers) - 3} more" if len(strangers) > 3 else "")
            raise ShardError(
                f"{len(strangers)} blob(s) do not follow the CosmoFlow naming "
                f"<name>_<NNN>.tfrecord[.gz] with NNN 000-063 ({shown}), so suffix mode would stage them "
                "nowhere: use shard mode 'balanced'")
        for b in sorted(blobs, key=lambda b: b.name):
            shards[owner[suffix_of(b.name)]].blobs.append(b)  # type: ignore[index]
    return shards


def plan_shards_without(hosts: Sequence[str], excluded: Iterable[str], mode: str = "suffix",
                        blobs: Sequence[Blob] | None = None, allow_idle: bool = False) -> list[Shard]:
    """The shards of ``hosts`` minus ``excluded`` (nodes the health gate left out), moving as
    little as possible: the plan over every host (``hosts`` in rank order) is made first, each
    kept host keeps its shard, and only the excluded hosts' shards are dealt out to the kept
    ones. Suffix mode hands each suffix of an excluded shard, in order, to the kept host with
    the fewest suffixes (then the lowest rank); balanced mode hands its blobs, largest first,
    to the kept host with the fewest bytes (then files, then rank). Kept shards keep their
    rank. When the excluded hosts come back, the plan over every host gives each its own
    shard again, so only their shards move back."""
    excluded = set(excluded)
    shards = plan_shards(hosts, mode, blobs, allow_idle=allow_idle)
    kept = [s for s in shards if s.host not in excluded]
    gone = [s for s in shards if s.host in excluded]
    if not kept:
        raise ShardError(f"every one of the {len(shards)} host(s) is excluded: there is no node left to stage to")
    if not gone:
        return shards
    if mode == "suffix":
        blobs_of: dict[int, list[Blob]] = {}
        for s in gone:
            for b in s.blobs:
                blobs_of.setdefault(suffix_of(b.name), []).append(b)  # type: ignore[arg-type]
        for suffix in sorted(x for s in gone for x in s.suffixes):
            to = min(kept, key=lambda s: (len(s.suffixes), s.rank))
            to.suffixes.append(suffix)
            to.blobs.extend(blobs_of.get(suffix, []))
        for s in kept:
            s.suffixes.sort()
    else:
        heap = [(s.bytes, s.files, s.rank, i) for i, s in enumerate(kept)]
        heapq.heapify(heap)
        for blob in sorted((b for s in gone for b in s.blobs), key=lambda b: (-b.size, b.name)):
            total, count, rank, i = heap[0]
            kept[i].blobs.append(blob)
            heapq.heapreplace(heap, (total + blob.size, count + 1, rank, i))
    for s in kept:
        s.blobs.sort(key=lambda b: b.name)
    return kept


def moved_files(before: Sequence[Shard], after: Sequence[Shard]) -> dict[str, dict[str, list[str]]]:
    """``{to_host: {from_host: [blob names]}}``: the blobs whose host differs between two plans
    (what a stage fetches anew), for the plan's summary and check mode."""
    owner = {b.name: s.host for s in before for b in s.blobs}
    out: dict[str, dict[str, list[str]]] = {}
    for s in after:
        for b in s.blobs:
            src = owner.get(b.name)
            if src != s.host:
                out.setdefault(s.host, {}).setdefault(src or "", []).append(b.name)
    return out


def empty_source_error(listed: Sequence[Blob] | None, container: str, prefix: str,
                       allow_empty: bool = False) -> str | None:
    """One sentence refusing a listing with no blob (a prefix or container typo would make every
    node's shard empty, and a stage with prune would then remove everything staged), unless
    ``allow_empty`` says an empty data set is meant; None otherwise, and where nothing was listed."""
    if listed is None or listed or allow_empty:
        return None
    return (f"container {container!r} has no blobs under prefix {prefix!r}, so every node's shard would be empty "
            "and nothing was staged or removed: check stage_container and stage_prefix, or set "
            "stage_allow_empty: true if an empty data set is what you mean.")


def imbalance(values: Sequence[int | float]) -> float:
    """max / mean of the values (1.0 is perfect); 1.0 for all zeros."""
    if not values:
        return 1.0
    mean = sum(values) / len(values)
    return (max(values) / mean) if mean else 1.0


def plan_summary(shards: Sequence[Shard], mode: str, listed: bool = True,
                 include_files: bool = True) -> dict[str, Any]:
    """The plan as plain data (what the action plugin returns and the stage module takes).

    ``shards`` is keyed by host. Each entry has rank, files, bytes, raw_bytes (bytes on disk
    after decompression, ``None`` when unknown), the ``include_pattern`` (suffix mode) and
    ``list_of_files`` (the blob names, when the listing is known and ``include_files``) with
    ``expected`` (name, size after staging, gzip-encoded) for the check after staging.
    """
    out_shards: dict[str, dict[str, Any]] = {}
    for s in shards:
        entry: dict[str, Any] = {
            "rank": s.rank,
            "mode": mode,
            "files": s.files if listed else None,
            "bytes": s.bytes if listed else None,
            "raw_bytes": s.raw_bytes if listed else None,
            "suffixes": [f"{x:03d}" for x in s.suffixes],
            "include_pattern": include_pattern(s.suffixes) if mode == "suffix" else "",
        }
        if listed and include_files:
            entry["list_of_files"] = [b.name for b in s.blobs]
            entry["expected"] = [{"name": b.name, "raw_size": b.raw_size, "gzip": b.gzip_encoded,
                                  "sha256": b.raw_sha256, "size": b.size} for b in s.blobs]
        out_shards[s.host] = entry
    idle = [s.host for s in shards if (mode == "suffix" and not s.suffixes) or (listed and not s.blobs)]
    summary: dict[str, Any] = {
        "mode": mode,
        "num_hosts": len(shards),
        "listed": listed,
        "idle_hosts": idle,
        "shards": out_shards,
    }
    if listed:
        byte_counts = [s.bytes for s in shards]
        file_counts = [s.files for s in shards]
        summary.update({
            "total_files": sum(file_counts),
            "total_bytes": sum(byte_counts),
            "imbalance": round(imbalance(byte_counts), 6),
            "files_imbalance": round(imbalance(file_counts), 6),
        })
    else:
        summary.update({"total_files": None, "total_bytes": None, "imbalance": None, "files_imbalance": None,
                        "suffix_imbalance": round(imbalance([len(s.suffixes) for s in shards]), 6)})
    return summary
