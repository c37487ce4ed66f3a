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
"""

from __future__ import annotations

import hashlib
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
            nodes_text = sorted({tuple(h) for h in doubled.values()})[0]
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
    _, sha = digest(names)
    hashes = name_hashes(names).tobytes() if scope == "node" and local_rank == 0 else b""
    meta = gather((node, sha, hashes))
    nodes = [m[0] for m in meta]
    suspect = False
    if scope == "global":
        suspect = len({m[1] for m in meta}) > 1
    else:
        by_node: dict[int, set[str]] = defaultdict(set)
        for n, s, _ in meta:
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
