# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""A node lost during training: the sentence that names it, and what the next run does about it.

Shared by the job (``workload/cosmoflow/heartbeat.py`` writes the sentence) and the controller
(``aml_job`` finds it in the run's log; the ``submit`` role records the interruption; the stage
plans the shards over the run's recorded node slots so that only the lost node's files move; the
last look before submit; the report). Standard library only.

The sentence
    One line in the job's log, produced by :func:`loss_sentence` and read back by
    :func:`parse_loss`::

        [node-loss] node hx-3 (10.7.0.5), rank 3 of 5: no heartbeat for 95 s (missed heartbeat; last
        at 2026-11-27T12:03:05Z, seen by rank 0 at 2026-11-27T12:04:40Z); ...

    ``seen`` is ``missed heartbeat`` (the rank's beats stopped: the node died, froze or lost its
    network) or ``collective timed out`` (the rank is alive but has not joined a training
    collective the other ranks have waited in for that long).

Slots
    The shard plan deals files to nodes by position. A run records its nodes in plan order
    (``nodes.json`` in the run's folder: host, node id, private IP); the next run maps the nodes
    it sees onto those slots by node id (:func:`plan_slots`), so a node that survived keeps its
    shard whatever AmlCompute's listing now calls it, a node AmlCompute put in the place of a
    lost one takes that slot (and its shard), and a slot whose node is gone is planned as a
    node left out: only its files move.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

TAG = "[node-loss]"
MISSED = "missed heartbeat"
COLLECTIVE = "collective timed out"
SEEN = (MISSED, COLLECTIVE)
OPERATIONS = 'docs/operations.md, "A node lost during training"'
LOST_PREFIX = "lost:"
"""Placeholder host names of the slots whose node is gone (planned as left out)."""

_SENTENCE = re.compile(
    r"\[node-loss\] node (?P<node>\S+) \((?P<ip>[^)]*)\), ranks? (?P<ranks>[\d, -]+) of (?P<world>\d+): "
    r"(?P<what>.*?) \((?P<seen>missed heartbeat|collective timed out); last at (?P<last>\S+), seen by rank "
    r"(?P<by>\d+) at (?P<at>\S+)\)")


def iso(ts: float) -> str:
    """``ts`` (seconds since the epoch) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_iso(text: str) -> float:
    """Seconds since the epoch of an :func:`iso` time."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def rank_list(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    out: list[str] = []
    run: list[int] = []
    for r in sorted(set(ranks)):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [r]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def parse_ranks(text: str) -> list[int]:
    """The inverse of :func:`rank_list`."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def loss_sentence(*, node: str, ip: str, ranks: Sequence[int], world: int, seen: str, seconds: float,
                  last: float, by: int, at: float, what: str = "", waiting: int = 0) -> str:
    """The one line naming a lost node: ``node`` (its host name) and ``ip``, its ``ranks`` of
    ``world``, what was ``seen`` (:data:`SEEN`), for how many ``seconds``, the ``last`` beat (or
    when the wait began), and which rank said so ``at`` what time. ``what`` and ``waiting``: the
    collective the other ranks wait in and how many they are (``collective timed out``)."""
    if seen not in SEEN:
        raise ValueError(f"seen must be one of {SEEN}, not {seen!r}")
    many = len(set(ranks)) > 1
    if seen == MISSED:
        told = f"no heartbeat for {seconds:.0f} s"
    else:
        told = (f"has not joined {what} for {seconds:.0f} s while {waiting} other rank(s) wait in it")
    return (f"{TAG} node {node} ({ip or 'address unknown'}), rank{'s' if many else ''} {rank_list(ranks)} of {world}: "
            f"{told} ({seen}; last at {iso(last)}, seen by rank {by} at {iso(at)}); the job stops so that it can "
            f"resume without it: rerun site.yml ({OPERATIONS})")


def parse_loss(text: str) -> dict[str, Any] | None:
    """The first node-loss sentence in ``text`` (a run's log) as a dict (node, ip, ranks, world,
    seen, what, last/at as times and seconds since the epoch, sentence), or None."""
    m = _SENTENCE.search(text or "")
    if not m:
        return None
    line_end = text.find("\n", m.start())
    sentence = text[m.start(): line_end if line_end >= 0 else len(text)].strip()
    return {"node": m["node"], "ip": "" if m["ip"] == "address unknown" else m["ip"],
            "ranks": parse_ranks(m["ranks"]), "world": int(m["world"]), "seen": m["seen"], "what": m["what"],
            "last": m["last"], "last_ts": from_iso(m["last"]), "at": m["at"], "at_ts": from_iso(m["at"]),
            "by": int(m["by"]), "sentence": sentence.removeprefix(TAG).strip()}


def parse_loss_file(path: str, limit: int = 8 << 20) -> dict[str, Any] | None:
    """:func:`parse_loss` on the last ``limit`` bytes of the file at ``path`` (None when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return parse_loss(f.read().decode("utf-8", "replace"))
    except OSError:
        return None


# --- the heartbeat's rule (workload/cosmoflow/heartbeat.py runs it) ------------------------------
@dataclass(frozen=True)
class Timing:
    """``interval`` between beats and ``lost_after`` (seconds without a beat) for a bound ``timeout``."""

    timeout: float
    interval: float
    lost_after: float

    @classmethod
    def of(cls, timeout: float) -> Timing:
        if timeout <= 0:
            raise ValueError("the node-loss timeout must be more than 0 s (0 switches the heartbeat off)")
        interval = min(10.0, max(0.5, timeout / 12))
        lost_after = timeout - 3 * interval
        if lost_after < 2 * interval:
            raise ValueError(f"--node-loss-timeout {timeout:g} is too short: give at least 2.5 s")
        return cls(float(timeout), interval, lost_after)


@dataclass(frozen=True)
class Finding:
    """What rank 0's watcher (or a rank that lost the store) found."""

    seen: str
    ranks: tuple[int, ...]
    seconds: float
    since_wall: float
    what: str = ""
    waiting: int = 0


def judge(now: float, last_change: Mapping[int, float], waiting: Mapping[int, tuple[str, float]],
          lost_after: float) -> Finding | None:
    """The verdict over the beats: ``last_change[r]`` is when rank r's counter last moved,
    ``waiting[r]`` the training collective rank r waits in and since when (both on the watcher's
    clock, ``now``). Missed heartbeats first (every rank silent that long, together); else a
    collective some ranks have waited in for ``lost_after`` while others, alive, never came:
    those are named. Where every rank waits in it, no rank is behind and none is named (the
    collective's own timeout, ``--collective-timeout``, ends that). ``since_wall`` is left 0:
    the caller knows the wall clock."""
    silent = sorted(r for r, t in last_change.items() if now - t >= lost_after)
    if silent:
        oldest = min(last_change[r] for r in silent)
        return Finding(MISSED, tuple(silent), now - oldest, 0.0)
    by_what: dict[str, list[int]] = {}
    for r, (what, _since) in waiting.items():
        if what:
            by_what.setdefault(what, []).append(r)
    for what, ranks in sorted(by_what.items()):
        since = min(waiting[r][1] for r in ranks)
        held = [r for r in ranks if now - waiting[r][1] >= lost_after]
        if not held:
            continue
        absent = sorted(set(last_change) - set(ranks))
        if absent:
            return Finding(COLLECTIVE, tuple(absent), now - since, 0.0, what, len(ranks))
    return None
