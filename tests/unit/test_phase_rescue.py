"""Every phase `site.yml` runs gets a report page when it fails (docs/operations.md, "A run that
fails gets a page saying where"): each play of a phase playbook runs its tasks in one block whose
rescue writes the page (playbooks/tasks/failed.yml). Read from the playbooks themselves, so a new
phase without it goes red here."""

from __future__ import annotations

from pathlib import Path

import yaml

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
