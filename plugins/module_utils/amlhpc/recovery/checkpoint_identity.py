# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""A checkpoint store belongs to its run: the run's identity, and the sentences that refuse another's.

The training job (``workload/cosmoflow/ckpt_store.py``, ``train.py``) records the identity in the
store's manifest and in every checkpoint, and refuses a store or a checkpoint of another run
before training starts. Standard library only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

COMPARED = ("name", "model", "data")
"""What makes two runs one: resuming across any of these would train another run's weights."""


def identity(name: str, model: dict[str, Any], data: str, *, world_size: int = 0,
             global_batch: int = 0) -> dict[str, Any]:
    """The identity of a run: ``name`` (its store folder's name, ``submit_name``), the ``model``'s
    configuration, the ``data`` set's fingerprint (:func:`fingerprint`), compared on resume
    (:data:`COMPARED`); the world size and global batch recorded, never compared (a run that
    left a node out resumes on the others, its learning rate following the global batch)."""
    return {"name": str(name), "model": dict(model), "data": str(data),
            "recorded": {"world_size": int(world_size), "global_batch": int(global_batch)}}


def _describe(ident: dict[str, Any], other: dict[str, Any]) -> str:
    model = ident.get("model") or {}
    theirs = other.get("model") or {}
    fields = sorted(k for k in set(model) | set(theirs) if model.get(k) != theirs.get(k))
    shown = ", ".join(f"{k} {model.get(k, 'unset')}" for k in fields[:4]) + (" ..." if len(fields) > 4 else "")
    return (f"run {ident.get('name') or 'unnamed'!r}, model {'(' + shown + ')' if shown else 'the same'}, data "
            f"{ident.get('data') or 'unknown'}")


def identity_problem(theirs: dict[str, Any] | None, ours: dict[str, Any], where: str) -> str | None:
    """None where ``theirs`` (a store's or a checkpoint's identity) is this run's (``ours``), on
    :data:`COMPARED`; else the one sentence that refuses it, naming both and the fix. A store
    written before identities were recorded (``theirs`` empty) is not refused here: the caller
    says so."""
    if not theirs:
        return None
    differ = [k for k in COMPARED if theirs.get(k) != ours.get(k)]
    if not differ:
        return None
    return (f"{where} holds the checkpoints of another run ({_describe(theirs, ours)}), not of this one "
            f"({_describe(ours, theirs)}; they differ in {', '.join(differ)}), so it is not resumed: to start "
            f"afresh give this run another submit_name (its own folder in the store; nothing is deleted), or run "
            f"it as that run again")


def name_sum(names: Sequence[str]) -> tuple[int, int]:
    """(count, sum mod 2^64 of each name's 64-bit BLAKE2b): the part of :func:`fingerprint` one
    node's files give; the parts of any sharding of one set add up to the whole's."""
    total = 0
    for n in names:
        total = (total + int.from_bytes(hashlib.blake2b(n.encode("utf-8"), digest_size=8).digest(), "little")) \
            % (1 << 64)
    return len(names), total


def fingerprint(parts: Sequence[tuple[int, int]]) -> str:
    """The data set's fingerprint from every node's :func:`name_sum` (of its ``split/name``
    files): the same however the files are sharded over the nodes (a node's shard moved after a
    loss), another as soon as one file is added, removed or renamed."""
    count = sum(int(c) for c, _unused in parts)
    total = sum(int(t) for _unused, t in parts) % (1 << 64)
    return f"{count} files {total:016x}"


def nothing_to_train(epoch_done: int, epochs: int, where: str) -> str | None:
    """The one sentence for a run whose checkpoint (``where``, its last finished epoch
    ``epoch_done``, from 0) is already at ``--epochs``; None when epochs are left."""
    if epoch_done + 1 < epochs:
        return None
    return (f"{where} is at epoch {epoch_done + 1} of --epochs {epochs}: this run has trained every epoch asked, "
            f"nothing is left to train (raise --epochs to train on, or give the run another submit_name to "
            f"start afresh)")
