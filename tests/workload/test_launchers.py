"""Two processes for real: torchrun, and an mpirun-shaped environment (OpenMPI variables)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import TINY_MODEL, WORKLOAD, free_port

TRAIN = str(WORKLOAD / "train.py")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "OMPI_", "PMI_"))}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _check(out, world_size):
    summary = json.loads((out / "summary.json").read_text())
    config = next(json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
                  if json.loads(line)["kind"] == "config")
    assert summary["world_size"] == world_size and summary["num_nodes"] == 1
    assert config["global_batch"] == 4 * world_size
    # 64 training samples, 2 ranks x batch 4: 8 steps an epoch, 2 epochs.
    assert summary["step"] == 2 * 64 // (4 * world_size)


def test_two_processes_with_gloo_through_torchrun(tiny_data, tmp_path):
    out = tmp_path / "outputs"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), TRAIN,
           "--data-dir", str(tiny_data), "--epochs", "2", "--batch-size", "4", "--output-dir", str(out),
           *TINY_MODEL]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 process(es) on 1 node(s) via torchrun, backend gloo" in proc.stdout
    _check(out, 2)


def test_two_processes_with_openmpi_variables(tiny_data, tmp_path):
    """What mpirun exports (no MPI library is needed by the training itself)."""
    out, port = tmp_path / "outputs", free_port()
    procs = []
    for rank in range(2):
        env = _env() | {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2",
                        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                        "AZ_BATCH_MASTER_NODE": f"127.0.0.1:{port}"}
        procs.append(subprocess.Popen(
            [sys.executable, TRAIN, "--data-dir", str(tiny_data), "--epochs", "2", "--batch-size", "4",
             "--output-dir", str(out), *TINY_MODEL], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    assert "via openmpi" in outputs[0]
    _check(out, 2)
