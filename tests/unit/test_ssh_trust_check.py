"""The head's trust check (roles/ssh_trust/tasks/verify.yml), the shell it runs, with a
stand-in ssh on PATH: every node is tried, several at a time (one after the other, 512
nodes took minutes), each one that refuses is named and the check fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def check_script() -> str:
    tasks = yaml.safe_load((ROOT / "roles" / "ssh_trust" / "tasks" / "verify.yml").read_text())
    return next(t for t in tasks if "Check that root" in t["name"])["vars"]["_ssh_trust_check"]


def run_check(tmp_path: Path, ips: list[str], width: int, refuse: str = "") -> subprocess.CompletedProcess:
    """Each stand-in ssh marks that it started, then waits (up to 20 s) until ``width`` of
    them have started: it succeeds only if that many ran at the same time."""
    bin_dir, marks = tmp_path / "bin", tmp_path / "marks"
    bin_dir.mkdir()
    marks.mkdir()
    (bin_dir / "ssh").write_text(f"""#!/bin/sh
for arg; do case "$arg" in root@*) ip=${{arg#root@}} ;; esac; done
touch {marks}/"$ip"
i=0
while [ "$(ls {marks} | wc -l)" -lt {width} ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
[ "$(ls {marks} | wc -l)" -ge {width} ] || {{ echo "only $(ls {marks} | wc -l) at once" >&2; exit 9; }}
[ "$ip" != "{refuse}" ]
""")
    (bin_dir / "ssh").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    return subprocess.run(["sh", "-c", check_script(), "sh", "/root/.ssh/id_rsa", "10", str(width), *ips],
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_nodes_are_checked_several_at_a_time(tmp_path):
    ips = [f"10.0.0.{i}" for i in range(4, 12)]
    res = run_check(tmp_path, ips, width=8)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "marks").iterdir()) == sorted(ips)


def test_a_node_that_refuses_is_named_and_fails_the_check(tmp_path):
    ips = [f"10.0.0.{i}" for i in range(4, 8)]
    res = run_check(tmp_path, ips, width=4, refuse="10.0.0.6")
    assert res.returncode == 1
    assert res.stderr.strip() == "root on the head does not reach 10.0.0.6 without a prompt"


def test_only_a_cluster_with_every_nodes_keys_on_the_controller_is_taken_from_it(tmp_path):
    """The role's own task (roles/ssh_trust/tasks/head.yml): a cluster whose every node has a
    pin (the inventory's aml_host_keys) is kept in ssh_trust_controller_keys (no scan from its
    head); one where a node has none is left out, and its head scans it."""
    import json
    import sys

    from ansible_cli import ansible_cli

    tasks = yaml.safe_load((ROOT / "roles" / "ssh_trust" / "tasks" / "head.yml").read_text())
    take = next(t for t in tasks if t["name"].startswith("SSH trust | Take each cluster's host keys"))
    plan = {"whole": {"ips": ["10.0.0.4", "10.0.0.5"],
                      "pins": [["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5"], ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4"]]},
            "partial": {"ips": ["10.1.0.4", "10.1.0.5"], "pins": [["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6"], []]}}
    playbook = tmp_path / "take.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable, "ssh_trust_plan": plan,
                 "ssh_trust_host_keys_from": "controller", "ssh_trust_host_key_types": ["ed25519"]},
        "tasks": [take, {"ansible.builtin.debug": {"msg": "KEYS={{ ssh_trust_controller_keys | to_json }}"}}]}]))
    res = subprocess.run([ansible_cli("ansible-playbook"), "-i", "localhost,", str(playbook)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    keys = json.loads(res.stdout.split('"KEYS=', 1)[1].split('"\n', 1)[0].encode().decode("unicode_escape"))
    assert list(keys) == ["whole"], keys
    assert keys["whole"] == {"lines": ["10.0.0.4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5",
                                       "10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4"], "missing": []}
