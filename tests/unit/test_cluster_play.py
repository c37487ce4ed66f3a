"""playbooks/cluster.yml and cluster_teardown.yml, run by ansible-playbook (no Azure here:
the module itself is tested in tests/unit/plugins/modules against faked SDKs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def play(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([ANSIBLE_PLAYBOOK, *argv], cwd=ROOT, capture_output=True, text=True, timeout=180)


def test_local_profile_skips_with_one_line():
    res = play("playbooks/cluster.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "cluster: skipped: the local profile has no AmlCompute cluster to manage" in res.stdout
    assert "changed=0" in res.stdout
    res = play("playbooks/cluster_teardown.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "cluster teardown: skipped: the local profile has no AmlCompute cluster to scale down" in res.stdout


def test_unnamed_cluster_fails_with_the_fix():
    res = play("playbooks/cluster.yml", "-e", "amlhpc_profile=azure")
    assert res.returncode != 0
    assert "set aml_cluster_name, aml_cluster_resource_group and aml_cluster_workspace_name" in res.stdout


def test_wrong_types_fail_before_any_task():
    res = play("playbooks/cluster.yml", "-e", "amlhpc_profile=azure", "-e", "aml_cluster_node_count=four")
    assert res.returncode != 0
    assert "aml_cluster_node_count" in res.stdout and "Validating arguments" in res.stdout
    res = play("playbooks/cluster.yml", "-e", "amlhpc_profile=azure", "-e", "aml_cluster_sdk=v3")
    assert res.returncode != 0 and "aml_cluster_sdk" in res.stdout


def test_tags():
    res = play("playbooks/cluster.yml", "--list-tags")
    assert "TAGS: [cluster]" in res.stdout
    res = play("playbooks/cluster_teardown.yml", "--list-tags")
    assert "TAGS: [teardown]" in res.stdout
