"""The ssh_trust and beeond plays on the embedded local default: switched off, they end
before any host-task (their argument check comes after the switch); beeond's stop ends after
Ansible's argument check; beeond is off by default and refuses an autoscaling cluster."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")


def play(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([ANSIBLE_PLAYBOOK, *args], cwd=cwd, capture_output=True, text=True, timeout=180, check=False)


def no_task_ran(stdout: str, host: str = "local-0") -> bool:
    """The host ran no task at all (a play whose hosts all ended in the strategy lists none)."""
    recap = stdout.split("PLAY RECAP")[-1]
    return re.search(rf"^{host}\s+: ok=[1-9]", recap, re.M) is None and f"skipping: [{host}]" not in stdout


def only_the_argument_check_ran(stdout: str, host: str = "local-0") -> bool:
    return re.search(rf"^{host}\s+: ok=1 +changed=0 +unreachable=0 +failed=0 +skipped=0 ", stdout, re.M) is not None


def test_ssh_trust_is_switched_off_on_the_local_default():
    res = play(str(ROOT / "playbooks" / "ssh_trust.yml"), "--diff")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SSH trust | End here where ssh_trust_enabled is false" in res.stdout
    assert no_task_ran(res.stdout), res.stdout


def test_beeond_start_and_stop_are_switched_off_on_the_local_default():
    res = play(str(ROOT / "playbooks" / "beeond.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "BeeOND | End here where beeond_enabled is false" in res.stdout
    assert no_task_ran(res.stdout), res.stdout

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
    assert no_task_ran(res.stdout, "n0"), res.stdout

    # A refusal writes the run's page: into the test's own folder, not the checkout's outputs/.
    res = play("-i", str(inv), str(ROOT / "playbooks" / "beeond.yml"), "-e", "beeond_enabled=true",
               "-e", "aml_cluster_min_nodes=0", "-e", "aml_cluster_max_nodes=4", "-e", f"amlhpc_project_dir={tmp_path}")
    assert res.returncode != 0
    assert "cluster 'gpu' autoscales (min 0, max 4); BeeOND needs min_nodes == max_nodes" in res.stdout
    # Refused before anything was touched: the refusal is the first task after the argument check.
    assert "changed=0" in res.stdout and "BeeOND | Set up" not in res.stdout
    assert "Make the apt keyring directory" not in res.stdout


def test_roles_switched_on_still_refuse_a_variable_of_the_wrong_type(tmp_path):
    """The argument checks moved after the switch (validate once, ssh_trust once, beeond per
    node) still refuse a wrong type, naming the variable, before any work."""
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  children:\n    aml_nodes:\n      hosts:\n        n0:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
        "          aml_cluster: gpu\n          aml_node_rank: 0\n          aml_private_ip: 10.0.0.4\n"
        "    head:\n      hosts:\n        n0:\n    cluster_gpu:\n      hosts:\n        n0:\n")
    for playbook, extra in (("validate.yml", ["-e", "validate_fail_on_problems=maybe"]),
                            ("ssh_trust.yml", ["-e", "ssh_trust_become=false", "-e", "ssh_trust_scan_retries=many"]),
                            ("beeond.yml", ["-e", "beeond_enabled=true", "-e", "beeond_become=false",
                                            "-e", "aml_cluster_min_nodes=1", "-e", "aml_cluster_max_nodes=1",
                                            "-e", "beeond_autobuild_jobs=lots"])):
        res = play("-i", str(inv), str(ROOT / "playbooks" / playbook), *extra, "-e", f"amlhpc_project_dir={tmp_path}")
        assert res.returncode != 0, playbook + res.stdout
        assert "Validation of arguments failed" in res.stdout, playbook + res.stdout
        assert "changed=0" in res.stdout, playbook + res.stdout


def test_beeond_reads_the_cluster_s_nodes_once_for_the_play(tmp_path):
    """Every node needs its cluster's head and nodefile lines. Reading them per node walked every
    node's hostvars from every node (N x N lookups: at 128 nodes 21 s of controller CPU for that
    one task, 512 nodes about 5.5 CPU minutes); ssh_trust's plan, made once for the play, gives
    each node its cluster's entry. Two clusters: each node gets its own cluster's."""
    inv = tmp_path / "inv.yml"
    hosts = {"a0": ("a", 1, "10.0.0.5"), "a1": ("a", 0, "10.0.0.4"), "b0": ("b", 0, "10.1.0.4"), "b1": ("b", 1, "10.1.0.9")}
    lines = ["all:", "  vars:", "    ansible_connection: local", f"    ansible_python_interpreter: {sys.executable}",
             "  children:", "    aml_nodes:", "      hosts:"]
    for name, (cluster, rank, ip) in hosts.items():
        lines += [f"        {name}:", f"          aml_cluster: {cluster}", f"          aml_node_rank: {rank}",
                  f"          aml_private_ip: {ip}", "          aml_cluster_min_nodes: 2", "          aml_cluster_max_nodes: 2"]
    for cluster in ("a", "b"):
        lines += [f"    cluster_{cluster}:", "      hosts:"] + [f"        {h}:" for h in hosts if h.startswith(cluster)]
    inv.write_text("\n".join(lines) + "\n")
    book = tmp_path / "refuse.yml"
    book.write_text(
        "- hosts: aml_nodes\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.import_role:\n        name: amlhpc.azureml.beeond\n        tasks_from: refuse\n"
        "    - ansible.builtin.debug:\n"
        "        msg: \"NODE {{ inventory_hostname }} head={{ beeond_is_head }} ips={{ beeond_node_ips | join(',') }}\"\n")
    res = play("-i", str(inv), str(book))
    assert res.returncode == 0, res.stdout + res.stderr
    got = sorted(re.findall(r'"NODE (\S+) head=(\w+) ips=(\S+)"', res.stdout))
    assert got == [("a0", "False", "10.0.0.4,10.0.0.5"), ("a1", "True", "10.0.0.4,10.0.0.5"),
                   ("b0", "True", "10.1.0.4,10.1.0.9"), ("b1", "False", "10.1.0.4,10.1.0.9")], res.stdout
    # The nodes of the clusters were read by one host-task for the play, not one per node.
    found = [block for block in res.stdout.split("TASK [") if "in rank order" in block.split("]")[0]]
    assert len(found) == 1, res.stdout
    assert len(re.findall(r"^ok: \[", found[0], re.M)) == 1, found[0]


def test_a_cluster_name_with_hyphens_finds_its_nodes(tmp_path):
    """AzureML's compute names take hyphens (the README's `gpu-a100`); the inventory's group for
    such a cluster is `cluster_gpu_a100` (Ansible's group names take no hyphen). The roles found
    a cluster's nodes by `'cluster_' ~ name`, which names no group: with `gpu-a100` the play
    failed. They ask the inventory's own rule for the group's name."""
    inv = tmp_path / "inv.yml"
    hosts = {"gpu-a100-0": ("gpu-a100", 0, "10.0.0.4"), "gpu-a100-1": ("gpu-a100", 1, "10.0.0.5"),
             "gpu-h100-0": ("gpu-h100", 0, "10.1.0.4"), "gpu-h100-1": ("gpu-h100", 1, "10.1.0.9")}
    lines = ["all:", "  vars:", "    ansible_connection: local", f"    ansible_python_interpreter: {sys.executable}",
             "  children:", "    aml_nodes:", "      hosts:"]
    for name, (cluster, rank, ip) in hosts.items():
        lines += [f"        {name}:", f"          aml_cluster: {cluster}", f"          aml_node_rank: {rank}",
                  f"          aml_private_ip: {ip}", "          aml_cluster_min_nodes: 2", "          aml_cluster_max_nodes: 2"]
    for cluster in ("gpu-a100", "gpu-h100"):
        members = [f"        {h}:" for h in hosts if h.startswith(cluster)]
        lines += [f"    cluster_{cluster.replace('-', '_')}:", "      hosts:"] + members
    inv.write_text("\n".join(lines) + "\n")
    book = tmp_path / "refuse.yml"
    book.write_text(
        "- hosts: aml_nodes\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.import_role:\n        name: amlhpc.azureml.beeond\n        tasks_from: refuse\n"
        "    - ansible.builtin.debug:\n"
        "        msg: \"NODE {{ inventory_hostname }} head={{ beeond_is_head }} ips={{ beeond_node_ips | join(',') }}\"\n")
    res = play("-i", str(inv), str(book))
    assert res.returncode == 0, res.stdout + res.stderr
    got = sorted(re.findall(r'"NODE (\S+) head=(\w+) ips=(\S+)"', res.stdout))
    assert got == [("gpu-a100-0", "True", "10.0.0.4,10.0.0.5"), ("gpu-a100-1", "False", "10.0.0.4,10.0.0.5"),
                   ("gpu-h100-0", "True", "10.1.0.4,10.1.0.9"), ("gpu-h100-1", "False", "10.1.0.4,10.1.0.9")], res.stdout
