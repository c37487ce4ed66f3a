"""playbooks/submit.yml (role submit) with the local backend: torchrun + the workload venv on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from project_copy import make_project_copy, project_env

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD_PYTHON = ROOT / ".venv-workload" / "bin" / "python"


def playbook(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """playbooks/submit.yml in the test's project folder (tmp_path/project, tests/project_copy.py).
    The json stdout callback; the timing callbacks of ansible.cfg would print around it."""
    project = make_project_copy(tmp_path / "project")
    env = project_env(project, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.junit",
                      JUNIT_OUTPUT_DIR=str(tmp_path / "junit"))
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/submit.yml", *extra],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False)


def task_result(out: str, name_part: str) -> dict:
    data = json.loads(out)
    for play in data["plays"]:
        for task in play["tasks"]:
            if name_part in task["task"]["name"]:
                return task["hosts"]["localhost"]
    raise AssertionError(f"no task named *{name_part}*")


@pytest.mark.slow
def test_local_backend_trains_and_reports_metrics_then_is_idempotent(tmp_path):
    if not WORKLOAD_PYTHON.exists():
        pytest.fail(f"{WORKLOAD_PYTHON} is missing: run `make setup`")
    data, out = tmp_path / "data", tmp_path / "outputs"
    gen = subprocess.run([str(WORKLOAD_PYTHON), "-m", "amlhpc.data.cosmoflow_data", "--out", str(data), "--cube", "16",
                          "--subvolumes", "64", "--gzip"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT / "plugins" / "module_utils")), check=False)
    assert gen.returncode == 0, gen.stderr
    extra = ["-e", "submit_name=itest", "-e", f"submit_data_dir={data}", "-e", f"submit_output_dir={out}",
             "-e", "amlhpc_no_log=false", "-e", "submit_generate_data=true"]
    first = playbook(tmp_path, *extra)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    # The data set is there (asked to generate one where it is not): the play, on the
    # controller, skips its generation with no module run.
    assert task_result(first.stdout, "Generate the small")["skip_reason"] == "Conditional result was False"
    result = task_result(first.stdout, "Run the training job")
    assert result["changed"] is True and result["status"] == "Completed"
    spec = result["spec"]
    assert spec["command"][1:5] == ["-m", "torch.distributed.run", "--nproc_per_node", "2"]
    steps = result["metrics"]["steps"]
    epochs = result["metrics"]["epochs"]
    # The local default's data set (128 training samples) and job: it learns, the training loss
    # of the last epoch at most 60 % of the first's, the validation loss at most 80 %
    # (tests/workload/test_jobs_learn.py: 33 % and 51 % here).
    assert len(epochs) == 3 and len(steps) == 3 * 128 // (4 * 2)
    assert epochs[-1]["train_loss"] < 0.6 * epochs[0]["train_loss"], epochs
    assert epochs[-1]["val_loss"] < 0.8 * epochs[0]["val_loss"], epochs
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and (out / "checkpoints" / "last.pt").is_file()
    assert not (tmp_path / "project" / "outputs" / "itest").exists()  # written where it was told, nowhere else

    again = playbook(tmp_path, *extra)
    assert again.returncode == 0, again.stdout[-4000:]
    assert task_result(again.stdout, "Run the training job")["changed"] is False
