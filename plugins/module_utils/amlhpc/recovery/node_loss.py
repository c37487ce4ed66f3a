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
SLOW = "slow peer"
"""Not a loss: a rank the others wait for is alive and still making steps (said, never ended)."""
SLOW_STEPS = 4.0
"""A rank the others wait for is stalled once it made no step for this many of the slowest
rank's recent step times (and never sooner than ``lost_after``): :func:`collective_bound`."""
OPERATIONS = 'docs/operations.md, "A node lost during training"'
LOST_PREFIX = "lost:"
"""Placeholder host names of the slots whose node is gone (planned as left out)."""

_SENTENCE = re.compile(
    r"\[node-loss\] node (?P<node>\S+) \((?P<ip>[^)]*)\), ranks? (?P<ranks>[\d, -]+) of (?P<world>\d+): "
    r"(?P<what>.*?) \((?P<seen>missed heartbeat|collective timed out); last at (?P<last>\S+), seen by rank "
    r"(?P<by>\d+) at (?P<at>\S+)\)")


def iso(ts: float) -> str:
    """``ts`` (seconds since the epoch) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.fromtimestamp(int(ts), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def loss_sentence(finding: Finding, *, node: str, ip: str, world: int, by: int, at: float,
                  ranks: Sequence[int] | None = None) -> str:
    """The one line naming a lost node: ``node`` (its host name) and ``ip``, its ``ranks`` of
    ``world`` (None: the ``finding``'s, which may span nodes), and from the finding what was
    ``seen`` (:data:`SEEN`), for how many ``seconds``, the last beat (or when the wait began:
    ``since_wall``), ``what`` collective the other ranks wait in and how many they are
    (``waiting``, ``collective timed out``), and for how long the rank made no step
    (``stalled``) against the ``bound`` (:func:`collective_bound`); which rank said so (``by``)
    ``at`` what time."""
    seen, seconds, what, bound = finding.seen, finding.seconds, finding.what, finding.bound
    ranks = finding.ranks if ranks is None else ranks
    if seen not in SEEN:
        raise ValueError(f"seen must be one of {SEEN}, not {seen!r}")
    many = len(set(ranks)) > 1
    if seen == MISSED:
        told = f"no heartbeat for {seconds:.0f} s"
    else:
        told = (f"has not joined {what} for {seconds:.0f} s while {finding.waiting} other rank(s) wait in it")
        if bound:
            told += (f", and made no step for {finding.stalled:.0f} s (stalled, not slow: the bound is {bound:.0f} s, "
                     f"{SLOW_STEPS:g} times the slowest recent step and never less than the heartbeat's)")
    return (f"{TAG} node {node} ({ip or 'address unknown'}), rank{'s' if many else ''} {rank_list(ranks)} of {world}: "
            f"{told} ({seen}; last at {iso(finding.since_wall)}, seen by rank {by} at {iso(at)}); the job stops so "
            f"that it can resume without it: rerun site.yml ({OPERATIONS})")


def parse_losses(text: str) -> list[dict[str, Any]]:
    """Every node-loss sentence in ``text`` (a run's log; every rank prints what it saw), each as
    a dict (node, ip, ranks, world, seen, what, last/at as times and seconds since the epoch, by,
    sentence), in the order of the log, each once."""
    out: list[dict[str, Any]] = []
    seen_keys: set[tuple[Any, ...]] = set()
    for m in _SENTENCE.finditer(text or ""):
        line_end = text.find("\n", m.start())
        sentence = text[m.start(): line_end if line_end >= 0 else len(text)].strip()
        loss = {"node": m["node"], "ip": "" if m["ip"] == "address unknown" else m["ip"],
                "ranks": parse_ranks(m["ranks"]), "world": int(m["world"]), "seen": m["seen"], "what": m["what"],
                "last": m["last"], "last_ts": from_iso(m["last"]), "at": m["at"], "at_ts": from_iso(m["at"]),
                "by": int(m["by"]), "sentence": sentence.removeprefix(TAG).strip()}
        key = (loss["node"], tuple(loss["ranks"]), loss["by"])
        if key not in seen_keys:
            seen_keys.add(key)
            out.append(loss)
    return out


def parse_loss(text: str) -> dict[str, Any] | None:
    """The lost node of a run's log (:func:`parse_losses`, decided by :func:`blame`), or None."""
    return blame(parse_losses(text))


def _lost_everyone(by: int, named: set[int], own: set[int], world: int, losses: Sequence[Mapping[str, Any]],
                   heard_by: set[int]) -> bool:
    """Rank ``by`` lost every other rank: rank 0 (which watches) named every rank off its own
    node, or, as it stops at its first finding and names only the ranks it missed first, most of
    the ranks off its node (``heard_by``: every other rank that spoke) named it; any other rank
    lost rank 0's store, which is all it talks to (``missed heartbeat``)."""
    if by == 0:
        if named & own:
            return False
        return (named | own) >= set(range(world)) or len(heard_by - own) > (world - len(own)) / 2
    return any(loss["seen"] == MISSED and 0 in loss["ranks"] for loss in losses)


def _gap(loss: Mapping[str, Any]) -> float | None:
    """Seconds between the last beat a missed-heartbeat sentence saw and the moment it saw none."""
    if loss.get("seen") != MISSED or loss.get("last_ts") is None or loss.get("at_ts") is None:
        return None
    return float(loss["at_ts"]) - float(loss["last_ts"])


def _timely(losses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``losses`` less the late looks: a rank that was itself stopped (a frozen node) looks only once
    it runs again and then finds every other rank silent for much longer than the bound, while the
    ranks that kept running found it silent within the bound. A rank cut off from the network keeps
    running and looks on time, so its sentence stays. Kept whole where every sentence is late."""
    gaps = [g for g in (_gap(x) for x in losses) if g is not None]
    if not gaps:
        return losses
    limit = 1.5 * min(gaps) + 5.0
    kept = [x for x in losses if (_gap(x) or 0.0) <= limit]
    return kept or losses


def blame(losses: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The node to name, from every rank's sentences (:func:`parse_losses`).

    A node cut off from the network loses every other rank, and every other rank loses it: its
    own rank names healthy nodes. So where one rank (``by``) lost every other rank (rank 0, which
    stops at its first finding: or most ranks off its node named it) and every other rank that
    said anything named ``by``'s node, that node is named (``cut_off``), and the sentence says
    what each side saw. Two workers cut off together name rank 0, which the others still hear:
    a minority, so rank 0's own sentence stands. With two nodes each side loses the other alike: the first
    sentence is named and says that either may be the one cut off. Otherwise the first sentence
    is the loss, with the other nodes its rank named at once in ``also`` (two nodes lost at once).
    A late look (:func:`_timely`: a frozen node's, once it woke) counts for neither."""
    losses = _timely([dict(x) for x in losses])
    if not losses:
        return None
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for loss in losses:
        by_rank.setdefault(loss["by"], []).append(loss)
    world = max(int(x["world"]) for x in losses)
    cut: list[tuple[int, dict[str, Any]]] = []
    for by, own_losses in by_rank.items():
        others = {b: ls for b, ls in by_rank.items() if b != by}
        if not others:
            continue
        theirs = [next((x for x in ls if by in x["ranks"]), None) for ls in others.values()]
        if any(x is None for x in theirs):
            continue  # a rank that said something did not lose this one
        own = {r for x in theirs if x for r in x["ranks"]}
        named = {r for x in own_losses for r in x["ranks"]}
        if _lost_everyone(by, named, own, world, own_losses, set(others)):
            cut.append((by, theirs[0]))  # type: ignore[arg-type]
    first = losses[0]
    if len(cut) == 1:
        by, theirs = cut[0]
        out = dict(theirs)
        lost_by_it = sorted({r for x in by_rank[by] for r in x["ranks"]})
        sayers = sorted(b for b in by_rank if b != by)
        how = by_rank[by][0]
        out["cut_off"] = True
        s_them, s_sayers = ("s" if len(theirs["ranks"]) > 1 else ""), ("s" if len(sayers) > 1 else "")
        out["sentence"] = (
            f"node {theirs['node']} ({theirs['ip'] or 'address unknown'}), rank{s_them} {rank_list(theirs['ranks'])} "
            f"of {world}, was cut off from the others: rank{s_sayers} {rank_list(sayers)} lost it "
            f"({theirs['seen']}; {theirs['what']}, seen by rank {theirs['by']} at "
            f"{theirs['at']}) and it lost rank{'s' if len(lost_by_it) > 1 else ''} {rank_list(lost_by_it)} "
            f"({how['seen']}; {how['what']}, seen by rank {by} at {how['at']}); the job stops so that it can resume "
            f"without it: rerun site.yml ({OPERATIONS})")
        return out
    out = dict(first)
    if len(cut) > 1:
        out["cut_off"] = False
        out["sentence"] = (f"{first['sentence']} (each of ranks {rank_list(b for b, _unused in cut)} lost the other "
                           f"side: either node may be the one cut off from the network)")
        return out
    out["also"] = [x for x in by_rank[first["by"]] if x["node"] != first["node"]]
    return out


def parse_loss_file(path: str, start: int = 0, limit: int = 8 << 20) -> dict[str, Any] | None:
    """:func:`parse_loss` on what the file at ``path`` holds from byte ``start`` (a log appended to
    by every run: this run's part), its last ``limit`` bytes at most (None when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(start, size - limit))
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
    stalled: float = 0.0
    bound: float = 0.0


def collective_bound(lost_after: float, step_time: float) -> float:
    """How long a rank the others wait for may go without a step before it is stalled:
    :data:`SLOW_STEPS` times the slowest rank's recent step time, never less than ``lost_after``."""
    return max(float(lost_after), SLOW_STEPS * max(0.0, float(step_time)))


class StepClock:
    """The watcher's view of every rank's steps: when its step counter last moved, and its recent
    step times (the gaps between the moves it saw, the last :attr:`KEEP` of them; the first from
    ``start``)."""

    KEEP = 8

    def __init__(self, start: float = 0.0) -> None:
        self.start = start
        self.last: dict[int, float] = {}
        self.gaps: dict[int, list[float]] = {}

    def moved(self, rank: int, now: float) -> None:
        gaps = self.gaps.setdefault(rank, [])
        gaps.append(now - self.last.get(rank, self.start))
        del gaps[:-self.KEEP]
        self.last[rank] = now

    def step_times(self) -> dict[int, float]:
        """Each rank's slowest recent step time (s)."""
        return {r: max(g) for r, g in self.gaps.items() if g}


def judge(now: float, last_change: Mapping[int, float], waiting: Mapping[int, tuple[str, float]],
          lost_after: float, progress: Mapping[int, float] | None = None,
          step_time: Mapping[int, float] | None = None) -> Finding | None:
    """The verdict over the beats: ``last_change[r]`` is when rank r's counter last moved,
    ``waiting[r]`` the training collective rank r waits in and since when (both on the watcher's
    clock, ``now``). Missed heartbeats first (every rank silent that long, together); else a
    collective some ranks have waited in for ``lost_after`` while others, alive, never came:
    those are named. Where every rank waits in it, no rank is behind and none is named (the
    collective's own timeout, ``--collective-timeout``, ends that). ``since_wall`` is left 0:
    the caller knows the wall clock.

    With ``progress`` (when each rank's step counter last moved) and ``step_time`` (each rank's
    slowest recent step, :class:`StepClock`), a rank that stays out of the collective is named
    only when it made no step for :func:`collective_bound` (stalled); one still making steps is
    a slow peer: a :data:`SLOW` finding, which says so and ends nothing."""
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
        if not absent:
            continue
        if progress is None:
            return Finding(COLLECTIVE, tuple(absent), now - since, 0.0, what, len(ranks))
        bound = collective_bound(lost_after, max((step_time or {}).values(), default=0.0))
        quiet = {r: now - progress.get(r, float("-inf")) for r in absent}
        stalled = [r for r in absent if quiet[r] >= bound]
        if stalled:
            return Finding(COLLECTIVE, tuple(stalled), now - since, 0.0, what, len(ranks),
                           min(quiet[r] for r in stalled), bound)
        return Finding(SLOW, tuple(absent), now - since, 0.0, what, len(ranks), max(quiet.values()), bound)
    return None


def slow_sentence(finding: Finding, world: int, nodes: str) -> str:
    """The line that says a rank the others wait for is slow, not lost (:data:`SLOW`)."""
    many = len(finding.ranks) > 1
    return (f"[cosmoflow] rank{'s' if many else ''} {rank_list(finding.ranks)} of {world} ({nodes}) "
            f"{'are' if many else 'is'} slow, not lost: {'they have' if many else 'it has'} not joined {finding.what} "
            f"for {finding.seconds:.0f} s while {finding.waiting} other rank(s) wait in it, but made a step "
            f"{finding.stalled:.0f} s ago ({SLOW}); named stalled only after {finding.bound:.0f} s without one")


# --- slots: the run's nodes in plan order, across runs --------------------------------------------

def current_nodes(hostvars: Mapping[str, Mapping[str, Any]], hosts: Iterable[str]) -> list[dict[str, Any]]:
    """The inventory's nodes in rank order (cluster, rank, name): host, node id (the host name
    where the inventory has none), private IP."""
    nodes = []
    for host in hosts:
        hv = hostvars.get(host) or {}
        nodes.append({"host": str(host), "node_id": str(hv.get("aml_node_id") or host),
                      "ip": str(hv.get("aml_private_ip") or ""), "cluster": str(hv.get("aml_cluster") or ""),
                      "rank": int(hv.get("aml_node_rank") or 0)})
    return sorted(nodes, key=lambda n: (n["cluster"], n["rank"], n["host"]))


def placeholder(slot: Mapping[str, Any]) -> str:
    """The plan's name for a slot whose node is gone: never a host of the inventory."""
    return f"{LOST_PREFIX}{slot.get('host')}"


def plan_slots(recorded: Sequence[Mapping[str, Any]] | None, current: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The shard plan's host order for this run, from the run's ``recorded`` slots (``nodes.json``;
    None or empty: the first run) and the ``current`` nodes (:func:`current_nodes`).

    A node that was in a slot keeps it, whatever the listing calls it now (matched by node id);
    a node that is new takes a slot whose node is gone, in slot order (the node AmlCompute put
    in its place), or a new slot at the end; a slot still without a node is planned under a
    placeholder name (:func:`placeholder`) and left out, so that only its files move. Returns
    ``hosts`` (plan order), ``lost`` (the placeholders), ``gone`` (the lost slots' records),
    ``replacements`` (``{host, was}``), ``record`` (what ``nodes.json`` holds next), ``differs``
    (the record is to be written) and ``lines`` (one sentence each)."""
    current = list(current)
    if not recorded:
        record = [{"host": n["host"], "node_id": n["node_id"], "ip": n.get("ip", "")} for n in current]
        return {"hosts": [n["host"] for n in current], "lost": [], "gone": [], "replacements": [], "record": record,
                "differs": True, "lines": []}
    by_id = {n["node_id"]: n for n in current}
    used: set[str] = set()
    slots: list[dict[str, Any] | None] = []
    for slot in recorded:
        node = by_id.get(str(slot.get("node_id")))
        if node is not None and node["node_id"] not in used:
            used.add(node["node_id"])
            slots.append(node)
        else:
            slots.append(None)
    newcomers = [n for n in current if n["node_id"] not in used]
    replacements = []
    for i, slot in enumerate(slots):
        if slot is None and newcomers:
            node = newcomers.pop(0)
            slots[i] = node
            replacements.append({"host": node["host"], "was": str(recorded[i].get("host")), "slot": i})
    slots += newcomers  # more nodes than slots: new slots at the end
    hosts, lost, gone, record = [], [], [], []
    for i, node in enumerate(slots):
        if node is None:
            old = dict(recorded[i])
            old["lost"] = True
            name = placeholder(old)
            hosts.append(name)
            lost.append(name)
            gone.append(old)
            record.append(old)
        else:
            hosts.append(node["host"])
            record.append({"host": node["host"], "node_id": node["node_id"], "ip": node.get("ip", "")})
    lines = [f"node {g['host']} (node id {g.get('node_id')}) of this run is gone: its shard moves to the other nodes"
             for g in gone if not _was_lost(g, recorded)]
    lines += [f"node {r['host']} takes the place of node {r['was']} (slot {r['slot']}): it stages that node's shard"
              for r in replacements]
    if gone:
        lines.append(f"{len(gone)} slot(s) of this run have no node ({', '.join(g['host'] for g in gone)}): their "
                     f"files are dealt to the others; a node AmlCompute adds takes such a slot back")
    differs = [dict(r) for r in record] != [dict(r) for r in recorded]
    return {"hosts": hosts, "lost": lost, "gone": gone, "replacements": replacements, "record": record,
            "differs": differs, "lines": lines}


def _was_lost(slot: Mapping[str, Any], recorded: Sequence[Mapping[str, Any]]) -> bool:
    return any(r.get("lost") and r.get("node_id") == slot.get("node_id") for r in recorded)


# --- the interruption: recorded when the run fails, shown when it resumes ---------------------------

def interruption(loss: Mapping[str, Any], *, run: str, run_id: str, ended_at: float,
                 hosts_by_ip: Mapping[str, str] | None = None, metrics: Mapping[str, Any] | None = None,
                 store: str = "") -> dict[str, Any]:
    """The record of a run that lost a node (``loss``: :func:`parse_loss`): which node (its host
    name in the inventory where its address is known), its ranks, what was seen, the epoch
    reached (from the run's metrics), and the times: lost (its last beat), detected, the job
    ended (``ended_at``, the controller's clock)."""
    hosts_by_ip = hosts_by_ip or {}
    metrics = metrics or {}
    epochs = [e for e in metrics.get("epochs") or [] if isinstance(e, Mapping)]
    steps = [s for s in metrics.get("steps") or [] if isinstance(s, Mapping)]
    done = max((int(e.get("epoch", -1)) for e in epochs), default=-1) + 1  # epochs finished
    host = hosts_by_ip.get(str(loss.get("ip") or ""), "")
    out = {
        "run": run, "run_id": run_id, "node": host or loss.get("node"), "node_host_name": loss.get("node"),
        "ip": loss.get("ip"), "ranks": list(loss.get("ranks") or []), "world": loss.get("world"),
        "seen": loss.get("seen"), "sentence": loss.get("sentence"),
        "lost_at": loss.get("last_ts"), "detected_at": loss.get("at_ts"), "ended_at": round(float(ended_at), 1),
        "epochs_done": done, "epoch_reached": done + 1,  # MLPerf numbers epochs from 1: the one it was in
        "steps_logged": max((int(s.get("step", 0)) for s in steps), default=0),
        "checkpoint_store": store,
    }
    return out


def resume_note(record: Mapping[str, Any], rerun_at: float, submitted_at: float) -> dict[str, Any]:
    """What the resumed job is told (``AMLHPC_INTERRUPTION``): the run it follows, the node lost,
    what was seen, the epoch reached, when the node was lost, when this submission went out, and
    the time lost so far: detection (last beat to the verdict), the job's end (verdict to the
    controller seeing the run end), the wait for the rerun, re-gating and re-staging (the rerun
    to this submission). The job adds its restart (this submission to training again)."""
    lost = float(record.get("lost_at") or 0)
    detected = float(record.get("detected_at") or lost)
    ended = float(record.get("ended_at") or detected)
    split = {"detection": round(detected - lost, 1), "job_end": round(ended - detected, 1),
             "waiting_for_rerun": round(max(0.0, rerun_at - ended), 1),
             "regate_restage": round(submitted_at - max(rerun_at, ended), 1)}
    return {"run": record.get("run_id"), "node": record.get("node"), "ip": record.get("ip"),
            "ranks": record.get("ranks"), "seen": record.get("seen"), "epoch_reached": record.get("epoch_reached"),
            "lost_at": lost, "submitted_at": round(submitted_at, 1), "time_lost_s": split}


def resumed(record: Mapping[str, Any], run_id: str, metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """``record`` once run ``run_id`` resumed from it: where it resumed from and what it lost,
    from the run's own record (metrics.jsonl's ``resume`` line)."""
    out = dict(record)
    out["resumed_run"] = run_id
    for line in (metrics or {}).get("resume") or []:
        if isinstance(line, Mapping):
            out["resumed_from"] = (line.get("resumed_from_checkpoint") or {}).get("checkpoint")
            out["resumed_epoch"] = ((line.get("interruption") or {}).get("resumed_epoch")
                                    or (line.get("resumed_from_checkpoint") or {}).get("epoch_done", 0) + 1)
            out["time_lost_s"] = (line.get("interruption") or {}).get("time_lost_s")
    return out


def report_lines(records: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """One line per interruption of this run, for the report."""
    lines = []
    for r in records or []:
        if not isinstance(r, Mapping):
            continue
        text = (f"interrupted: run {r.get('run_id')} lost node {r.get('node')} ({r.get('ip') or 'address unknown'}, "
                f"rank{'s' if len(r.get('ranks') or []) > 1 else ''} {rank_list(r.get('ranks') or [])}; "
                f"{r.get('seen')}) in epoch {r.get('epoch_reached')}")
        if r.get("resumed_run"):
            text += (f"; {r['resumed_run']} resumed from {r.get('resumed_from') or 'the last durable checkpoint'}"
                     f" at epoch {r.get('resumed_epoch')}")
            split = r.get("time_lost_s") or {}
            if split:
                text += "; time lost (s): " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in split.items())
        else:
            text += "; not resumed yet (rerun site.yml)"
        lines.append(text)
    return lines


def hosts_by_ip(hostvars: Mapping[str, Mapping[str, Any]], hosts: Iterable[str]) -> dict[str, str]:
    return {str(hostvars[h]["aml_private_ip"]): h for h in hosts
            if h in hostvars and (hostvars[h] or {}).get("aml_private_ip")}


def load_json(path: str, default: Any) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


# --- the last look before submit (issue 42) ---------------------------------------------------------

def _staged_name(name: str) -> str:
    return name[:-3] if name.endswith(".gz") else name


def probe_problem(probe: Mapping[str, Any] | None, expected: Sequence[str] | None, timeout: float,
                  check_mode: bool = False) -> str | None:
    """Why a node that answered the play is not fit to train, from its probe (``find`` of its
    stage folder, registered with ``ignore_unreachable``/``failed_when: false``) and the files its
    shard should hold (None: not known in this run, so only the answer counts). In check mode the
    stage wrote nothing (its folder may not exist yet): only the answer counts."""
    if probe is None:
        return "did not run the last look (it left the play earlier)"
    if probe.get("unreachable"):
        return f"did not answer right before submit ({str(probe.get('msg') or 'unreachable').strip()[:200]})"
    msg = str(probe.get("msg") or "")
    if "expected time frame" in msg or "timed out" in msg.lower():  # the task's timeout, wait_for_connection's
        return f"did not answer within {timeout:g} s right before submit"
    if check_mode:
        return None
    if probe.get("failed") or probe.get("rc") not in (0, None):
        return f"could not list its stage folder right before submit ({(probe.get('stderr') or msg).strip()[:200]})"
    if expected is None:
        return None
    held = {_staged_name(line.strip()) for line in str(probe.get("stdout") or "").splitlines() if line.strip()}
    missing = sorted({_staged_name(n) for n in expected} - held)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return f"holds {len(expected) - len(missing)} of the {len(expected)} files of its shard (missing: {shown})"
    return None


@dataclass(frozen=True)
class Look:
    """What the last look saw: the nodes the job trains on (``job_nodes``), those still in the
    play (``in_play``), each one's ``probes`` (:func:`probe_problem`), the files each one's shard
    should hold (``expected``; None for a node: not known in this run), the probe's ``timeout``
    and whether the run is in ``check_mode``."""

    job_nodes: Sequence[str]
    in_play: Iterable[str]
    probes: Mapping[str, Any]
    expected: Mapping[str, Sequence[str] | None]
    timeout: float
    check_mode: bool = False


@dataclass(frozen=True)
class GateRule:
    """The health gate's rule, as the last look applies it to a node lost after the gate:
    ``on_failure`` (``stop`` or ``exclude``), the ``spares`` it may leave out, every node in rank
    order (``ranked``) with its private ``addresses`` and the rendezvous ``port``, and the gate's
    own ``verdict`` (its failing nodes used spares already; None: none)."""

    on_failure: str
    spares: int
    ranked: Sequence[str]
    addresses: Mapping[str, str]
    port: int
    verdict: Mapping[str, Any] | None = None


def last_look(look: Look, rule: GateRule) -> dict[str, Any]:
    """Right before submit: every node the job trains on must still be in the play (it failed or
    became unreachable after the gate otherwise), answer its probe and hold its shard (in check
    mode, which stages nothing, answer only); a lost node is judged by the gate's ``rule``.
    Returns ``lost`` (``{node, reason}``), ``action`` (``pass``; ``exclude``: left out with the
    spares the gate left, a new verdict in ``verdict`` and the nodes that stage the moved files in
    ``restage``; ``stop``) and ``message`` (one sentence per lost node and what happens)."""
    from ..health.health_verdict import verdict as health_verdict  # the gate's own rule decides the spares

    in_play = set(look.in_play)
    lost = []
    for node in look.job_nodes:
        reason = ("stopped answering after the health gate (a task on it failed or it became unreachable)"
                  if node not in in_play else probe_problem(look.probes.get(node), look.expected.get(node),
                                                            look.timeout, look.check_mode))
        if reason:
            lost.append({"node": node, "reason": reason})
    out: dict[str, Any] = {"lost": lost, "action": "pass", "verdict": None, "restage": [],
                           "message": f"every job node answered and holds its shard ({len(look.job_nodes)})"}
    if not lost:
        return out
    named = "; ".join(f"node {n['node']} was lost after the health gate: it {n['reason']}" for n in lost)
    failing = [dict(f) for f in (rule.verdict or {}).get("failing") or []]
    failing += [{"node": n["node"], "reasons": [f"lost after the health gate: {n['reason']}"]} for n in lost]
    if rule.on_failure == "exclude":
        new = health_verdict({n: [] for n in rule.ranked}, list(rule.ranked), on_failure="exclude",
                             spares=int(rule.spares), addresses=rule.addresses, port=int(rule.port), failing=failing)
        if new["action"] == "exclude":
            out.update(action="exclude", verdict=new, restage=list(new["good"]),
                       message=f"{named}. Left out (healthcheck_spare_nodes: {rule.spares}): its shard moves to "
                               f"{', '.join(new['good'])}, and the job trains on them.")
            return out
        out.update(action="stop", message=f"{named}. {new['message']}")
        return out
    out.update(action="stop", message=f"{named}. The run stops before submit: rerun site.yml once the node answers "
                                      "again (the gate checks it), or set healthcheck_on_failure: exclude with "
                                      "healthcheck_spare_nodes to train without it.")
    return out
