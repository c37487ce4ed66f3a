"""Two processes for real: torchrun, and an mpirun-shaped environment (OpenMPI variables)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import HANG_S, TINY_MODEL, WORKLOAD, end_group, free_port, run_in_group

TRAIN = str(WORKLOAD / "train.py")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "OMPI_", "PMI_"))}
    env["OMP_NUM_THREADS"] = "1"
    # Two processes on one machine: the launchers and the partition are under test, on CPU with
    # gloo, also where the machine has fewer GPUs than processes (dist.gpu_index refuses that).
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _check(out, world_size):
    summary = json.loads((out / "summary.json").read_text())
    config = next(json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
                  if json.loads(line)["kind"] == "config")
    assert summary["world_size"] == world_size and summary["num_nodes"] == 1
    assert config["global_batch"] == 4 * world_size
    # 64 training samples, 2 ranks x batch 4: 8 steps an epoch, 2 epochs.
    assert summary["step"] == 2 * 64 // (4 * world_size)


def _epochs(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] == "epoch"]


def test_two_processes_with_gloo_through_torchrun(tiny_data, tmp_path):
    out = tmp_path / "outputs"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), TRAIN,
           "--data-dir", str(tiny_data), "--epochs", "2", "--batch-size", "4", "--output-dir", str(out),
           *TINY_MODEL]
    proc = run_in_group(cmd, env=_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 process(es) on 1 node(s) via torchrun, backend gloo" in proc.stdout
    _check(out, 2)


def test_validation_over_two_ranks_equals_one_rank(tiny_data, tmp_path):
    """lr 0 keeps the initial weights (same seed): the 2-rank validation MAE, each rank holding
    half the samples, must be the 1-rank one over all of them."""
    args = ["--data-dir", str(tiny_data), "--epochs", "1", "--batch-size", "4", *TINY_MODEL]
    args[args.index("--lr") + 1] = "0"
    for n in (1, 2):
        cmd = [sys.executable, TRAIN] if n == 1 else [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), TRAIN]
        env = _env() | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())} if n == 1 else _env()
        proc = run_in_group([*cmd, "--output-dir", str(tmp_path / str(n)), *args], env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    one, two = (_epochs(tmp_path / str(n))[0] for n in (1, 2))
    assert two["val_mae"] == pytest.approx(one["val_mae"], rel=1e-6)
    assert two["val_loss"] == pytest.approx(one["val_loss"], rel=1e-6)


def _mpirun_shaped(data_dirs, out, *extra):
    """Two processes with what mpirun exports (no MPI library is needed by the training itself)."""
    port, procs = free_port(), []
    for rank, data_dir in enumerate(data_dirs):
        env = _env() | {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(len(data_dirs)),
                        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
                        "OMPI_COMM_WORLD_LOCAL_SIZE": str(len(data_dirs)),
                        "AZ_BATCH_MASTER_NODE": f"127.0.0.1:{port}"}
        procs.append(subprocess.Popen(
            [sys.executable, TRAIN, "--data-dir", str(data_dir), "--epochs", "2", "--batch-size", "4",
             "--output-dir", str(out), *TINY_MODEL, *extra], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True))
    try:
        outputs = [p.communicate(timeout=HANG_S)[0] for p in procs]
    finally:
        for p in procs:
            end_group(p)
    return [p.returncode for p in procs], outputs


def test_two_processes_with_openmpi_variables(tiny_data, tmp_path):
    out = tmp_path / "outputs"
    codes, outputs = _mpirun_shaped([tiny_data, tiny_data], out)
    assert codes == [0, 0], "\n".join(o[-3000:] for o in outputs)
    assert "via openmpi" in outputs[0]
    _check(out, 2)


def test_ranks_that_see_different_files_stop_before_training(tiny_data, tmp_path):
    """Node-local shards read in global scope (issue 10 defect 1): today each rank would train on
    a part of its part; the start-up partition check stops every rank with one sentence."""
    shards = [tmp_path / "node0", tmp_path / "node1"]
    for split in ("train", "validation"):
        files = sorted((tiny_data / split).iterdir())
        for k, shard in enumerate(shards):
            (shard / split).mkdir(parents=True)
            for f in files[k::2]:
                (shard / split / f.name).symlink_to(f)
    codes, outputs = _mpirun_shaped(shards, tmp_path / "outputs", "--data-scope", "global")
    assert codes[0] != 0 and codes[1] != 0
    for output in outputs:
        assert "train: data scope global needs every rank to see the same files, but rank 0 (node 0) lacks 32:" \
            in output, output[-3000:]
        assert "use --data-scope node" in output
