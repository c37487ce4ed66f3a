"""playbooks/cluster.yml and cluster_teardown.yml, run by ansible-playbook (no Azure here:
the module itself is tested in tests/unit/plugins/modules against faked SDKs)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_cli import ansible_cli
from ansible_compat import squashed
from project_copy import make_project_copy, project_env

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")


PROJECT = ROOT


@pytest.fixture(autouse=True)
def _own_project(tmp_path, monkeypatch):
    """Each test runs the plays in a project of its own: a refusal's report page and the
    inventory's pins land there, not in the checkout's outputs/ and .cache/."""
    monkeypatch.setattr(sys.modules[__name__], "PROJECT", make_project_copy(tmp_path / "project"))


def play(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([ANSIBLE_PLAYBOOK, *argv], cwd=PROJECT, env=project_env(PROJECT), capture_output=True,
                          text=True, timeout=180, check=False)


def test_the_local_default_leaves_the_cluster_alone():
    # The local default sets aml_cluster_manage: false: the role ends after validating its arguments.
    res = play("playbooks/cluster.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "AML cluster | End here where aml_cluster_manage is false" in res.stdout
    assert "Check that the cluster and its workspace are named" not in res.stdout
    assert re.search(r"^localhost\s+: ok=1 +changed=0 ", res.stdout, re.M), res.stdout
    res = play("playbooks/cluster_teardown.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "AML cluster teardown | End here where aml_cluster_manage is false" in res.stdout
    assert "Scale the cluster to 0" not in res.stdout


def test_unnamed_cluster_fails_with_the_fix():
    res = play("playbooks/cluster.yml", "-e", "aml_cluster_manage=true")
    assert res.returncode != 0
    assert "set aml_cluster_name, aml_cluster_resource_group and aml_cluster_workspace_name" in res.stdout


def test_wrong_types_fail_before_any_task():
    res = play("playbooks/cluster.yml", "-e", "aml_cluster_manage=true", "-e", "aml_cluster_node_count=four")
    assert res.returncode != 0
    assert "aml_cluster_node_count" in res.stdout and "Validating arguments" in res.stdout
    res = play("playbooks/cluster.yml", "-e", "aml_cluster_manage=true", "-e", "aml_cluster_sdk=v3")
    assert res.returncode != 0 and "aml_cluster_sdk" in res.stdout


def test_tags():
    res = play("playbooks/cluster.yml", "--list-tags")
    assert "TAGS: [cluster]" in res.stdout
    res = play("playbooks/cluster_teardown.yml", "--list-tags")
    assert "TAGS: [teardown]" in res.stdout


def _plugin_inventory(tmp_path: Path, nodes: list, **extra) -> Path:
    import json

    import yaml
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    path = tmp_path / "t.azureml_compute.yml"
    # The validate play reads host vars only and connects to no node: no host keys to scan.
    path.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file", "cluster": "gpu",
                                    "nodes_file": "nodes.json", "admin_user": "azureuser", "known_hosts": False,
                                    **extra}))
    return path


def test_plugin_inventory_through_the_validate_play(tmp_path):
    """The plugin's host vars are what roles/validate checks (ranks, IPs, states, autoscaling)."""
    import json
    nodes = json.loads((ROOT / "tests/fixtures/azureml/list_nodes_gpu4.json").read_text())
    env_args = ("-e", "beeond_enabled=true")
    ok = play("-i", str(_plugin_inventory(tmp_path, nodes, min_nodes=4, max_nodes=4)), "playbooks/validate.yml",
              *env_args)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "inventory OK: 4 node(s) in cluster(s) gpu" in ok.stdout
    autoscaling = play("-i", str(_plugin_inventory(tmp_path, nodes, min_nodes=0, max_nodes=4)),
                       "playbooks/validate.yml", *env_args)
    assert autoscaling.returncode != 0
    assert "cluster 'gpu' autoscales (min 0, max 4); BeeOND needs min_nodes == max_nodes" in autoscaling.stdout
    nodes[1]["nodeState"] = "unusable"
    kept = play("-i", str(_plugin_inventory(tmp_path, nodes, exclude_states=[])), "playbooks/validate.yml")
    assert kept.returncode != 0 and "are not usable" in kept.stdout
    left_out = play("-i", str(_plugin_inventory(tmp_path, nodes)), "playbooks/validate.yml")
    assert left_out.returncode == 0 and "inventory OK: 3 node(s)" in left_out.stdout
    # The plugin's warning (wrapped at 80 columns by ansible-core 2.18).
    assert squashed(f"{nodes[1]['nodeId']} (unusable)") in squashed(left_out.stderr + left_out.stdout)


def _module_run(res: subprocess.CompletedProcess, task: str) -> dict:
    import json
    data = json.loads(res.stdout[res.stdout.index("\n{") + 1:])  # after -vvv's lines
    (result,) = [t["hosts"]["localhost"] for p in data["plays"] for t in p["tasks"] if task in t["task"]["name"]]
    return result


def test_the_role_manages_the_cluster_through_azure_ai_ml_by_default(tmp_path):
    """azureml-core (SDK v1) is out of support since 2026-06-30: with aml_cluster_sdk not set,
    the cluster play and the teardown ask aml_compute_cluster for azure-ai-ml. A service
    principal without its secret stops the module before it connects to anything."""
    key = tmp_path / "id.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFAKE amlhpc@controller\n")
    env = {k: v for k, v in project_env(PROJECT).items() if not k.startswith("AZURE_")}
    env.update(ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.junit",
               JUNIT_OUTPUT_DIR=str(tmp_path / "junit"), ANSIBLE_INJECT_INVOCATION="true")
    extra = ["-e", "aml_cluster_manage=true", "-e", "aml_cluster_name=gpu", "-e", "aml_cluster_resource_group=rg-hpc",
             "-e", "aml_cluster_workspace_name=ws-hpc", "-e", f"aml_cluster_ssh_public_key_file={key}",
             "-e", "aml_cluster_auth_source=service_principal", "-e", "aml_cluster_client_id=app"]
    for playbook, task in (("playbooks/cluster.yml", "at a fixed size with SSH access"),
                           ("playbooks/cluster_teardown.yml", "Scale the cluster to 0")):
        res = subprocess.run([ANSIBLE_PLAYBOOK, playbook, "--check", "-vvv", *extra], cwd=PROJECT, env=env,
                             capture_output=True, text=True, timeout=180, check=False)
        assert res.returncode != 0, res.stdout[-3000:]
        result = _module_run(res, task)
        assert result["invocation"]["module_args"]["sdk"] == "azure-ai-ml", result
        assert "auth_source service_principal needs" in result["msg"], result


def test_an_empty_plugin_inventory_names_its_file_and_the_fix_that_applies(tmp_path):
    """-i is already a *.azureml_compute.yml file whose cluster lists no node: the run stops
    naming that file, and names playbooks/cluster.yml only where aml_cluster_manage lets it act."""
    path = _plugin_inventory(tmp_path, [], allow_empty=True)
    off = play("-i", str(path), "playbooks/validate.yml", "-e", "aml_cluster_manage=false")
    said = squashed(off.stdout + off.stderr)
    assert off.returncode != 0, said[-3000:]
    assert squashed(f"the inventory {path} lists no usable node") in said, said[-3000:]
    assert squashed("point -i at") not in said
    assert squashed("aml_cluster_manage is false, so nothing here scales it: scale the cluster up in AzureML") in said
    on = play("-i", str(path), "playbooks/validate.yml", "-e", "aml_cluster_manage=true")
    assert on.returncode != 0
    assert squashed("playbooks/cluster.yml creates or scales the cluster") in squashed(on.stdout + on.stderr)
