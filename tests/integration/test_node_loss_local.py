"""Issue 43, item 1, on the local backend: a rank of the training job freezes; the job ends within
``submit_node_loss_timeout`` and ``aml_job`` (through the submit role) names the node, the rank
and the missed heartbeat, records the interruption, and says how to resume.

playbooks/submit.yml on the local default (torchrun, two processes, the workload venv); rank 1
is stopped with SIGSTOP once training runs. The AzureML path is the twin's
(test_twin_node_loss.py)."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from project_copy import project_env

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD_PYTHON = ROOT / ".venv-workload" / "bin" / "python"
BOUND = 15
MARK = str(os.getpid()).encode()  # this test's job, not another's


def rank_process(rank: int) -> int | None:
    """The pid of the training process of ``rank`` (RANK in its environment) started from this checkout."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except OSError:
            continue
        if any(part.endswith(b"/workload/train.py") for part in cmd) and env.get(b"AMLHPC_TEST_MARK") == MARK \
                and env.get(b"RANK") == str(rank).encode() and env.get(b"LOCAL_RANK") is not None:
            return int(entry)
    return None


def test_a_frozen_rank_ends_the_local_job_within_the_bound_named(tmp_path, project):
    data, out = tmp_path / "data", tmp_path / "outputs"
    gen = subprocess.run([str(WORKLOAD_PYTHON), "-m", "amlhpc.data.cosmoflow_data", "--out", str(data), "--cube", "16",
                          "--subvolumes", "32"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT / "plugins" / "module_utils")), check=False)
    assert gen.returncode == 0, gen.stderr
    extra = {"submit_name": "loss-local", "submit_data_dir": str(data), "submit_output_dir": str(out),
             "node_loss_run_dir": str(tmp_path / "run"), "submit_node_loss_timeout": BOUND,
             "submit_train_args": {"cube": 16, "conv_layers": 2, "conv_size": 4, "fc1_size": 16, "fc2_size": 8,
                                   "epochs": 100000, "batch_size": 4, "workers": 1, "log_every": 1},
             "submit_timeout": 600, "submit_environment_variables": {"AMLHPC_TEST_MARK": MARK.decode()}}
    stopped: dict[str, float] = {}

    def freeze() -> None:
        metrics = out / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if metrics.exists() and metrics.read_text().count('"kind": "step"') >= 2:
                pid = rank_process(1)
                if pid:
                    stopped["pid"], stopped["at"] = pid, time.time()
                    os.kill(pid, signal.SIGSTOP)
                    return
            time.sleep(0.2)

    watcher = threading.Thread(target=freeze, daemon=True)
    watcher.start()
    env = project_env(project)
    try:
        res = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/submit.yml",
                              "-e", json.dumps(extra)], cwd=project, env=env, capture_output=True, text=True,
                             timeout=900, check=False)
    finally:
        watcher.join(5)
        if "pid" in stopped:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(stopped["pid"], sig)
                except ProcessLookupError:
                    pass
    assert "at" in stopped, res.stdout[-4000:]
    assert res.returncode != 0
    # the epoch it froze in: the first, or a later one where the watcher was slow on a loaded machine
    assert re.search(r"run loss-local lost node local-0 in epoch \d+: node ", res.stdout), res.stdout[-4000:]
    assert "(127.0.0.1), rank 1 of 2: no heartbeat for " in res.stdout and "(missed heartbeat; " in res.stdout
    [record] = json.loads((tmp_path / "run" / "interruptions.json").read_text())
    assert record["node"] == "local-0" and record["ranks"] == [1] and record["seen"] == "missed heartbeat"
    assert record["detected_at"] - stopped["at"] <= BOUND, (record, stopped)
    assert not (project / "outputs" / "loss-local").exists()  # written where it was told, nowhere else
