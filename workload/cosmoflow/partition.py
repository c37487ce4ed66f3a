"""Start-up check that the ranks' file lists form a partition of the data set.

Two data scopes (``train.py --data-scope``):

``global``
    shared storage (BeeOND, a shared mount): every rank sees the whole split and the ranks
    shard it by global rank. Every rank must see the *same* list; a rank that sees fewer
    files (node-local scratch holding only this node's shard) would silently train on a
    fraction of the data set.
``node``
    node-local staging: each node holds its own shard and the node's ranks shard it by local
    rank. The ranks of one node must see the same list, and no file may be on two nodes
    (shared storage read in node scope would feed every file once per node).

The check is cheap when all is well: every rank sends a digest (count and SHA-256 of its
sorted names); in node scope the first rank of each node also sends 8-byte hashes of its
names, so a file held by two nodes is found without moving the names. Only when something
is wrong are the names themselves gathered, to write one sentence naming the missing or
doubled files (:func:`partition_problem`).

A file that is on no node at all cannot be seen from the nodes' lists; that is for the stage
(which checks what it copied against the blob listing) to catch.

Then :func:`fixed_subset` picks what each node reads, as the MLPerf HPC reference does
(mlcommons/hpc ``cosmoflow/data/cosmo.py``): ``--n-train``/``--n-valid`` samples are the first
files by name, the same every epoch, as many on every node; without a limit every file, which
in node scope needs shards of one size (unequal ones are refused, naming the files per node).
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

SCOPES = ("global", "node")
SHOW = 5  # names quoted in the sentence before "and N more"

Gather = Callable[[Any], list[Any]]
"""all-gather of a picklable object: every rank's object, in rank order."""


def digest(names: Sequence[str]) -> tuple[int, str]:
    """(count, SHA-256 of the sorted names)."""
    h = hashlib.sha256()
    for name in sorted(names):
        h.update(name.encode("utf-8") + b"\0")
    return len(names), h.hexdigest()


def name_hashes(names: Sequence[str]) -> np.ndarray:
    """8-byte hashes of the names (uint64), for a cheap disjointness check across nodes."""
    return np.array([int.from_bytes(hashlib.blake2b(n.encode("utf-8"), digest_size=8).digest(), "little")
                     for n in names], dtype=np.uint64)


def _quote(names: Sequence[str]) -> str:
    names = sorted(names)
    shown = ", ".join(names[:SHOW])
    return shown + (f" and {len(names) - SHOW} more" if len(names) > SHOW else "")


def partition_problem(split: str, lists: Sequence[Sequence[str]], nodes: Sequence[int], scope: str) -> str | None:
    """One sentence saying why the ranks' lists (``lists[rank]``, ranks on ``nodes[rank]``) do
    not form a partition of the data set in ``scope``, or None when they do."""
    if scope not in SCOPES:
        raise ValueError(f"data scope must be one of {SCOPES}, got {scope!r}")
    groups: dict[Any, list[int]] = defaultdict(list)
    for rank, node in enumerate(nodes):
        groups["all" if scope == "global" else node].append(rank)
    lacking: list[str] = []
    for ranks in groups.values():
        union = set().union(*(lists[r] for r in ranks))
        for r in ranks:
            missing = union.difference(lists[r])
            if missing:
                lacking.append(f"rank {r} (node {nodes[r]}) lacks {len(missing)}: {_quote(missing)}")
    if lacking:
        who = "every rank" if scope == "global" else "every rank of a node"
        hint = ("node-local storage holds only each node's shard: use --data-scope node"
                if scope == "global" else "the node's ranks read different folders")
        return (f"{split}: data scope {scope} needs {who} to see the same files, but "
                f"{'; '.join(lacking[:SHOW])}{' ...' if len(lacking) > SHOW else ''} ({hint}).")
    if scope == "node":
        holders: dict[str, list[int]] = defaultdict(list)
        for node, ranks in sorted(groups.items()):
            for name in lists[ranks[0]]:
                holders[name].append(node)
        doubled = {n: h for n, h in holders.items() if len(h) > 1}
        if doubled:
            nodes_text = min({tuple(h) for h in doubled.values()})
            return (f"{split}: data scope node needs each file on one node only, but {len(doubled)} file(s) "
                    f"are on several nodes: {_quote(list(doubled))} (e.g. on nodes "
                    f"{', '.join(map(str, nodes_text))}); shared storage is read with --data-scope global.")
    return None


def check_partition(split: str, names: Sequence[str], scope: str, node: int, local_rank: int,
                    gather: Gather) -> str | None:
    """Collective (every rank calls it): None when the ranks' lists form a partition, else the
    sentence of :func:`partition_problem` (the same on every rank)."""
    if scope not in SCOPES:
        raise ValueError(f"data scope must be one of {SCOPES}, got {scope!r}")
    names = sorted(names)
    _unused, sha = digest(names)
    hashes = name_hashes(names).tobytes() if scope == "node" and local_rank == 0 else b""
    meta = gather((node, sha, hashes))
    nodes = [m[0] for m in meta]
    suspect = False
    if scope == "global":
        suspect = len({m[1] for m in meta}) > 1
    else:
        by_node: dict[int, set[str]] = defaultdict(set)
        for n, s, _unused in meta:
            by_node[n].add(s)
        suspect = any(len(s) > 1 for s in by_node.values())
        if not suspect:
            all_hashes = np.concatenate([np.frombuffer(m[2], dtype=np.uint64) for m in meta] or
                                        [np.zeros(0, np.uint64)])
            suspect = len(np.unique(all_hashes)) < len(all_hashes)
    if not suspect:
        return None
    lists = gather(names)  # something is wrong: now the names, to say which
    return partition_problem(split, lists, nodes, scope) or (
        f"{split}: the ranks' file lists do not form a partition in data scope {scope} (hash collision?).")


FLAGS = {"train": "--n-train", "validation": "--n-valid"}


def _holdings(counts: dict[int, int]) -> str:
    """'43 files on nodes 0, 1; 42 on node 2' (largest first)."""
    by_count: dict[int, list[int]] = defaultdict(list)
    for node, count in sorted(counts.items()):
        by_count[count].append(node)
    parts = []
    for i, (count, nodes) in enumerate(sorted(by_count.items(), reverse=True)):
        shown = ", ".join(map(str, nodes[:SHOW]))
        if len(nodes) > SHOW:
            shown += f" and {len(nodes) - SHOW} more"
        parts.append(f"{count}{' files' if i == 0 else ''} on node{'s' if len(nodes) > 1 else ''} {shown}")
    return "; ".join(parts)


def subset_quota(split: str, counts: dict[int, int], scope: str, limit: int,
                 records_per_file: int = 1, even: bool = False) -> tuple[int, str | None]:
    """(files each node reads, None), or (0, the sentence saying why not).

    ``counts`` maps each node to the files it holds (global scope: one entry, the whole data
    set). As in the reference (mlcommons/hpc cosmoflow/data/cosmo.py ``construct_dataset``),
    ``limit`` samples are whole files, split evenly over the nodes' file sets; with no limit
    (0) every file is read, which in node scope needs shards of one size, unless ``even``
    (``--uneven-shards even``): then every node reads as many files as the smallest shard
    holds (:func:`uneven_note` says how many stay unread)."""
    if scope not in SCOPES:
        raise ValueError(f"data scope must be one of {SCOPES}, got {scope!r}")
    flag = FLAGS.get(split, f"the {split} limit")
    groups = len(counts) if scope == "node" else 1
    unit = records_per_file * groups
    smallest = min(counts.values())
    if not limit:
        if scope == "node" and len(set(counts.values())) > 1 and not even:
            return 0, (f"{split}: data scope node reads the same number of files on every node, but the "
                       f"shards differ ({_holdings(counts)}); stage shards of one size, or give {flag} a "
                       f"multiple of {unit} up to {smallest * unit}.")
        return smallest, None
    if limit % unit:
        where = f" on each of {groups} nodes" if scope == "node" else ""
        return 0, (f"{split}: {flag} {limit} is not a whole number of {records_per_file}-record "
                   f"files{where}; give a multiple of {unit}.")
    quota = limit // unit
    if quota > smallest:
        held = f"the nodes hold {_holdings(counts)}" if scope == "node" else f"the data set holds {smallest}"
        each = f" on each of {groups} nodes" if scope == "node" else ""
        return 0, (f"{split}: {flag} {limit} needs {quota} files{each}, but {held}; "
                   f"give {flag} at most {smallest * unit}.")
    return quota, None


def uneven_note(split: str, counts: dict[int, int], quota: int) -> str | None:
    """The line that says which files an even read leaves unread (None when nothing is left)."""
    unread = sum(counts.values()) - quota * len(counts)
    if not unread:
        return None
    return (f"{split}: the node shards differ ({_holdings(counts)}): every node reads its first {quota} "
            f"files by name, every epoch, and {unread} file(s) stay unread (--uneven-shards even).")


def fixed_subset(split: str, files: Sequence[str], scope: str, node: int, limit: int, records_per_file: int,
                 gather: Gather, even: bool = False,
                 note: Callable[[str], None] | None = None) -> tuple[list[str], str | None]:
    """Collective: the files this rank's node reads, the same every epoch (the first of its
    files by name, as many as :func:`subset_quota` allows), or ([], the sentence of
    :func:`subset_quota`, the same on every rank). Run after :func:`check_partition`, so the
    ranks of one node hold the same files."""
    counts: dict[int, int] = {}
    for n, count in gather((node, len(files))):
        counts[n if scope == "node" else 0] = count
    quota, problem = subset_quota(split, counts, scope, limit, records_per_file, even)
    if problem:
        return [], problem
    if note is not None and scope == "node" and not limit:
        line = uneven_note(split, counts, quota)
        if line:
            note(line)
    return sorted(files, key=os.path.basename)[:quota], None
