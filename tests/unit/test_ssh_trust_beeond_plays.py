"""The ssh_trust and beeond plays on the embedded local default: switched off, they end after
validating their arguments; beeond is off by default and refuses an autoscaling cluster."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def play(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([ANSIBLE_PLAYBOOK, *args], cwd=cwd, capture_output=True, text=True, timeout=180, check=False)


def only_the_argument_check_ran(stdout: str, host: str = "local-0") -> bool:
    return re.search(rf"^{host}\s+: ok=1 +changed=0 +unreachable=0 +failed=0 +skipped=0 ", stdout, re.M) is not None


def test_ssh_trust_is_switched_off_on_the_local_default():
    res = play(str(ROOT / "playbooks" / "ssh_trust.yml"), "--diff")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SSH trust | End here where ssh_trust_enabled is false" in res.stdout
    assert only_the_argument_check_ran(res.stdout), res.stdout


def test_beeond_start_and_stop_are_switched_off_on_the_local_default():
    res = play(str(ROOT / "playbooks" / "beeond.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "BeeOND | End here where beeond_enabled is false" in res.stdout
    assert only_the_argument_check_ran(res.stdout), res.stdout

    res = play(str(ROOT / "playbooks" / "beeond_stop.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "BeeOND | End the stop where beeond_enabled is false" in res.stdout
    assert only_the_argument_check_ran(res.stdout), res.stdout


def test_beeond_is_off_by_default_and_refuses_an_autoscaling_cluster_first(tmp_path):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  children:\n    aml_nodes:\n      hosts:\n        n0:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
        "          aml_cluster: gpu\n          aml_node_rank: 0\n          aml_private_ip: 10.0.0.4\n"
        "    cluster_gpu:\n      hosts:\n        n0:\n")
    res = play("-i", str(inv), str(ROOT / "playbooks" / "beeond.yml"), "--check")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "BeeOND | End here where beeond_enabled is false" in res.stdout
    assert only_the_argument_check_ran(res.stdout, "n0"), res.stdout

    res = play("-i", str(inv), str(ROOT / "playbooks" / "beeond.yml"), "-e", "beeond_enabled=true",
               "-e", "aml_cluster_min_nodes=0", "-e", "aml_cluster_max_nodes=4")
    assert res.returncode != 0
    assert "cluster 'gpu' autoscales (min 0, max 4); BeeOND needs min_nodes == max_nodes" in res.stdout
    # Refused before anything was touched: the refusal is the first task that ran.
    assert "changed=0" in res.stdout and "BeeOND | Set up" not in res.stdout
    assert "Make the apt keyring directory" not in res.stdout
