"""The ssh_trust and beeond plays on the embedded local default: they skip, saying why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def play(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([ANSIBLE_PLAYBOOK, *args], cwd=cwd, capture_output=True, text=True, timeout=180, check=False)


def test_ssh_trust_skips_on_the_local_profile():
    res = play(str(ROOT / "playbooks" / "ssh_trust.yml"), "--diff")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ssh_trust skipped: the local profile is a single node, nothing to trust" in res.stdout
    assert "changed=0" in res.stdout and "failed=0" in res.stdout


def test_beeond_start_and_stop_skip_on_the_local_profile():
    res = play(str(ROOT / "playbooks" / "beeond.yml"), "-e", "beeond_enabled=true")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "beeond skipped: the local profile has no root and no kernel module for BeeGFS" in res.stdout
    assert "changed=0" in res.stdout

    res = play(str(ROOT / "playbooks" / "beeond_stop.yml"), "-e", "beeond_enabled=true")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "beeond stop skipped: the local profile has no BeeOND mount" in res.stdout


def test_beeond_is_off_by_default_and_refuses_an_autoscaling_cluster_first(tmp_path):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  children:\n    aml_nodes:\n      hosts:\n        n0:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
        "          aml_cluster: gpu\n          aml_node_rank: 0\n          aml_private_ip: 10.0.0.4\n"
        "    cluster_gpu:\n      hosts:\n        n0:\n")
    res = play("-i", str(inv), str(ROOT / "playbooks" / "beeond.yml"), "--check")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "beeond skipped: beeond_enabled is false" in res.stdout

    res = play("-i", str(inv), str(ROOT / "playbooks" / "beeond.yml"), "-e", "beeond_enabled=true",
               "-e", "aml_cluster_min_nodes=0", "-e", "aml_cluster_max_nodes=4")
    assert res.returncode != 0
    assert "cluster 'gpu' autoscales (min 0, max 4); BeeOND needs min_nodes == max_nodes" in res.stdout
    # Refused before anything was touched: the refusal is the first task that ran.
    assert "changed=0" in res.stdout and "BeeOND | Set up" not in res.stdout
    assert "Make the apt keyring directory" not in res.stdout
