"""A side channel that finds a lost or frozen node within a bound, and names it.

NCCL and gloo notice a rank that is gone only when a collective passes its timeout
(``--collective-timeout``, 600 s; the start-up ones ``--startup-timeout``, 1800 s), and a node
that freezes holds every other rank for that long without a word about which one it was. So
every rank also beats on a store of its own: a ``TCPStore`` that rank 0 holds, apart from the
process group's store and from NCCL's or gloo's sockets.

* Every rank's heartbeat thread adds 1 to its counter ``hb/<rank>`` every ``interval`` seconds
  and says which training collective its main thread waits in, if any (``at/<rank>``;
  :class:`cosmoflow.dist.Collectives` tells it).
* Every rank also counts its steps (``st/<rank>``: each batch fetched, training or validation,
  and each training collective left): a rank that beats and steps is alive and making progress.
* Rank 0's thread also watches: a rank whose counter has not moved for ``lost_after`` seconds is
  lost (``missed heartbeat``); a rank that is alive but has not joined a training collective
  the other ranks have waited in for ``lost_after`` seconds, and made no step for
  ``collective_bound`` (4 times the slowest rank's recent step time, at least ``lost_after``),
  is stalled and holds them (``collective timed out``). One that still makes steps is a slow
  peer: rank 0 says so in one line and ends nothing (a loaded machine, a slow validation). It
  writes the verdict to the store, where every rank reads it at its next beat.
* A rank that cannot reach the store for ``lost_after`` seconds names rank 0's node (the store
  lives in rank 0's process).
* Then every rank prints the one sentence (``amlhpc.recovery.node_loss.loss_sentence``, which the
  controller reads back from the run's log), and ends with exit code :data:`EXIT_CODE`; the
  launcher (torchrun) ends the node's other processes, AzureML the job.

Timing, for ``--node-loss-timeout T`` (default 120 s; 0 switches the heartbeat off): beats every
``interval = min(10, max(0.5, T / 12))`` s; lost after ``T - 3 * interval`` s without a beat; the
verdict reaches every rank within one more interval. A lost or frozen node therefore ends the job
within ``T`` of the moment it stopped. Judged over many beats, never one: a beat late by less than
``lost_after`` decides nothing.

Rank 0 keeps its store up at the end until every rank has said it is done (at most a few
intervals), so no rank that ends a little later takes rank 0 for lost.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from amlhpc.recovery.node_loss import (
    MISSED,
    SLOW,
    Finding,
    StepClock,
    Timing,
    judge,
    loss_sentence,
    rank_list,
    slow_sentence,
)

EXIT_CODE = 86
"""What every rank ends with once a node is found lost."""


@dataclass(frozen=True)
class Member:
    """Where a rank runs: its node's host name and address, and the node's index."""

    host: str
    ip: str
    node: int


def own_address(toward: str) -> str:
    """The address this node reaches ``toward`` from (its private IP on a cluster), or ""."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((toward, 9))
            return s.getsockname()[0]
    except OSError:
        return ""


class Heartbeat:
    """The heartbeat of one rank (rank 0: and the watcher). Start with :func:`start`."""

    def __init__(self, rank: int, world: int, store: Any, members: Sequence[Member], timing: Timing,
                 on_loss: Callable[[dict[str, Any]], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 exit_: Callable[[int], None] = os._exit) -> None:
        self.rank, self.world, self.store, self.members, self.timing = rank, world, store, list(members), timing
        self.on_loss, self.clock, self.wall, self._exit = on_loss, clock, wall, exit_
        self._waiting: tuple[str, float] = ("", 0.0)
        self._published: str | None = None
        self._stop = threading.Event()
        self._finished = False
        self._store_ok = clock()
        self._last_change: dict[int, float] = {r: clock() for r in range(world)}
        self._last_value: dict[int, bytes] = {}
        self._seen_waiting: dict[int, tuple[str, float]] = {}
        self._seen_text: dict[int, str] = {}
        self._steps = 0  # this rank's steps (the main thread counts; the heartbeat publishes)
        self._published_steps = -1
        self._step_value: dict[int, bytes] = {}
        self._step_clock = StepClock(clock())
        self._said_slow: set[tuple[str, tuple[int, ...]]] = set()
        mine = self.members[rank].node if self.members else 0
        self._first_on_node = rank == min((r for r, m in enumerate(self.members) if m.node == mine), default=rank)
        self._ending = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="cosmoflow-heartbeat", daemon=True)
        # A call to a frozen store waits for ever (TCPStore's timeout bounds waits for keys, not
        # a server that stopped answering): a second thread judges how long the store has been
        # silent, on every rank but rank 0, which holds it.
        self._guard = threading.Thread(target=self._watch_store, name="cosmoflow-heartbeat-guard", daemon=True)

    # --- the main thread's side ---------------------------------------------------------------
    def enter(self, what: str) -> None:
        """The main thread waits in the training collective ``what`` from now."""
        self._waiting = (what, self.wall())

    def leave(self) -> None:
        self._waiting = ("", 0.0)
        self._steps += 1  # a collective every rank joined: progress

    def progress(self) -> None:
        """The main thread made a step (a batch fetched, training or validation)."""
        self._steps += 1

    def settle(self, limit: float | None = None) -> None:
        """A training collective lost its connection to a rank (a process that died closes its
        sockets at once): wait up to ``limit`` (default: ``lost_after`` and two beats) for the
        heartbeat's verdict, which names that rank's node and ends the process; return if none
        comes (the caller then says what it saw)."""
        deadline = self.clock() + (self.timing.lost_after + 2 * self.timing.interval if limit is None else limit)
        while self._thread.is_alive() and not self._finished and self.clock() < deadline:
            time.sleep(min(0.5, self.timing.interval))

    def begin(self) -> Heartbeat:
        self._thread.start()
        if self.rank != 0:
            self._guard.start()
        return self

    def _bounded(self, call: Callable[[], Any], limit: float) -> None:
        """``call()`` in a thread of its own, waited for ``limit`` seconds at most (a store call
        to a frozen rank 0 never returns)."""
        done = threading.Event()

        def run() -> None:
            try:
                call()
            except Exception:
                pass
            finally:
                done.set()

        threading.Thread(target=run, name="cosmoflow-heartbeat-call", daemon=True).start()
        done.wait(limit)

    def close(self, error: BaseException | None = None) -> None:
        """Done: say so; rank 0 keeps the store up until every rank has said so (a few beats at most).
        Ended by ``error`` instead: the other ranks are told at their next beat and end too, rather
        than wait in a collective for a rank that is gone (and blame its node)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=self.timing.interval * 2 + 5)
        if error is not None and not (isinstance(error, SystemExit) and error.code in (0, None)):
            self._tell_ended(error)
            return
        try:
            if self.rank == 0:
                self.store.set("state", "finished")
                deadline = self.clock() + max(3 * self.timing.interval, 5.0)
                while self.store.add("done", 0) < self.world - 1 and self.clock() < deadline:
                    time.sleep(min(0.2, self.timing.interval / 4))
            else:
                self._bounded(lambda: self.store.add("done", 1), self.timing.interval)
        except Exception:  # rank 0 ended first, or the store is gone: nothing waits for this rank
            pass

    def _tell_ended(self, error: BaseException) -> None:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        member = self.members[self.rank]
        note = json.dumps({"rank": self.rank, "node": member.host, "ip": member.ip, "reason": lines[0][:300]})
        if self.rank != 0:
            self._bounded(lambda: self.store.set("state", "ended\t" + note), self.timing.interval)
            return
        try:  # rank 0 holds the store: up until the others have read it (a few beats at most)
            self.store.set("state", "ended\t" + note)
            deadline = self.clock() + 2 * self.timing.interval + 2
            while self.clock() < deadline and self.store.add("told", 0) < self.world - 1:
                time.sleep(min(0.2, self.timing.interval / 4))
        except Exception:
            pass

    def _ended(self, note: dict[str, Any]) -> None:
        """Another rank ended with an error: this one ends too (exit code 1), saying which."""
        if not self._ending.acquire(blocking=False):
            return
        if self._first_on_node:
            sys.stderr.write(f"[cosmoflow] rank {note.get('rank')} of {self.world} (node {note.get('node')}) ended with "
                             f"an error: {note.get('reason')}; rank {self.rank} stops too (its log says why)\n")
            sys.stderr.flush()
        if self.rank == 0:
            deadline = self.clock() + 2 * self.timing.interval + 2
            try:
                while self.clock() < deadline and self.store.add("told", 0) < self.world - 2:
                    time.sleep(min(0.2, self.timing.interval / 4))
            except Exception:
                pass
        else:
            self._bounded(lambda: self.store.add("told", 1), self.timing.interval)
        self._exit(1)

    # --- the heartbeat threads ----------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.timing.interval):
            self.beat()

    def _watch_store(self) -> None:
        while not self._stop.wait(self.timing.interval):
            if self._finished:
                return
            silent = self.clock() - self._store_ok
            if silent >= self.timing.lost_after:
                ranks = tuple(r for r, m in enumerate(self.members) if m.node == self.members[0].node)
                self._lost(Finding(MISSED, ranks, silent, self.wall() - silent), via="nothing")
                return

    def beat(self) -> None:
        """One beat: count, say where the main thread waits, read the job's state; rank 0 watches."""
        now = self.clock()
        try:
            self.store.add(f"hb/{self.rank}", 1)
            what, since = self._waiting
            value = f"{what}\t{since}" if what else ""
            if value != self._published:
                self.store.set(f"at/{self.rank}", value)
                self._published = value
            steps = self._steps
            if steps != self._published_steps:
                self.store.set(f"st/{self.rank}", str(steps))
                self._published_steps = steps
            state = self.store.get("state").decode("utf-8", "replace")
            self._store_ok = self.clock()
        except Exception:  # rank 0's store does not answer: the guard judges it over lost_after, not one miss
            return
        if state == "finished":
            self._finished = True
            return
        if state.startswith("lost\t"):
            self._end(json.loads(state.split("\t", 1)[1]), via="read")
            return
        if state.startswith("ended\t"):
            self._ended(json.loads(state.split("\t", 1)[1]))
            return
        if self.rank == 0:
            finding = self.watch(now)
            if finding is not None:
                self._lost(finding, via="announce")

    def watch(self, now: float) -> Finding | None:
        """Rank 0: read every rank's counter and wait, and judge them."""
        keys = [f"hb/{r}" for r in range(self.world)]
        values = self.store.multi_get(keys)
        for r, value in enumerate(values):
            if self._last_value.get(r) != value:
                self._last_value[r] = value
                self._last_change[r] = now
        waits = self.store.multi_get([f"at/{r}" for r in range(self.world)])
        for r, raw in enumerate(waits):
            text = raw.decode("utf-8", "replace")
            if not text:
                self._seen_waiting.pop(r, None)
                self._seen_text.pop(r, None)
            elif self._seen_text.get(r) != text:  # a new wait (its start time is part of the text)
                self._seen_text[r] = text
                self._seen_waiting[r] = (text.split("\t", 1)[0], now)
        step_keys = [f"st/{r}" for r in range(self.world)]
        progress = None
        if self.store.check(step_keys):  # every rank counts its steps (a key not set yet: judged without)
            for r, value in enumerate(self.store.multi_get(step_keys)):
                if self._step_value.get(r) != value:
                    if r in self._step_value:
                        self._step_clock.moved(r, now)
                    else:
                        self._step_clock.last[r] = now
                    self._step_value[r] = value
            progress = dict(self._step_clock.last)
        finding = judge(now, self._last_change, self._seen_waiting, self.timing.lost_after, progress=progress,
                        step_time=self._step_clock.step_times())
        if finding is None:
            return None
        if finding.seen == SLOW:  # alive and stepping: said once a wait, never ended
            key = (finding.what, finding.ranks)
            if key not in self._said_slow:
                self._said_slow.add(key)
                nodes = ", ".join(sorted({self.members[r].host for r in finding.ranks})) if self.members else ""
                sys.stderr.write(slow_sentence(finding, self.world, f"node {nodes}" if nodes else
                                               f"rank {rank_list(finding.ranks)}") + "\n")
                sys.stderr.flush()
            return None
        return Finding(finding.seen, finding.ranks, finding.seconds, self.wall() - finding.seconds, finding.what,
                       finding.waiting, finding.stalled, finding.bound)

    def describe(self, finding: Finding) -> dict[str, Any]:
        """The finding as the record the job writes and the sentence it prints: one per node."""
        at = self.wall()
        by_node: dict[int, list[int]] = {}
        for r in finding.ranks:
            by_node.setdefault(self.members[r].node, []).append(r)
        nodes = []
        for index, ranks in sorted(by_node.items()):
            member = self.members[ranks[0]]
            sentence = loss_sentence(finding, node=member.host, ip=member.ip, ranks=ranks, world=self.world,
                                     by=self.rank, at=at)
            nodes.append({"node": member.host, "ip": member.ip, "node_index": index, "ranks": ranks,
                          "sentence": sentence})
        return {"seen": finding.seen, "seconds": round(finding.seconds, 1), "last": finding.since_wall,
                "detected": at, "by": self.rank, "world": self.world, "what": finding.what, "nodes": nodes}

    def _lost(self, finding: Finding, via: str) -> None:
        record = self.describe(finding)
        if via == "announce":  # rank 0: every rank reads it at its next beat
            try:
                self.store.set("state", "lost\t" + json.dumps(record))
            except Exception:
                pass
        self._end(record, via)

    def _end(self, record: dict[str, Any], via: str) -> None:
        """Print the sentence, keep the record, end the process. ``via``: ``announce`` (rank 0,
        which holds the store until the others have read the verdict, a few beats at most),
        ``read`` (the verdict read from the store: say so) or ``nothing`` (the store is gone:
        no call to it, which could wait)."""
        if not self._ending.acquire(blocking=False):
            return  # the other heartbeat thread ends the process
        if via == "announce" or self._first_on_node:  # one line a node, not one a rank
            for node in record["nodes"]:
                sys.stderr.write(node["sentence"] + "\n")
            sys.stderr.flush()
        if self.on_loss is not None:
            try:
                self.on_loss(record)
            except Exception as exc:  # the record is a courtesy: the sentence is out already
                sys.stderr.write(f"[node-loss] could not write the record: {exc}\n")
        try:
            if via == "announce":
                deadline = self.clock() + 2 * self.timing.interval + 2
                lost = sum(len(n["ranks"]) for n in record["nodes"])
                while self.clock() < deadline and self.store.add("told", 0) < self.world - 1 - lost:
                    time.sleep(min(0.2, self.timing.interval / 4))
            elif via == "read":
                self._bounded(lambda: self.store.add("told", 1), self.timing.interval)
        except Exception:
            pass
        self._exit(EXIT_CODE)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--node-loss-timeout`` (in the training group of train.py)."""
    p.add_argument("--node-loss-timeout", type=float, default=120.0,
                   help="a node that stops (dies, freezes, loses its network) or holds a training collective ends "
                        "the job within this many seconds, with one line naming the node, its ranks and what was "
                        "seen (a heartbeat beside NCCL/gloo, on a store of rank 0's; 0: off)")


def start(rank: int, world: int, timeout_s: float, master_addr: str, all_gather: Callable[[Any], list[Any]],
          barrier: Callable[[], None], node: int = -1,
          on_loss: Callable[[dict[str, Any]], None] | None = None) -> Heartbeat | None:
    """Start the heartbeat of this rank (None with one rank or ``timeout_s`` 0).

    ``all_gather``/``barrier`` are start-up collectives of the process group (they carry the
    store's port and every rank's host name, address and node index once); ``node`` is this
    rank's node index (-1: by host name)."""
    if world <= 1 or timeout_s <= 0:
        return None
    import torch.distributed as dist  # the workload's torch; this file's logic needs none

    timing = Timing.of(timeout_s)
    wait = timedelta(seconds=timing.lost_after)
    server = None
    if rank == 0:
        server = dist.TCPStore("0.0.0.0", 0, world, is_master=True, timeout=wait, wait_for_workers=False)
        server.set("state", "running")
    gathered = all_gather((socket.gethostname(), own_address(master_addr), server.port if server else 0, node))
    port = int(gathered[0][2])
    hosts = [str(g[0]) for g in gathered]
    if any(int(g[3]) < 0 for g in gathered):
        index: dict[str, int] = {}
        node_of = [index.setdefault(h, len(index)) for h in hosts]
    else:
        node_of = [int(g[3]) for g in gathered]
    # Two launchers on one machine (tests): the host name alone does not tell their nodes apart.
    names: dict[int, str] = {}
    for r, n in enumerate(node_of):
        names.setdefault(n, hosts[r])
    distinct = len(set(names.values())) == len(names)
    members = [Member(hosts[r] if distinct else f"{hosts[r]}/node{node_of[r]}", str(gathered[r][1]), node_of[r])
               for r in range(world)]
    store = server if server is not None else dist.TCPStore(master_addr, port, world, is_master=False, timeout=wait)
    store.add(f"hb/{rank}", 1)
    store.set(f"at/{rank}", "")
    store.set(f"st/{rank}", "0")
    barrier()  # every key is there before rank 0 first reads them
    return Heartbeat(rank, world, store, members, timing, on_loss=on_loss).begin()


def for_training(timeout_s: float, layout: Any, startup: Any, steps: Any, master_addr: str,
                 record_path: str | None, mllog: Any = None, watchdog: Any = None) -> Heartbeat | None:
    """The heartbeat of a training rank (train.py): started with ``startup``'s collectives, told
    of ``steps``' (the training collectives) and of every batch ``watchdog`` fetches (its steps); rank 0 writes the finding to ``record_path`` (and
    ``mllog``) before the job ends."""
    import torch.distributed as dist

    def gather(obj: Any) -> list[Any]:
        out: list[Any] = [None] * layout.world_size
        with startup("the all-gather of the heartbeat's addresses"):
            dist.all_gather_object(out, obj)
        return out

    def barrier() -> None:
        with startup("the barrier that starts the heartbeat"):
            dist.barrier()

    def on_loss(record: dict[str, Any]) -> None:
        if record_path:
            os.makedirs(os.path.dirname(record_path) or ".", exist_ok=True)
            with open(record_path, "w", encoding="utf-8") as f:
                json.dump(record, f, indent=2)
        if mllog is not None:
            mllog.event("node_lost", {k: record[k] for k in ("seen", "seconds", "what")}
                        | {"nodes": [{k: n[k] for k in ("node", "ip", "ranks")} for n in record["nodes"]]})

    beat = start(layout.rank, layout.world_size, timeout_s, master_addr, gather, barrier, node=layout.node_rank,
                 on_loss=on_loss if layout.rank == 0 else None)
    if beat is not None:
        steps.observer = beat
        if watchdog is not None:
            watchdog.observer = beat
    return beat
