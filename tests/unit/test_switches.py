"""The roles know nothing of profiles: each is turned off by its own switch, ends at once
(ansible.builtin.meta: end_role, no task sent to a node), and the report names the switch.

The local default (inventory/local/) is one inventory whose group_vars set those switches.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from amlhpc.report import report
from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")

# The variables of the nodes' roles that switch them off, and of the controller's.
NODE_SWITCHES = ["ssh_trust_enabled", "nvme_raid_enabled", "gpu_clocks_enabled", "nccl_enabled",
                 "beeond_enabled", "healthcheck_enabled"]
CONTROLLER_SWITCHES = ["aml_cluster_manage", "local_blob_enabled"]


def test_no_role_or_playbook_reads_amlhpc_profile():
    readers = [str(p.relative_to(ROOT)) for top in ("roles", "playbooks") for p in sorted((ROOT / top).rglob("*"))
               if p.is_file() and p.suffix in (".yml", ".yaml", ".j2", ".py")
               and "amlhpc_profile" in p.read_text()]
    assert readers == []


def _role_defaults() -> dict[str, tuple[str, object]]:
    found = {}
    for path in sorted(ROOT.glob("roles/*/defaults/main.yml")):
        for key, value in (yaml.safe_load(path.read_text()) or {}).items():
            found[key] = (path.parent.parent.name, value)
    return found


def test_role_defaults_are_an_azureml_nodes():
    defaults = _role_defaults()
    # Every role is on (BeeOND is opt-in; Azurite exists only on the local default) and runs as root.
    assert {k: defaults[k][1] for k in NODE_SWITCHES + CONTROLLER_SWITCHES} == {
        "ssh_trust_enabled": True, "nvme_raid_enabled": True, "gpu_clocks_enabled": True, "nccl_enabled": True,
        "beeond_enabled": False, "healthcheck_enabled": True, "aml_cluster_manage": True, "local_blob_enabled": False}
    assert {k: defaults[k][1] for k in ("ssh_trust_become", "beeond_become", "stage_become", "healthcheck_become",
                                        "gpu_clocks_become", "nccl_become", "stage_azcopy_install")} == dict.fromkeys(
        ("ssh_trust_become", "beeond_become", "stage_become", "healthcheck_become", "gpu_clocks_become",
         "nccl_become", "stage_azcopy_install"), True)
    assert defaults["stage_azcopy_path"][1] == "/usr/local/bin/azcopy"
    assert defaults["prepare_dataset_generate"][1] is False and defaults["prepare_dataset_src"][1] == ""


def test_the_reports_switch_table_matches_the_roles_defaults():
    defaults = _role_defaults()
    for _phase, switch, default, _on_controller in report.SWITCHES:
        assert defaults[switch][1] is default, switch


def test_the_report_play_reads_every_nodes_switch():
    tasks = yaml.safe_load((ROOT / "playbooks" / "tasks" / "report_page.yml").read_text())  # report.yml's page
    summary = next(t for t in tasks if t["name"] == "Report | Summarise the run")
    node_switches = [switch for _p, switch, _d, on_controller in report.SWITCHES if not on_controller]
    assert set(node_switches) <= set(summary["vars"]["_report_keys"])


def test_the_local_default_switches_off_what_a_one_node_rootless_run_cannot_do():
    local = yaml.safe_load((ROOT / "inventory" / "local" / "group_vars" / "all.yml").read_text())
    assert {k: local[k] for k in ("aml_cluster_manage", "ssh_trust_enabled", "nvme_raid_enabled",
                                  "gpu_clocks_enabled", "nccl_enabled", "beeond_enabled")} == dict.fromkeys(
        ("aml_cluster_manage", "ssh_trust_enabled", "nvme_raid_enabled", "gpu_clocks_enabled", "nccl_enabled",
         "beeond_enabled"), False)
    assert local["local_blob_enabled"] is True
    assert not any(local[k] for k in ("ssh_trust_become", "beeond_become", "stage_become", "healthcheck_become"))
    assert local["stage_dir"].startswith("{{ amlhpc_project_dir }}/")
    assert local["stage_azcopy_path"].startswith("{{ amlhpc_project_dir }}/")


def _json_run(tmp_path: Path, playbooks: list[str], inventory: dict, *argv: str) -> dict:
    # What the run writes (the report page, a verdict) goes to the test's folder, not the checkout's outputs/.
    inventory.setdefault("all", {}).setdefault("vars", {}).setdefault("amlhpc_project_dir", str(tmp_path / "project"))
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump(inventory))
    site = tmp_path / "site.yml"
    site.write_text(yaml.safe_dump([{"name": p, "ansible.builtin.import_playbook": str(ROOT / "playbooks" / p)}
                                    for p in playbooks]))
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), str(site), *argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=False,
                         env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    # ansible.cfg's profile_tasks prints its timing lines before the JSON document.
    return json.JSONDecoder().raw_decode(res.stdout[res.stdout.index("{\n"):])[0]


def _switched_off_inventory() -> dict:
    hosts = {f"n{i}": {"aml_node_rank": i, "aml_private_ip": f"10.0.0.{4 + i}"} for i in range(3)}
    return {"all": {
        "children": {"aml_nodes": {"children": {"head": {"hosts": {"n0": None}},
                                                "workers": {"hosts": {"n1": None, "n2": None}}}},
                     "cluster_gpu": {"hosts": dict.fromkeys(hosts)}},
        "hosts": hosts,
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "aml_cluster": "gpu", "aml_node_state": "idle",
                 "aml_cluster_min_nodes": 3, "aml_cluster_max_nodes": 3,
                 # What a user writes to switch the roles off (beeond and local_blob are off by default).
                 "aml_cluster_manage": False, "ssh_trust_enabled": False, "nvme_raid_enabled": False,
                 "gpu_clocks_enabled": False, "nccl_enabled": False, "healthcheck_enabled": False}}}


ROLE_PLAYBOOKS = ["cluster.yml", "nodes.yml", "beeond.yml", "healthcheck.yml", "local_blob.yml", "teardown.yml"]


@pytest.mark.parametrize("check", [False, True], ids=["run", "check_mode"])
def test_a_switched_off_role_sends_no_task_to_any_host(tmp_path, check):
    out = _json_run(tmp_path, ROLE_PLAYBOOKS, _switched_off_inventory(), *(["--check"] if check else []))
    ran: dict[str, set[str]] = {}
    for play in out["plays"]:
        for task in play["tasks"]:
            name = task["task"]["name"]
            if name.startswith("amlhpc.azureml.") and task["hosts"]:
                ran.setdefault(name.split(" : ", 1)[0].removeprefix("amlhpc.azureml."), set()).add(
                    name.split(" : ", 1)[1].split(" - ", 1)[0])
    # A switched-off role ran nothing on a host: no per-host "skipped because ..." task, no
    # skipped task either. beeond and ssh_trust check their arguments after their switch (a
    # check task of their own, run once where the variables are the cluster's), so switched off
    # they run no host-task at all; the roles Ansible checks (the node roles, healthcheck,
    # aml_cluster, local_blob, the stop/reset/teardown entry points) show their argument check
    # only, which runs on the controller.
    assert ran == {
        "nvme_raid": {"Validating arguments against arg spec 'main'"},
        "nccl": {"Validating arguments against arg spec 'main'"},
        "healthcheck": {"Validating arguments against arg spec 'main'"},
        "beeond": {"Validating arguments against arg spec 'stop'"},
        "gpu_clocks": {"Validating arguments against arg spec 'main'", "Validating arguments against arg spec 'reset'"},
        "aml_cluster": {"Validating arguments against arg spec 'main'",
                        "Validating arguments against arg spec 'teardown'"},
        "local_blob": {"Validating arguments against arg spec 'main'", "Validating arguments against arg spec 'stop'"}}
    assert {h: (s["changed"], s["failures"], s["skipped"]) for h, s in out["stats"].items()} == dict.fromkeys(
        ("localhost", "n0", "n1", "n2"), (0, 0, 0))


def test_the_report_names_each_switch_and_the_hosts_it_is_off_on(tmp_path):
    inventory = _switched_off_inventory()
    inventory["all"]["vars"]["healthcheck_enabled"] = True  # on for n0 and n1 ...
    inventory["all"]["hosts"]["n2"]["healthcheck_enabled"] = "no"  # ... off for n2, as a user may write it
    inventory["all"]["hosts"]["n1"]["nccl_enabled"] = True
    out = _json_run(tmp_path, ["report.yml"], inventory)
    summary = next(t for p in out["plays"] for t in p["tasks"] if t["task"]["name"] == "Report | Summarise the run")
    lines = summary["hosts"]["localhost"]["msg"]
    assert [line for line in lines if " skipped " in line] == [
        "cluster: skipped on localhost: aml_cluster_manage is false",
        "ssh_trust: skipped on n0, n1, n2: ssh_trust_enabled is false",
        "nvme_raid: skipped on n0, n1, n2: nvme_raid_enabled is false",
        "gpu_clocks: skipped on n0, n1, n2: gpu_clocks_enabled is false",
        "nccl: skipped on n0, n2: nccl_enabled is false",
        "beeond: skipped on n0, n1, n2: beeond_enabled is false",
        "healthcheck: skipped on n2: healthcheck_enabled is false",
    ]


def test_group_vars_beside_a_real_inventory_do_not_reach_the_local_default(tmp_path):
    # README: a real cluster's settings go in inventory/group_vars/all.yml, beside its
    # *.azureml_compute.yml; the local default is a folder of its own, so they stay out of it.
    inventory = tmp_path / "inventory"
    shutil.copytree(ROOT / "inventory" / "local", inventory / "local")
    (inventory / "group_vars").mkdir()
    (inventory / "group_vars" / "all.yml").write_text("beeond_enabled: true\nnccl_enabled: true\nstage_become: true\n")
    res = subprocess.run([ansible_cli("ansible-inventory"), "-i", str(inventory / "local"),
                          "--host", "local-0"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    local = json.loads(res.stdout)
    assert (local["beeond_enabled"], local["nccl_enabled"], local["stage_become"]) == (False, False, False)
    assert local["aml_cluster"] == "local"
