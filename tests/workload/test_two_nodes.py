"""Distributed training on two nodes, for real: two ranks started as torchrun starts them on two
nodes (node ranks 0 and 1, one process each) on this machine, DataLoader workers on.

On one node several defects are invisible (local rank is global rank there). Here each rank's
reads are recorded by an observer that replaces nothing (``spy/sitecustomize.py``: Python's audit
hooks, in the ranks and their workers), and the weights are compared with one process's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import torch
from conftest import HANG_S, WORKLOAD, end_group, free_port, run_in_group, tiny

TRAIN = str(WORKLOAD / "train.py")
SPY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spy")
WORKERS = ["--workers", "2", "--prefetch-factor", "2"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "OMPI_", "PMI_", "GROUP_"))}
    env["OMP_NUM_THREADS"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def start_nodes(data_dirs, out, tmp_path, *args, timeout=60, per_node=None):
    """``per_node[K]`` ranks (default one) on node K, as ``torchrun --nnodes N --node-rank K
    --nproc_per_node P`` exports them; output to files (two pipes read one after the other can
    block a rank)."""
    port, procs = free_port(), []
    log = tmp_path / "reads.log"
    per_node = per_node or [1] * len(data_dirs)
    world = sum(per_node)
    for node, data_dir in enumerate(data_dirs):
        for local in range(per_node[node]):
            rank = len(procs)
            env = _env() | {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                            "LOCAL_WORLD_SIZE": str(per_node[node]), "GROUP_RANK": str(node),
                            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PYTHONPATH": SPY,
                            "COSMOFLOW_READ_LOG": str(log)}
            with open(tmp_path / f"rank{rank}.out", "w", encoding="utf-8") as stdout:
                procs.append(subprocess.Popen(
                    [sys.executable, TRAIN, "--data-dir", str(data_dir), "--output-dir", str(out),
                     "--collective-timeout", str(timeout), *args], env=env, stdout=stdout,
                    stderr=subprocess.STDOUT, start_new_session=True))
    return procs


def stop(procs):
    """End every rank's process group, stopped members and workers of an exited rank included."""
    for proc in procs:
        end_group(proc)


def run_nodes(data_dirs, out, tmp_path, *args, timeout=60, per_node=None):
    procs = start_nodes(data_dirs, out, tmp_path, *args, timeout=timeout, per_node=per_node)
    try:
        for proc in procs:
            proc.wait(timeout=HANG_S)
    finally:
        stop(procs)
    outputs = [(tmp_path / f"rank{rank}.out").read_text() for rank in range(len(procs))]
    assert [p.returncode for p in procs] == [0] * len(procs), "\n".join(o[-3000:] for o in outputs)
    return outputs


def reads(tmp_path, split):
    """{(rank, worker): [file, ...] in the order that worker read them}."""
    out: dict[tuple[str, str], list[str]] = {}
    for line in (tmp_path / "reads.log").read_text().splitlines():
        rank, worker, where, name = line.split()
        if where == split:
            out.setdefault((rank, worker), []).append(name)
    return out


def node_shards(tiny_data, tmp_path, sizes):
    """Node-local folders: the first ``sizes[0]`` training files on node 0, the next on node 1
    (validation split evenly)."""
    dirs = [tmp_path / f"node{k}" for k in range(len(sizes))]
    for split in ("train", "validation"):
        files = sorted((tiny_data / split).iterdir())
        bounds = [0]
        for size in sizes if split == "train" else [len(files) // len(sizes)] * len(sizes):
            bounds.append(bounds[-1] + size)
        for k, node in enumerate(dirs):
            (node / split).mkdir(parents=True)
            for f in files[bounds[k]:bounds[k + 1]]:
                (node / split / f.name).symlink_to(f)
    return dirs


def per_epoch(sequence, per_epoch_n):
    return [sequence[i:i + per_epoch_n] for i in range(0, len(sequence), per_epoch_n)]


@pytest.mark.parametrize("scope", ["global", "node"])
def test_two_nodes_read_every_sample_once_an_epoch_in_a_new_order(scope, tiny_data, tmp_path):
    """64 training samples, 2 ranks x batch 4 x 2 workers: every sample once per epoch over both
    nodes, each worker 4 batches an epoch, in another order the next epoch; the same step count."""
    data = [tiny_data, tiny_data] if scope == "global" else node_shards(tiny_data, tmp_path, [32, 32])
    outputs = run_nodes(data, tmp_path / "out", tmp_path, "--data-scope", scope, "--epochs", "2",
                        "--batch-size", "4", *tiny(), *WORKERS)
    assert "2 process(es) on 2 node(s) via torchrun" in outputs[0]
    train = reads(tmp_path, "train")
    assert sorted(train) == [(r, w) for r in "01" for w in "01"], train.keys()  # only workers read
    names = sorted(f.name for f in (tiny_data / "train").iterdir())
    epochs = {key: per_epoch(seq, 16) for key, seq in train.items()}
    for epoch in range(2):
        counts = Counter(name for seqs in epochs.values() for name in seqs[epoch])
        assert sorted(counts) == names and set(counts.values()) == {1}, (epoch, counts)
    for key, seqs in epochs.items():
        assert len(seqs) == 2 and seqs[0] != seqs[1], key
    valid = Counter(name for seq in reads(tmp_path, "validation").values() for name in seq)
    assert len(valid) == 32 and set(valid.values()) == {2}  # 2 evaluations
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["num_nodes"], summary["step"]) == (2, 16)


def test_nodes_with_different_process_counts_run_the_same_steps(tiny_data, tmp_path):
    """Node-local shards of 32 files each, two ranks on node 0 and one on node 1 (node shards of
    different sizes are refused, so a rank count per node is what makes per-rank sizes differ):
    node 0's ranks hold 16 samples each, node 1's rank 32, and every rank takes 16 an epoch
    (4 steps), so their collectives stay in step."""
    data = node_shards(tiny_data, tmp_path, [32, 32])
    run_nodes(data, tmp_path / "out", tmp_path, "--data-scope", "node", "--epochs", "2", "--batch-size", "4",
              *tiny(), *WORKERS, per_node=[2, 1])
    train = reads(tmp_path, "train")
    per_rank = Counter(rank for (rank, _w), seq in train.items() for _name in seq)
    assert per_rank == {"0": 2 * 16, "1": 2 * 16, "2": 2 * 16}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["world_size"], summary["num_nodes"], summary["step"]) == (3, 2, 8)


def _weights(out):
    return torch.load(out / "checkpoints" / "last.pt", weights_only=False)["model"]


def _one_process(tiny_data, out, *args):
    env = _env() | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    proc = run_in_group([sys.executable, TRAIN, "--data-dir", str(tiny_data), "--output-dir", str(out), *args],
                        env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] == "epoch"][0]


def test_a_two_node_step_is_one_process_step_on_the_combined_batch(tiny_data, tmp_path):
    """Gradients averaged over the ranks: after one step on 2 x 4 samples, rank 0's weights are
    those of one process stepping on the same 8 samples, and so are rank 1's (the validation
    error, summed over both ranks' models, is the one process's)."""
    common = ["--epochs", "1", "--max-steps", "1", "--checkpoint-every", "1"]
    start = tmp_path / "start"
    _one_process(tiny_data, start, *common, "--batch-size", "8", *tiny(lr="0"))
    one = _one_process(tiny_data, tmp_path / "one", *common, "--batch-size", "8", *tiny())
    run_nodes([tiny_data, tiny_data], tmp_path / "two", tmp_path, *common, "--batch-size", "4", *tiny(),
              *WORKERS)
    w0, w1, w2 = _weights(start), _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert any((w1[k] - w0[k]).abs().max() > 1e-4 for k in w0)  # the step moved the weights
    for key in w0:
        torch.testing.assert_close(w2[key] - w0[key], w1[key] - w0[key], rtol=1e-4, atol=1e-7, msg=key)
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert two["val_mae"] == pytest.approx(one["val_mae"], rel=1e-5)


def test_a_rank_that_stops_fails_the_other_within_the_timeout_naming_both(tiny_data, tmp_path):
    """Rank 1 is stopped (SIGSTOP) mid-training: rank 0 does not hang, it stops within the
    collective timeout with one sentence naming itself and the collective it waited in."""
    out = tmp_path / "out"
    procs = start_nodes([tiny_data, tiny_data], out, tmp_path, "--epochs", "1000", "--batch-size", "4",
                        *tiny(), *WORKERS, timeout=10)
    try:
        _wait_for_steps(out, procs[0], tmp_path / "rank0.out")
        os.kill(procs[1].pid, signal.SIGSTOP)
        stopped = time.monotonic()
        procs[0].wait(timeout=HANG_S)
        waited = time.monotonic() - stopped
    finally:
        stop(procs)
    output = (tmp_path / "rank0.out").read_text()
    assert procs[0].returncode != 0
    assert "rank 0 of 2: the " in output, output[-3000:]
    assert " waited more than 10 s for the other ranks" in output, output[-3000:]
    assert "raise --collective-timeout" in output
    # Without the 10 s timeout rank 0 would wait the default 600 s: ending within 130 s shows the
    # 10 s one was honoured, with 120 s for a loaded 2-core machine to get there and tear the rank down.
    assert waited < 10 + 120, waited


def test_a_rank_that_never_starts_fails_the_rendezvous_within_the_startup_timeout(tiny_data, tmp_path):
    """Seen with 32 ranks: 10 minutes in init_process_group. Rank 1 of 2 never starts here."""
    port = free_port()
    env = _env() | {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                    "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    with open(tmp_path / "rank0.err", "w", encoding="utf-8") as stderr:
        proc = subprocess.Popen([sys.executable, TRAIN, "--data-dir", str(tiny_data), "--output-dir",
                                 str(tmp_path), "--startup-timeout", "3", *tiny()], env=env,
                                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    try:
        # The clock starts when the rank listens for the others (its rendezvous store), not at
        # the start of the process: importing torch on a loaded 2-core machine takes what it takes.
        deadline = time.monotonic() + HANG_S
        while not _listening(port) and proc.poll() is None:
            assert time.monotonic() < deadline, "the rank never listened for the others"
            time.sleep(0.05)
        listening = time.monotonic()
        proc.wait(timeout=HANG_S)
        waited = time.monotonic() - listening
    finally:
        stop([proc])
    err = (tmp_path / "rank0.err").read_text()
    assert proc.returncode != 0
    assert err.strip().splitlines()[-1].startswith("[cosmoflow] stopped: rank 0 of 2: the rendezvous at 127.0.0.1:"), err[-3000:]
    assert " waited more than 3 s for the other ranks" in err and "raise --startup-timeout" in err
    # The default --startup-timeout is 1800 s: ending within 123 s of listening shows the 3 s one
    # was honoured, with 120 s for a loaded machine to report and tear the rank down.
    assert waited < 3 + 120, waited


def _listening(port: int) -> bool:
    """Whether a socket of this network namespace listens on ``port`` (read from /proc, so the
    rank's store sees no connection)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def _wait_for_steps(out, proc, log, steps=2):
    """Until the run has logged ``steps`` training steps (its start, on a loaded machine, may be slow)."""
    deadline = time.monotonic() + HANG_S
    metrics = out / "metrics.jsonl"
    while not (metrics.exists() and metrics.read_text().count('"kind": "step"') >= steps):
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.2)


def _children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def test_a_hung_dataloader_worker_fails_the_rank_within_the_timeout(tiny_data, tmp_path):
    """A worker that hangs (stopped with SIGSTOP: alive, so DataLoader's liveness check passes)
    stops its rank within --collective-timeout, naming the rank and the workers."""
    out = tmp_path / "out"
    env = _env() | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    with open(tmp_path / "rank0.out", "w", encoding="utf-8") as stdout:
        proc = subprocess.Popen([sys.executable, TRAIN, "--data-dir", str(tiny_data), "--output-dir", str(out),
                                 "--collective-timeout", "10", "--epochs", "1000", "--batch-size", "4",
                                 *tiny(), *WORKERS], env=env, stdout=stdout, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_for_steps(out, proc, tmp_path / "rank0.out")
        workers = _children(proc.pid)
        assert workers
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        proc.wait(timeout=HANG_S)
    finally:
        stop([proc])
    output = (tmp_path / "rank0.out").read_text()
    assert proc.returncode != 0
    # Where it waited depends on when the workers stopped: a batch, or the start of an epoch.
    assert re.fullmatch(
        r"rank 0 of 1: waiting for (training batch \d+ from|validation batch \d+ from|the DataLoader workers "
        r"to start) .*took more than 10 s; a worker hangs or the storage stopped answering, or raise "
        r"--collective-timeout if reading is only slow", output.strip().splitlines()[-1]), output[-3000:]
