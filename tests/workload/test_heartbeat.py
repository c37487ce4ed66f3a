"""Issue 43, item 1: a lost or frozen node ends the job within a bound, named.

The heartbeat (``workload/cosmoflow/heartbeat.py``) on a real ``TCPStore``: in one process with
two heartbeats (the rule's timing, a silent rank, a rank that never joins a collective), then two
ranks started as torchrun starts them on two nodes, one of them stopped (SIGSTOP: a frozen VM) or
killed. The collective timeout stays at its default (600 s): what ends the job is the heartbeat,
within ``--node-loss-timeout``, with one sentence naming the node, the rank and what was seen.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist
from conftest import WORKLOAD, free_port, tiny
from test_two_nodes import start_nodes, stop

sys.path.insert(0, str(WORKLOAD.parent / "plugins" / "module_utils"))

from amlhpc.recovery.node_loss import COLLECTIVE, MISSED, Timing, parse_loss  # noqa: E402
from cosmoflow.heartbeat import EXIT_CODE, Heartbeat, Member  # noqa: E402


class Ended(Exception):
    pass


pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def pair(timeout: float):
    """Rank 0 (holding the store) and rank 1 of a two-rank job, on a real TCPStore, in this
    process; their exits recorded instead of ending the test."""
    timing = Timing.of(timeout)
    port = free_port()
    wait = timedelta(seconds=timing.lost_after)
    server = dist.TCPStore("127.0.0.1", port, 2, is_master=True, timeout=wait, wait_for_workers=False)
    server.set("state", "running")
    client = dist.TCPStore("127.0.0.1", port, 2, is_master=False, timeout=wait)
    members = [Member("node-a", "10.0.0.4", 0), Member("node-b", "10.0.0.5", 1)]
    exits: dict[int, tuple[int, float]] = {}
    records: list[dict] = []

    def exiter(rank):
        def _exit(code):
            exits[rank] = (code, time.monotonic())
            raise SystemExit(code)  # ends the heartbeat thread, as os._exit would end the process
        return _exit

    beats = []
    for rank, store in ((0, server), (1, client)):
        store.add(f"hb/{rank}", 1)
        store.set(f"at/{rank}", "")
        store.set(f"st/{rank}", "0")
        beats.append(Heartbeat(rank, 2, store, members, timing, on_loss=records.append if rank == 0 else None,
                               exit_=exiter(rank)))
    return beats, exits, records, timing


def test_the_bound_holds_for_any_timeout():
    for timeout in (2.5, 4.5, 6, 12, 30, 60, 120, 300, 1800):
        t = Timing.of(timeout)
        assert t.lost_after >= 2 * t.interval  # never decided on one late beat
        assert t.lost_after + 2 * t.interval <= t.timeout  # silent, found, told: within the bound
    assert (Timing.of(120).interval, Timing.of(120).lost_after) == (10, 90)
    with pytest.raises(ValueError):
        Timing.of(2)


def test_a_silent_rank_is_found_within_the_bound_and_named():
    beats, exits, records, timing = pair(6)
    rank0, rank1 = beats
    rank0.begin()
    rank1.begin()
    time.sleep(2 * timing.interval)
    rank1.close()  # rank 1 stops beating while rank 0 trains on: as a frozen node's
    stopped = time.monotonic()
    deadline = stopped + timing.timeout + 10
    while 0 not in exits and time.monotonic() < deadline:
        time.sleep(0.1)
    assert exits.get(0, (None,))[0] == EXIT_CODE, exits
    assert exits[0][1] - stopped <= timing.timeout
    [record] = records
    assert record["seen"] == MISSED and [n["ranks"] for n in record["nodes"]] == [[1]]
    found = parse_loss(record["nodes"][0]["sentence"])
    assert found["node"] == "node-b" and found["ip"] == "10.0.0.5" and found["ranks"] == [1]
    assert found["seen"] == MISSED and found["by"] == 0


def test_a_slow_rank_that_keeps_stepping_is_not_named_and_one_that_stalls_is(capsys):
    """Issue 48: rank 0 waits in the all-reduce of the validation errors; rank 1, alive, is slow
    (a loaded machine: a step every 1.2 s, longer than rank 0 waits before it looks, lost_after
    1.5 s). It is said to be slow, never named; once it stops stepping (its beats go on) it is
    named, stalled, within the bound scaled to its step time."""
    beats, exits, records, timing = pair(3)
    rank0, rank1 = beats
    rank0.enter("the all-reduce of the validation errors")
    rank0.begin()
    rank1.begin()
    slow_until = time.monotonic() + 4 * timing.lost_after
    while time.monotonic() < slow_until:
        time.sleep(1.2)
        rank1.progress()  # a validation batch, slowly
    assert exits == {} and records == [], records
    said = capsys.readouterr().err
    assert "is slow, not lost" in said and "slow peer" in said, said
    stalled = time.monotonic()
    while 0 not in exits and time.monotonic() < stalled + 30:
        time.sleep(0.1)
    assert exits.get(0, (None,))[0] == EXIT_CODE, exits
    [record] = records
    found = parse_loss(record["nodes"][0]["sentence"])
    assert found["seen"] == COLLECTIVE and found["ranks"] == [1] and found["node"] == "node-b"
    assert "has not joined the all-reduce of the validation errors for " in found["sentence"]
    assert "stalled, not slow" in found["sentence"]
    assert exits[0][1] - stalled <= 4 * 1.2 * 1.5 + 3 * timing.interval + 2  # the bound, scaled to its steps
    # rank 1 read the verdict from the store and ended too
    deadline = time.monotonic() + 5
    while 1 not in exits and time.monotonic() < deadline:
        time.sleep(0.1)
    assert exits.get(1, (None,))[0] == EXIT_CODE


def test_ranks_that_finish_together_end_quietly():
    beats, exits, _records, timing = pair(6)
    for beat in beats:
        beat.begin()
    time.sleep(3 * timing.interval)
    done = threading.Thread(target=beats[1].close)
    done.start()
    beats[0].close()
    done.join()
    time.sleep(timing.lost_after + timing.interval)
    assert exits == {}


def test_a_rank_that_ends_with_an_error_ends_the_others_at_their_next_beat():
    beats, exits, records, timing = pair(6)
    for beat in beats:
        beat.begin()
    time.sleep(2 * timing.interval)
    beats[1].close(RuntimeError("CUDA error: an illegal memory access was encountered\nmore"))
    ended = time.monotonic()
    while 0 not in exits and time.monotonic() < ended + 5 * timing.interval:
        time.sleep(0.1)
    assert exits.get(0, (None,))[0] == 1 and exits[0][1] - ended <= 3 * timing.interval, exits
    assert records == []  # no node blamed: its error is its own


def _wait_for_steps(out, procs, tmp_path, count=2, who=0):
    deadline = time.monotonic() + 180
    metrics = out / "metrics.jsonl"
    while not (metrics.exists() and metrics.read_text().count('"kind": "step"') >= count):
        assert time.monotonic() < deadline and procs[who].poll() is None, (tmp_path / f"rank{who}.out").read_text()
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_a_node_that_stops_ends_the_job_within_the_bound_naming_it(how, tiny_data, tmp_path):
    """Node 1 freezes (SIGSTOP) or dies (SIGKILL) mid-training, the collective timeout at its
    600 s default: rank 0 ends within --node-loss-timeout, its last line naming node 1, rank 1 and
    the missed heartbeat."""
    bound = 12
    out = tmp_path / "out"
    procs = start_nodes([tiny_data, tiny_data], out, tmp_path, "--epochs", "1000", "--batch-size", "4", *tiny(),
                        "--node-loss-timeout", str(bound), timeout=600)
    try:
        _wait_for_steps(out, procs, tmp_path)
        os.kill(procs[1].pid, signal.SIGSTOP if how == "stopped" else signal.SIGKILL)
        stopped, stopped_wall = time.monotonic(), time.time()
        procs[0].wait(timeout=bound + 60)  # generous: a loaded 2-core machine; the bound is checked below
        ended = time.monotonic() - stopped
    finally:
        stop(procs)
    output = (tmp_path / "rank0.out").read_text()
    assert procs[0].returncode == EXIT_CODE, output[-3000:]
    found = parse_loss(output)
    assert found is not None, output[-3000:]
    assert found["ranks"] == [1] and found["world"] == 2 and found["node"].endswith("/node1"), found
    assert found["seen"] == MISSED
    record = json.loads((out / "node-loss.json").read_text())
    assert record["detected"] - stopped_wall <= bound + 1, (record, stopped_wall)  # found within the bound
    assert ended < bound + 30, ended  # and the process gone soon after (teardown on a busy machine)


def test_a_frozen_rank_0_is_named_by_the_others(tiny_data, tmp_path):
    """Rank 0 holds the heartbeat's store: frozen, the other rank cannot reach it, and names it."""
    bound = 12
    out = tmp_path / "out"
    procs = start_nodes([tiny_data, tiny_data], out, tmp_path, "--epochs", "1000", "--batch-size", "4", *tiny(),
                        "--node-loss-timeout", str(bound), timeout=600)
    try:
        _wait_for_steps(out, procs, tmp_path)
        os.kill(procs[0].pid, signal.SIGSTOP)
        stopped = time.monotonic()
        procs[1].wait(timeout=bound + 60)
        ended = time.monotonic() - stopped
    finally:
        stop(procs)
    output = (tmp_path / "rank1.out").read_text()
    assert procs[1].returncode == EXIT_CODE, output[-3000:]
    found = parse_loss(output)
    assert found is not None and found["ranks"] == [0] and found["node"].endswith("/node0"), output[-3000:]
    assert found["by"] == 1 and found["seen"] == MISSED
    assert ended < bound + 30, ended
