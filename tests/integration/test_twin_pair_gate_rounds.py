"""Issue 42: the pair gate confirms before it blames, on the AmlCompute twin.

Five twin nodes run only the gate's own tasks (roles/healthcheck/tasks/pairs.yml through a
three-task play), with the role's defaults and the floor a user of a CPU size sets
(``healthcheck_pair_thresholds: {default: {iperf3: 0.05}}``, as the other twin tests):

* healthy gates in a row while two of the nodes burn a core each (the twin's two cores
  then hold the gate's iperf3 runs, Ansible and the load): no node is ever named or undecided.
  CI runs two (``HEALTHY_GATES``); ``make soak`` runs ten (``AMLHPC_SOAK=1``), the repetition
  that measured the rule against the twin's noise (docs/testing.md);
* one slow node (``tc tbf`` at 10 Mbit/s) and one lossy node (30 % of what it sends dropped)
  in different round-1 pairs: both named, nobody else, in at most 4 rounds, and the summary's
  verdict lists exactly them (2.1.0: all five "undecided" under "every link passed").

Faults are made in the twin's network (tests/twin/netfaults.py), never by a variable of the
product. The load is made in the nodes (a busy shell loop each), removed afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

from project_copy import make_project_copy, project_env
from test_multinode import ANSIBLE_PLAYBOOK, ROOT, recap, user_inventory

sys.path.insert(0, str(ROOT / "tests"))

from twin.cluster import Twin, free_base_port  # noqa: E402
from twin.netfaults import lossy_link, slow_link  # noqa: E402

NODES = 5
# Healthy gates in a row: two in CI (a gate that blames under load shows in either), ten in
# `make soak` (the repetition, 8 of the 10 minutes this test took in CI).
HEALTHY_GATES = 10 if os.environ.get("AMLHPC_SOAK") == "1" else 2
PLAY = [{
    "name": "The pair gate only", "hosts": "aml_nodes", "gather_facts": False,
    "tasks": [{"name": "Pair gate | Run the gate's rounds",
               "ansible.builtin.include_role": {"name": "amlhpc.azureml.healthcheck", "tasks_from": "pairs"}},
              {"name": "Pair gate | Say each node's verdict",
               "ansible.builtin.debug": {"msg": "{{ inventory_hostname }} pair_link {{ (healthcheck_checks | "
                                                "selectattr('check', 'equalto', 'pair_link') | first).status }}"}}],
}]


def gate(inv: Path, playbook: Path, log: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """The gate's play run in a project folder of the test's own, beside its log."""
    project = make_project_copy(log.parent / "project")
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), str(playbook)], cwd=project, env=project_env(project),
                         capture_output=True, text=True, timeout=600, check=False)
    log.write_text(res.stdout + res.stderr)
    out = res.stdout
    assert "Show the rounds, pairs and figures" in out, out[-6000:] + res.stderr[-2000:]
    shown = out[out.index("Show the rounds, pairs and figures"):]
    header = re.search(r'"pair gate: (\S+) over (\d+) node\(s\), (\d+) round\(s\)', shown)
    return res, {"rounds": int(header.group(3)), "verdict": re.search(r'"verdict: (.*?)"', shown).group(1),
                 "pairs": re.findall(r'"(round \d+: \S+ <-> \S+: .*?)"', shown),
                 "retested": re.findall(r'"(retested: .*?)"', shown)}


def test_healthy_gates_under_load_blame_nobody_and_two_bad_nodes_are_both_named(tmp_path):
    with Twin(NODES, tmp_path / "twin", prefix="hg-rounds", base_port=free_base_port(NODES, 53200, 53300)) as twin:
        inv = user_inventory(twin, tmp_path / "inventory", "hr", {
            "ansible_ssh_private_key_file": str(twin.key), "healthcheck_pair_seconds": 2,
            "healthcheck_pair_thresholds": {"default": {"iperf3": 0.05}},
            # The twin's links are two shared cores, not ND's fabric: in a clean-clone CI run on a
            # loaded 2-core machine a node burning a core read 0.62-0.65 x the median with two
            # partners (3.21-3.42 against 4.90-5.25 Gb/s) and was blamed under the 0.7 default,
            # in 1 of 10 gates. 0.5, as a user sets it for VMs whose links share their CPUs.
            "healthcheck_pair_relative": 0.5})
        playbook = tmp_path / "pairs.yml"
        playbook.write_text(yaml.safe_dump(PLAY, sort_keys=False))
        names = [f"hr-{i}" for i in range(NODES)]

        # Healthy gates while hr-1 and hr-3 burn a core each.
        burners = [twin.ranked()[i] for i in (1, 3)]
        for node in burners:
            twin.exec(node, "sh", "-c", "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $! > /tmp/burn.pid")
        started = time.monotonic()
        try:
            runs = []
            for i in range(HEALTHY_GATES):
                res, got = gate(inv, playbook, tmp_path / f"healthy-{i}.log")
                assert res.returncode == 0, res.stdout[-4000:]
                assert got["verdict"] == "every node passed", (i, got)
                assert dict(re.findall(r'"(hr-\d+) pair_link (pass|fail|skip)"', res.stdout)) == dict.fromkeys(
                    names, "pass"), res.stdout[-3000:]
                runs.append(got)
        finally:
            for node in burners:
                twin.exec(node, "sh", "-c", "kill $(cat /tmp/burn.pid)")
        healthy_wall = time.monotonic() - started
        assert all(r["rounds"] <= 4 for r in runs), runs
        # (How many were retested is the load's doing; none may blame: asserted above.)
        (tmp_path / "healthy.txt").write_text(f"{healthy_wall:.0f} s for {HEALTHY_GATES} gates; "
                                              f"rounds {[r['rounds'] for r in runs]}; "
                                              f"retested {[len(r['retested']) for r in runs]}\n")

        # One slow node and one lossy node, in different round-1 pairs (hr-0 <-> hr-1, hr-2 <-> hr-3).
        slow, lossy = twin.ranked()[1], twin.ranked()[2]
        with slow_link(twin, slow), lossy_link(twin, lossy):
            res, got = gate(inv, playbook, tmp_path / "two-bad.log")
        assert got["verdict"] == "hr-1 (node); hr-2 (node)", got
        assert got["rounds"] <= 4, got
        rows = dict(re.findall(r'"(hr-\d+) pair_link (pass|fail|skip)"', res.stdout))
        assert rows == {n: "fail" if n in ("hr-1", "hr-2") else "pass" for n in names}, rows
        assert all(c["changed"] == 0 for c in recap(res.stdout).values()), recap(res.stdout)
