"""playbooks/submit.yml (role submit) in check mode: which backend and job the role asks
aml_job for, from the local default inventory, a user's inventory, and the old aml_job_* names.
Nothing is trained here (tests/integration/test_submit_local.py runs the job)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")


def play(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    # -vvv and INJECT_INVOCATION: the results carry the module's arguments (invocation).
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.junit",
               JUNIT_OUTPUT_DIR=str(tmp_path / "junit"), ANSIBLE_INJECT_INVOCATION="true")
    return subprocess.run([ANSIBLE_PLAYBOOK, "playbooks/submit.yml", "--check", "-vvv", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180, check=False)


def tasks(res: subprocess.CompletedProcess) -> dict[str, dict]:
    data = json.loads(res.stdout[res.stdout.index("\n{") + 1:])  # after -vvv's lines
    return {t["task"]["name"]: t["hosts"].get("localhost", {}) for p in data["plays"] for t in p["tasks"]}


def job(res: subprocess.CompletedProcess) -> dict:
    (result,) = [r for name, r in tasks(res).items() if "Submit | Run the training job" in name]
    return result


def user_inventory(tmp_path: Path, **group_vars) -> Path:
    """A user's inventory: one node, no amlhpc_profile anywhere."""
    inv = {"all": {"children": {"aml_nodes": {"children": {"head": {"hosts": {"n0": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "aml_cluster": "gpu", "aml_node_rank": 0}}}}}}, "vars": group_vars}}
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def test_local_default_runs_the_local_backend_with_its_small_model(tmp_path):
    res = play(tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    result = job(res)
    # Not run yet, or already run by `make run` in this checkout: either way the same job.
    assert result["status"] in ("NotSubmitted (check mode)", "Completed")
    assert result["run_id"] == "cosmoflow-local"
    command = result["spec"]["command"]
    assert command[1:5] == ["-m", "torch.distributed.run", "--nproc_per_node", "2"]
    assert command[command.index("--cube") + 1] == "16"
    assert command[command.index("--data-dir") + 1] == str(ROOT / ".scratch" / "cosmoflow")
    assert "DEPRECATED" not in res.stdout
    # What the module writes goes under the project folder (not the playbook's folder, where
    # Ansible runs a local module).
    args = result["invocation"]["module_args"]
    assert args["work_dir"] == str(ROOT / ".cache" / "aml_job" / "cosmoflow-local")
    assert args["output_dir"] == args["download_dir"] == str(ROOT / "outputs" / "cosmoflow-local")


def test_the_backend_is_the_role_variable_not_a_profile(tmp_path):
    # A user's inventory with nothing set: the production backend, which needs its workspace.
    res = play(tmp_path, "-i", str(user_inventory(tmp_path)))
    assert res.returncode != 0
    assert ("backend azure_ai_ml needs subscription_id, resource_group, workspace_name (subscription_id may "
            "also come from AZURE_SUBSCRIPTION_ID)") in res.stdout
    # The same inventory asking for the local backend: torchrun here, on the cluster's one node.
    data = tmp_path / "data"
    res = play(tmp_path, "-i", str(user_inventory(tmp_path, submit_backend="local", submit_data_dir=str(data),
                                                  submit_output_dir=str(tmp_path / "out"))))
    assert res.returncode == 0, res.stdout[-3000:]
    result = job(res)
    assert result["run_id"] == "cosmoflow" and result["spec"]["command"][1] == "-m"
    assert result["spec"]["command"][result["spec"]["command"].index("--data-dir") + 1] == str(data)


def test_a_user_inventory_submits_through_azure_ai_ml_by_default(tmp_path):
    """azureml-core (SDK v1) is out of support since 2026-06-30: an inventory that does not set
    submit_backend asks aml_job for the azure-ai-ml backend (which, with no workspace set, names
    what it needs before it connects to anything)."""
    res = play(tmp_path, "-i", str(user_inventory(tmp_path)))
    assert res.returncode != 0
    result = job(res)
    assert result["invocation"]["module_args"]["backend"] == "azure_ai_ml"
    assert result["msg"] == ("backend azure_ai_ml needs subscription_id, resource_group, workspace_name "
                             "(subscription_id may also come from AZURE_SUBSCRIPTION_ID)")


def test_the_old_aml_job_names_still_work_and_are_named_for_renaming(tmp_path):
    old = {"aml_job_name": "old-name", "aml_job_data_dir": str(tmp_path / "old-data"),
           "aml_job_output_dir": str(tmp_path / "out"), "aml_job_train_args": {"cube": 8, "epochs": 1},
           "aml_job_bogus": 1}
    res = play(tmp_path, "-e", json.dumps(old))
    assert res.returncode == 0, res.stdout[-3000:]
    (notice,) = [r["msg"] for name, r in tasks(res).items() if "renamed aml_job_* variables to rename" in name]
    assert notice.startswith("DEPRECATED: the submit variables are named submit_* now")
    for name in ("aml_job_name -> submit_name", "aml_job_data_dir -> submit_data_dir",
                 "aml_job_train_args -> submit_train_args"):
        assert name in notice
    assert "Not submit variables (ignored): aml_job_bogus." in notice and "submit_bogus" not in notice
    # The old values win over the local inventory's submit_* (as they did before the rename).
    result = job(res)
    command = result["spec"]["command"]
    assert result["run_id"] == "old-name"
    assert command[command.index("--data-dir") + 1] == str(tmp_path / "old-data")
    assert command[command.index("--cube") + 1] == "8" and command[command.index("--epochs") + 1] == "1"
    # A new name given as an extra var wins over the old one.
    res = play(tmp_path, "-e", json.dumps(old), "-e", "submit_name=new-name")
    assert res.returncode == 0, res.stdout[-3000:]
    assert job(res)["run_id"] == "new-name"


def test_wrong_types_fail_before_any_task(tmp_path):
    res = play(tmp_path, "-e", "submit_process_count_per_node=two")
    assert res.returncode != 0
    assert "submit_process_count_per_node" in res.stdout and "Validating arguments" in res.stdout
    res = play(tmp_path, "-e", "submit_backend=v3")
    assert res.returncode != 0 and "submit_backend" in res.stdout


def test_tags():
    res = subprocess.run([ANSIBLE_PLAYBOOK, "playbooks/submit.yml", "--list-tags"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert "TAGS: [submit]" in res.stdout
