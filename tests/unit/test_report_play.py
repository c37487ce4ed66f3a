"""The report play writes into the project folder (amlhpc_project_dir), never next to the
playbooks: from an installed collection (an execution environment's, read-only) those lie
inside the collection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")


def test_a_run_without_a_job_writes_its_report_into_the_project_folder(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"amlhpc_project_dir": str(project)}}}))
    before = set((ROOT / "outputs").rglob("*")) if (ROOT / "outputs").exists() else set()
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), str(ROOT / "playbooks" / "report.yml")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (project / "outputs" / "cosmoflow" / "report.html").is_file()
    assert f"report: {project}/outputs/cosmoflow/report.html" in res.stdout
    after = set((ROOT / "outputs").rglob("*")) if (ROOT / "outputs").exists() else set()
    assert after == before
