"""Every phase `site.yml` runs gets a report page when it fails (docs/operations.md, "A run that
fails gets a page saying where"): each play of a phase playbook runs its tasks in one block whose
rescue writes the page (playbooks/tasks/failed.yml). Read from the playbooks themselves, so a new
phase without it goes red here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
# Not phases: the preflight (before anything can fail into a page) and the report itself.
NOT_PHASES = {"preflight.yml", "report.yml"}


def _plays(name: str) -> list[tuple[str, dict]]:
    """Every play `name` runs, through the playbooks it imports."""
    out = []
    for play in yaml.safe_load((ROOT / "playbooks" / name).read_text()):
        imported = play.get("ansible.builtin.import_playbook")
        if imported:
            if imported not in NOT_PHASES:
                out += _plays(imported)
        else:
            out.append((name, play))
    return out


def test_every_phase_play_writes_a_page_when_it_fails():
    missing = []
    plays = _plays("site.yml")
    assert len(plays) > 15, plays
    for name, play in plays:
        tasks = play.get("tasks") or []
        rescued = (len(tasks) == 1 and "block" in tasks[0]
                   and any(t.get("ansible.builtin.include_tasks") == "tasks/failed.yml"
                           for t in tasks[0].get("rescue", [])))
        if not rescued or play.get("roles"):
            missing.append(f"{name}: {play.get('name')}")
    assert not missing, f"phase plays without the failed-run page: {missing}"


def test_a_run_once_task_that_fails_is_named_on_every_host(tmp_path):
    """A run-once task that fails every host of the play names itself on one host only (seen on
    the twin: the last look's run-once stop sent all three nodes to the rescue, two of them with
    no failed task, and they said "last look failed at '': "). Every host's failure names it:
    the rescue's state reproduced, the failed task and result on the first host only."""
    inv = tmp_path / "hosts.yml"
    first = {"ansible_failed_task": {"name": "Phase | Stop once for all"}, "ansible_failed_result": {"msg": "the reason"}}
    inv.write_text(yaml.safe_dump({"aml_nodes": {"hosts": {"n-0": first, "n-1": None, "n-2": None},
                                                 "vars": {"ansible_connection": "local"}}}))
    book = tmp_path / "phase.yml"
    book.write_text(yaml.safe_dump([{"hosts": "aml_nodes", "gather_facts": False, "tasks": [
        {"name": "Phase | Page", "ansible.builtin.include_tasks": str(ROOT / "playbooks" / "tasks" / "failed.yml"),
         "vars": {"report_phase": "phase", "amlhpc_project_dir": str(tmp_path / "project")}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               ANSIBLE_FORCE_COLOR="0")
    res = subprocess.run([ansible_cli("ansible-playbook"), "-i", str(inv), str(book)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode != 0
    for host in ("n-0", "n-1", "n-2"):
        assert re.search(rf"fatal: \[{host}\]: FAILED! => .*phase failed at 'Phase \| Stop once for all': the reason",
                         res.stdout), res.stdout[-3000:]
    page = next((tmp_path / "project" / "outputs").rglob("reports/*.html")).read_text()
    assert "''" not in page and "the reason" in page
