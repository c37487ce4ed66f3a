"""Issue 48 item 4: ``submit_on_node_loss: resume`` (playbooks/resume.yml, role node_loss's record).

* site.yml holds the rounds after Submit, each the phases a rerun runs, with the same tags (so a
  ``--tags healthcheck,stage,submit`` run resumes as its rerun would), and in a run without a loss
  every round's play matches no host: nothing changes for ``stop`` or for a run that lost nothing.
* The submit role's record of a lost node (``aml_job``'s ``node_loss``, as the module returns it):
  with ``stop`` the run fails with today's sentence; with ``resume`` it goes on, and the next
  round's plays run (and only that round's); spent attempts and check mode stop with the sentence.

The whole path with a real loss, one ansible-playbook run that ends rc 0, is the twin's:
tests/integration/test_twin_resume.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[1].parent
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")
FIRST_PHASE = "Map the run's nodes onto its shard-plan slots"
NOT_IN_A_ROUND = {"Local blob store (Azurite)", "Prepare the data set in Blob Storage"}  # the data is in place
SENTENCE = ("node hx-2 (10.0.0.6), rank 2 of 4: no heartbeat for 40 s (missed heartbeat; last at 2026-11-29T01:00:00Z, "
            "seen by rank 0 at 2026-11-29T01:00:40Z); the job stops so that it can resume without it")


def listed(project: Path, *argv: str) -> list[dict]:
    from project_copy import project_env
    res = subprocess.run([ANSIBLE_PLAYBOOK, "site.yml", "--list-hosts", "--list-tags", *argv], cwd=project,
                         env=project_env(project), capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    plays = []
    for m in re.finditer(r"play #\d+ \(([^)]*)\): (.*?)\tTAGS: \[([^\]]*)\]\n\s+pattern: (.*)\n\s+hosts \((\d+)\)",
                         res.stdout):
        plays.append({"name": m.group(2), "tags": set(filter(None, m.group(3).split(","))), "hosts": int(m.group(5))})
    return plays


def test_the_rounds_are_the_phases_of_a_rerun_and_match_no_host_without_a_loss(project):
    plays = listed(project)
    names = [p["name"] for p in plays]
    submit = names.index("Submit the CosmoFlow training job")
    first = [p for p in plays[names.index(FIRST_PHASE):submit + 1] if p["name"] not in NOT_IN_A_ROUND]
    rounds = plays[submit + 1:names.index("Report")]
    size = 2 + len(first)  # the round's two plays of its own, then the phases
    assert len(rounds) == 3 * size, [p["name"] for p in rounds]
    for i in range(3):
        own, phases = rounds[i * size:i * size + 2], rounds[i * size + 2:(i + 1) * size]
        assert [p["name"] for p in own] == ["Resume | Read the inventory again and start afresh where the last "
                                            "attempt decided", "Resume | Give every listed node a fresh start"]
        assert all(p["tags"] == {"submit"} for p in own)
        assert [(p["name"], p["tags"]) for p in phases] == [(p["name"], p["tags"]) for p in first]
        assert all(p["hosts"] == 0 for p in own + phases), rounds
    # The first pass is untouched: its phases run on the inventory's nodes.
    assert all(p["hosts"] > 0 for p in first if not p["name"].startswith("Stage the data set")), first


RECORD_PLAY = """
- name: The submit role's rescue, as after aml_job returned a lost node
  hosts: localhost
  connection: local
  gather_facts: false
  tags: [always]
  tasks:
    - name: Run the job
      block:
        - name: The job failed naming a lost node (aml_job's node_loss)
          ansible.builtin.fail:
            msg: the job failed
      rescue:
        - name: Record the lost node, then resume by itself or stop
          ansible.builtin.include_role:
            name: amlhpc.azureml.node_loss
            tasks_from: record
    - name: Show the round the run is in
      ansible.builtin.debug:
        msg: "round={{ node_loss_resume_round | default(0) }}"

- name: Round 1
  ansible.builtin.import_playbook: {root}/playbooks/resume.yml
  vars:
    node_loss_round: 1
- name: Round 2
  ansible.builtin.import_playbook: {root}/playbooks/resume.yml
  vars:
    node_loss_round: 2
"""


def record(project: Path, tmp_path: Path, *argv: str, **extra) -> subprocess.CompletedProcess:
    """RECORD_PLAY then two rounds, on the controller alone (no node in aml_nodes), the plays tagged
    stage (of a round: its node slots, on the controller): what runs shows which round is on."""
    from project_copy import project_env
    inventory = tmp_path / "inv.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "children": {"aml_nodes": {"hosts": {}}}}}))
    playbook = tmp_path / "record.yml"
    playbook.write_text(RECORD_PLAY.replace("{root}", str(project)))
    result = {"failed": True, "msg": "the job failed", "run_id": "rt", "metrics": {"epochs": [{"epoch": 0}]},
              "node_loss": {"sentence": SENTENCE, "node": "hx-2", "ip": "10.0.0.6", "ranks": [2], "world": 4,
                            "seen": "missed heartbeat", "last_ts": 1795000000.0, "at_ts": 1795000040.0}}
    variables = {"submit_name": "rt", "node_loss_run_dir": str(tmp_path / "run"), "submit_result": result,
                 "submit_process_count_per_node": 1, "healthcheck_on_failure": "exclude",
                 "healthcheck_spare_nodes": 1, "_submit_checkpoint_url": "https://a.blob.core.windows.net/c/rt",
                 **extra}
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inventory), str(playbook), "--tags", "stage",
                           "-e", json.dumps(variables), *argv], cwd=project, env=project_env(project),
                          capture_output=True, text=True, timeout=300, check=False)


TODAY = ("run rt lost node hx-2 in epoch 2: " + SENTENCE + ". Rerunning site.yml (or --tags healthcheck,stage,"
         "submit) gates the nodes again, leaves it out or gives its shard to the node AmlCompute put in its place "
         "(only its files move), and resumes from the last durable checkpoint")


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_stop_fails_with_todays_sentence_and_resume_runs_the_next_round_only(project, tmp_path):
    stop = record(project, tmp_path)
    assert stop.returncode == 2, stop.stdout[-3000:]
    assert TODAY in flat(stop.stdout) and "automatic" not in stop.stdout
    [interruption] = json.loads((tmp_path / "run" / "interruptions.json").read_text())
    assert interruption["node"] == "hx-2" and interruption["epoch_reached"] == 2

    resume = record(project, tmp_path, submit_on_node_loss="resume")
    assert resume.returncode == 0, resume.stdout[-4000:]
    assert "Resuming by itself (submit_on_node_loss: resume), attempt 1 of at most 2" in flat(resume.stdout)
    assert '"msg": "round=1"' in resume.stdout
    # Round 1's node slots ran on the controller; round 2's matched no host.
    slots = [m.start() for m in re.finditer(r"PLAY \[Map the run's nodes onto its shard-plan slots\]", resume.stdout)]
    assert len(slots) == 2, resume.stdout[-4000:]
    end = resume.stdout.index("PLAY RECAP")
    first, second = (resume.stdout[a:b] for a, b in zip(slots, slots[1:] + [end]))
    assert "Node loss | Map the nodes onto the run's recorded slots" in first and "skipping: no hosts matched" \
        not in first.split("PLAY [", 2)[1]
    assert "Node loss | Map the nodes onto the run's recorded slots" not in second
    assert "skipping: no hosts matched" in second.split("PLAY [", 2)[1]
    assert len(json.loads((tmp_path / "run" / "interruptions.json").read_text())) == 2  # each round recorded


def test_spent_attempts_and_check_mode_stop_with_the_sentence(project, tmp_path):
    spent = record(project, tmp_path, submit_on_node_loss="resume", submit_resume_attempts=0)
    assert spent.returncode == 2, spent.stdout[-3000:]
    assert TODAY + "; this run stopped after 0 automatic attempts (submit_resume_attempts: 0)" in flat(spent.stdout)
    check = record(project, tmp_path, "--check", submit_on_node_loss="resume")
    assert check.returncode == 2 and TODAY in flat(check.stdout) and "Resuming by itself" not in check.stdout


def test_the_options_are_the_roles_and_known_to_the_variable_check():
    spec = yaml.safe_load((ROOT / "roles" / "submit" / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROOT / "roles" / "submit" / "defaults" / "main.yml").read_text())
    for name in ("submit_on_node_loss", "submit_resume_attempts"):
        assert defaults[name] == options[name]["default"]
