"""The validate play, run by ansible-playbook on throw-away inventories."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from ansible_cli import ansible_cli
from project_copy import make_project_copy, project_env

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = str(ROOT / "playbooks" / "validate.yml")
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")


def run_validate(tmp_path: Path, hosts: dict) -> subprocess.CompletedProcess:
    inv = {"all": {"children": {"aml_nodes": {"hosts": hosts}}}}
    for hv in hosts.values():
        hv.setdefault("ansible_connection", "local")
        hv.setdefault("ansible_python_interpreter", sys.executable)
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump(inv))
    # In a project of the test's own: a refusal's report page lands there, not in the checkout's outputs/.
    project = make_project_copy(tmp_path / "project")
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(path), PLAYBOOK], cwd=project, env=project_env(project),
                          capture_output=True, text=True, timeout=120, check=False)


def test_local_default_inventory_passes(project):
    res = subprocess.run([ANSIBLE_PLAYBOOK, PLAYBOOK], cwd=project, env=project_env(project), capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "inventory OK: 1 node(s) in cluster(s) local" in res.stdout


def test_bad_inventory_fails_with_the_sentence(tmp_path):
    hosts = {
        "n0": {"aml_cluster": "gpu", "aml_node_rank": 0, "aml_private_ip": "10.0.0.4",
               "aml_cluster_min_nodes": 0, "aml_cluster_max_nodes": 4},
        "n1": {"aml_cluster": "gpu", "aml_node_rank": 1, "aml_private_ip": "10.0.0.5",
               "aml_cluster_min_nodes": 0, "aml_cluster_max_nodes": 4},
    }
    ok = run_validate(tmp_path, hosts)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    for hv in hosts.values():
        hv["beeond_enabled"] = True
    bad = run_validate(tmp_path, hosts)
    assert bad.returncode != 0
    assert "cluster 'gpu' autoscales (min 0, max 4); BeeOND needs min_nodes == max_nodes" in bad.stdout


def _two_nodes(**extra) -> dict:
    return {f"n{i}": {"aml_cluster": "gpu", "aml_node_rank": i, "aml_private_ip": f"10.0.0.{4 + i}",
                      "aml_cluster_min_nodes": 2, "aml_cluster_max_nodes": 2, **extra} for i in range(2)}


def test_data_scope_that_contradicts_the_storage_layout_is_refused(tmp_path):
    # Node-local scratch (BeeOND off) holds each node's shard only: a global scope reads 1/N.
    bad = run_validate(tmp_path, _two_nodes(submit_data_scope="global"))
    assert bad.returncode != 0
    assert "submit_data_scope is 'global' but the data set is staged onto node-local scratch" in bad.stdout
    # BeeOND shows every node the whole set: a node scope reads every file N times.
    bad = run_validate(tmp_path, _two_nodes(submit_data_scope="node", beeond_enabled=True))
    assert bad.returncode != 0
    assert "submit_data_scope is 'node' but BeeOND gives every node the whole data set" in bad.stdout
    # The deprecated name is still checked (it still reaches the job).
    bad = run_validate(tmp_path, _two_nodes(aml_job_data_scope="global"))
    assert bad.returncode != 0 and "submit_data_scope is 'global'" in bad.stdout
    # Agreeing, or left to follow the layout: fine.
    for extra in ({"submit_data_scope": "node"}, {"submit_data_scope": "global", "beeond_enabled": True}, {}):
        ok = run_validate(tmp_path, _two_nodes(**extra))
        assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_stage_layout_that_contradicts_beeond_is_refused(tmp_path):
    # BeeOND's folder is every node's: treated as node-local, the stage would remove the files
    # other nodes' shards hold now.
    bad = run_validate(tmp_path, _two_nodes(stage_shared=False, beeond_enabled=True))
    assert bad.returncode != 0
    assert ("stage_shared is false but BeeOND gives every node one stage folder: a node would remove the "
            "files other nodes' shards hold; drop stage_shared (it follows beeond_enabled)") in bad.stdout
    # Node-local scratch taken for shared: files another node holds now would stay, on two nodes.
    bad = run_validate(tmp_path, _two_nodes(stage_shared=True))
    assert bad.returncode != 0
    assert "stage_shared is true but the data set is staged onto node-local scratch" in bad.stdout
    for extra in ({"stage_shared": False}, {"stage_shared": True, "beeond_enabled": True}, {"beeond_enabled": True}):
        ok = run_validate(tmp_path, _two_nodes(**extra))
        assert ok.returncode == 0, ok.stdout + ok.stderr


def test_beeond_on_a_cluster_of_unknown_size_is_refused(tmp_path):
    hosts = {f"n{i}": {"aml_cluster": "gpu", "aml_node_rank": i, "aml_private_ip": f"10.0.0.{4 + i}",
                       "beeond_enabled": True} for i in range(2)}
    bad = run_validate(tmp_path, hosts)
    assert bad.returncode != 0
    assert "cluster 'gpu': its min/max node counts are unknown" in bad.stdout


def test_an_inventory_without_nodes_is_refused(tmp_path):
    """A cluster not created or scaled to 0 reads as empty (so cluster.yml can act); a run that
    is still without nodes after cluster.yml stops here instead of doing nothing."""
    res = run_validate(tmp_path, {})
    assert res.returncode != 0, res.stdout
    assert "the inventory has no hosts in group 'aml_nodes'" in res.stdout


# ---------------------------------------------------------------------------------------
# Every role variable checked before anything changes (issue 40 item 7, red on 2.1.0)

BAD = {"healthcheck_on_failure": "exlcude", "submit_backend": "azure_ml", "submit_process_count_per_node": -1,
       "healthcheck_spare_nodes": 3, "stage_cap_mbps": -5, "stage_dir": "relative/staged",
       "aml_cluster_manage": True, "aml_cluster_name": "my cluster", "aml_cluster_vm_size": "Standard ND96"}
SENTENCES = [
    "healthcheck: value of healthcheck_on_failure must be one of: stop, exclude, got: exlcude",
    "submit: value of submit_backend must be one of: azure_ai_ml, azureml_core, local, got: azure_ml",
    "submit_process_count_per_node is -1: it must be 1 or more",
    "healthcheck_spare_nodes is 3 but the run has 1 node(s): leave at least one node to train",
    "stage_cap_mbps is -5: it cannot be negative",
    "stage_dir 'relative/staged' is a relative path",
    "aml_cluster_name 'my cluster' is not a name AzureML takes for a compute cluster",
    "aml_cluster_vm_size 'Standard ND96' is not an Azure VM size name",
]


def test_bad_inputs_are_refused_in_check_mode_before_anything_changes(tmp_path, project):
    """The whole run, in check mode, on the local default: every bad input at once, one sentence
    each, from the first play that checks variables: no cluster, node, prepare or stage phase ran."""
    extra = tmp_path / "bad.yml"
    extra.write_text(yaml.safe_dump(BAD))
    res = subprocess.run([ANSIBLE_PLAYBOOK, "site.yml", "--check", "-e", f"@{extra}"], cwd=project,
                         env=project_env(project), capture_output=True,
                         text=True, timeout=300, check=False)
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0, out[-3000:]
    for sentence in SENTENCES:
        assert sentence in out, (sentence, out[-4000:])
    for later in ("PLAY [Cluster", "PLAY [SSH trust", "PLAY [Check the health", "PLAY [Prepare", "PLAY [Stage",
                  "PLAY [Submit"):
        assert later not in out, later
    assert "argument_spec_data" not in out and "Validation of arguments failed" not in out  # no spec dump


def test_good_inputs_pass_and_an_unknown_vm_size_is_a_warning(tmp_path, project):
    extra = tmp_path / "ok.yml"
    extra.write_text(yaml.safe_dump({"aml_cluster_vm_size": "Standard_ND192isr_H300_v9", "stage_cap_mbps": 0,
                                     "healthcheck_on_failure": "exclude", "healthcheck_spare_nodes": 0}))
    res = subprocess.run([ANSIBLE_PLAYBOOK, "playbooks/validate_variables.yml", "--check", "-e", f"@{extra}", "-e",
                          "aml_cluster_manage=true"], cwd=project, env=project_env(project), capture_output=True,
                         text=True, timeout=180, check=False)
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 0, out[-3000:]
    assert "aml_cluster_vm_size 'Standard_ND192isr_H300_v9' is not one of the VM sizes this collection knows" in out


def test_a_mistyped_variable_is_named_with_its_file_and_the_right_name(tmp_path):
    """Issue 49 item 3 (red on 2.2.0): `stage_dri` in group_vars was ignored and the stage wrote
    under the role's default folder; `submit_proces_count_per_node` ran with the default. The
    first stops the run (it decides where data is written), the second is a warning; both name
    the file that set them and the variable meant."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("submit_proces_count_per_node: 2\n")
    warned = run_validate(tmp_path, _two_nodes())
    out = " ".join((warned.stdout + warned.stderr).split())
    assert warned.returncode == 0, out[-3000:]
    assert "submit_proces_count_per_node is no variable of any role (set in " in out, out[-3000:]
    assert "group_vars/all.yml) and is ignored: did you mean submit_process_count_per_node?" in out
    (tmp_path / "group_vars" / "all.yml").write_text("submit_proces_count_per_node: 2\nstage_dri: /data/stage\n")
    bad = run_validate(tmp_path, _two_nodes())
    out = " ".join((bad.stdout + bad.stderr).split())
    assert bad.returncode != 0
    assert ("stage_dri is no variable of any role (set in " in out
            and "group_vars/all.yml), so the role would use its default stage_dir, which decides where data is "
                "written or what is trusted: did you mean stage_dir? Rename it" in out), out[-3000:]
