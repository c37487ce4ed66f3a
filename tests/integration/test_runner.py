"""CI pipelines run the project through ansible-runner (.ci/ansible_runner_site.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_entry_point():
    spec = importlib.util.spec_from_file_location("ansible_runner_site", ROOT / ".ci" / "ansible_runner_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_local_profile_through_ansible_runner(tmp_path):
    entry = load_entry_point()
    runner = entry.run_playbook("site.yml", private_data_dir=str(tmp_path / "runner"), quiet=True)
    summary = entry.summarize(runner)
    assert summary["status"] == "successful", json.dumps(summary, default=str)[:4000]
    assert summary["rc"] == 0 and summary["failed_tasks"] == []

    stats = runner.stats
    assert stats["failures"] == {} and stats["dark"] == {}
    assert stats["ok"]["local-0"] > 0 and stats["ok"]["localhost"] > 0

    events = list(runner.events)
    plays = [e["event_data"]["play"] for e in events if e["event"] == "playbook_on_play_start"]
    assert plays[:2] == ["Cluster | Make sure the AmlCompute cluster exists at its fixed size",
                         "Validate the inventory and variables"]
    assert plays[-1] == "Report"
    ok_tasks = {e["event_data"]["task"] for e in events if e["event"] == "runner_on_ok"}
    assert "Stage | Copy this node's shard with azcopy" in ok_tasks
    assert "Submit | Run the training job (local)" in ok_tasks

    # The report is an event too: skipped phases with reasons, the staging, the losses.
    report = next(e for e in events if e["event"] == "runner_on_ok"
                  and e["event_data"]["task"] == "Report | Summarise the run")
    lines = report["event_data"]["res"]["msg"]
    assert any(line.startswith("ssh_trust: skipped: ") for line in lines)
    assert any(line.startswith("stage: ") and " files, " in line for line in lines)
    assert any(line.startswith("training loss per epoch: ") for line in lines)

    # No SAS signature anywhere in what the runner kept.
    artifacts = Path(runner.config.artifact_dir)
    for path in artifacts.rglob("*"):
        if path.is_file():
            assert "sig=" not in path.read_text(errors="replace"), path

    # After that run, check mode goes through the whole site.yml and changes nothing on the node.
    check = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "site.yml", "--check", "--diff"],
                           cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert check.returncode == 0, check.stdout[-4000:]
    node = re.search(r"^local-0\s+: (.*)$", check.stdout.split("PLAY RECAP")[-1], re.M).group(1)
    assert "changed=0" in node and "failed=0" in node, node
