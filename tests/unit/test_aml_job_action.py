"""aml_job's action plugin: a job whose completed run this controller recorded and downloaded
is answered on the controller with no module run; the first run, and a forced one, run the
module. The workspace is the twin's stand-in for azure-ai-ml's MLClient (tests/twin), so the
module really submits, streams and downloads through the SDK's client."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from twin.cluster import Twin

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]


def _module_ran(out: str) -> bool:
    """Whether a -vvv log shows aml_job's module sent to the node (pipelined or from a file)."""
    return re.search(r"^Using module file \S*/aml_job\.py$", out, re.M) is not None


ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")


def test_a_recorded_completed_run_is_answered_without_a_module_run(tmp_path):
    runs = tmp_path / "runs" / "cf"
    (runs / "outputs").mkdir(parents=True)
    (runs / "outputs" / "metrics.jsonl").write_text(json.dumps({"kind": "step", "step": 1, "loss": 0.5}) + "\n")
    (runs / "logs.txt").write_text("[cosmoflow] epoch 0: train loss 0.5\n")
    state = tmp_path / "azureml.json"
    twin = Twin(0, tmp_path / "twin", prefix="amlhpc-action").save_state(tmp_path / "twin.json")  # no node
    job = {"status": "Completed", "outputs": str(runs / "outputs"), "logs": str(runs / "logs.txt")}
    state.write_text(json.dumps({"twin": str(twin), "jobs": {"cf": job}}))
    download = tmp_path / "dl"
    playbook = tmp_path / "job.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Job", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": [{"name": "Job | Run", "amlhpc.azureml.aml_job": {
            "backend": "azure_ai_ml", "name": "cf", "subscription_id": "00000000-0000-0000-0000-000000000000",
            "resource_group": "rg-hpc", "workspace_name": "ws-hpc", "auth_source": "cli", "compute": "gpu",
            "source_dir": str(ROOT / "workload"), "dockerfile": str(ROOT / "workload" / "Dockerfile"),
            "data_dir": "/data", "download_dir": str(download), "work_dir": str(tmp_path / "work"),
            "force": "{{ force | default(false) }}"}, "register": "job"},
            {"name": "Job | Show", "ansible.builtin.debug": {"msg": "{{ job | to_json }}"}}]}]))
    standin = str(ROOT / "tests" / "twin" / "azureml_standin")
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", TWIN_AZUREML_STATE=str(state),
               PYTHONPATH=os.pathsep.join(filter(None, [standin, os.environ.get("PYTHONPATH", "")])))

    def play(*args: str) -> tuple[str, dict]:
        res = subprocess.run([ANSIBLE_PLAYBOOK, "-vvv", "-i", "localhost,", str(playbook), *args], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
        shown = res.stdout[res.stdout.index("TASK [Job | Show]"):]
        return res.stdout, json.loads(json.loads(shown[shown.index("{"):shown.index("\n}") + 2])["msg"])

    def downloads() -> int:
        return json.loads(state.read_text())["jobs"]["cf"].get("downloads", 0)

    first_out, first = play()
    assert _module_ran(first_out) and downloads() == 1
    assert first["changed"] is False and first["run_id"] == "cf" and first["status"] == "Completed", first
    assert (download / ".amlhpc-job.json").is_file()
    for args in ((), ("--check",)):
        out, again = play(*args)
        assert "Using module file" not in out, [line for line in out.splitlines() if "Using module file" in line][:3]
        assert again["changed"] is False and again["run_id"] == "cf" and "the workspace not asked" in again["msg"]
        assert again["metrics"]["steps"] == [{"step": 1, "loss": 0.5}] and again["spec"] == first["spec"]
    assert downloads() == 1
    # force: the module asks the workspace and submits a new attempt (the stand-in refuses to
    # run it without a twin cluster: the module ran, which is what this asks).
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-vvv", "-i", "localhost,", str(playbook), "-e", "force=true"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert _module_ran(res.stdout)
