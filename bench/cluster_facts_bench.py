#!/usr/bin/env python3
"""Controller CPU of finding each node's cluster head and nodefile lines, by node count.

The beeond role needs, on every node, its cluster's head and nodefile lines. Up to round 7 each
node read them itself: ``hostvars | amlhpc.azureml.amlhpc_cluster_nodes(groups['cluster_' ~ aml_cluster])``,
a hostvars lookup of every node of the cluster from every node (N x N). Now one run-once task
makes ssh_trust's plan (``amlhpc_ssh_trust_plan``) for the play and each node reads its
cluster's entry (roles/beeond/tasks/refuse.yml). This runs, side by side in one run, on N
inventory hosts with a local connection (no node is contacted: every task here is a
controller-side set_fact), three plays of the same hosts:

  baseline   one set_fact per node that reads nothing of the other nodes
  per node   the round-6 tasks (the reference, inlined here)
  once       the role's tasks now

and prints the controller CPU (user+sys of ansible-playbook and its forks) of each, less the
baseline, per play and per node.

With ``--known-hosts``, the same for ssh_trust's known_hosts block: up to round 8 each node's
task sorted the head's whole ``ssh-keyscan`` output (3 keys of every node) into its block
(``amlhpc_known_hosts_block``), O(N) per node; now one run-once task sorts it per cluster
(roles/ssh_trust/tasks/head.yml) and each node reads its cluster's lines. The scan output here
is made of random keys of the real sizes (ed25519, ecdsa-sha2-nistp256, rsa 3072) for N
private IPs, handed to every play as an extra variable (so the baseline pays for it too).

    .venv/bin/python bench/cluster_facts_bench.py [--sizes 32,128,256] [--known-hosts]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import cpumeter  # noqa: E402

ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
PLAN = ("{{ hostvars | amlhpc.azureml.amlhpc_cluster_nodes(ansible_play_hosts_all | map('extract', hostvars, 'aml_cluster')"
        " | unique | map('regex_replace', '^', 'cluster_') | map('extract', groups) | flatten | unique)"
        " | amlhpc.azureml.amlhpc_ssh_trust_plan }}")
PLAYS = {
    "baseline": [{"name": "Name", "ansible.builtin.set_fact": {"beeond_is_head": "{{ aml_node_rank == 0 }}"}}],
    "per node": [
        {"name": "Find", "ansible.builtin.set_fact": {
            "beeond_cluster_nodes": "{{ hostvars | amlhpc.azureml.amlhpc_cluster_nodes(groups['cluster_' ~ aml_cluster]) }}"}},
        {"name": "Name", "ansible.builtin.set_fact": {
            "beeond_is_head": "{{ inventory_hostname == beeond_cluster_nodes[0].inventory_hostname }}",
            "beeond_node_ips": "{{ beeond_cluster_nodes | amlhpc.azureml.amlhpc_nodefile_lines }}"}}],
    "once": [
        {"name": "Find", "ansible.builtin.set_fact": {"beeond_plan": PLAN}, "run_once": True},
        {"name": "Name", "ansible.builtin.set_fact": {
            "beeond_is_head": "{{ inventory_hostname == beeond_plan[aml_cluster].head }}",
            "beeond_node_ips": "{{ beeond_plan[aml_cluster].ips }}"}}],
}


BLOCK = "amlhpc.azureml.amlhpc_known_hosts_block(ssh_trust_plan[aml_cluster].ips, ['ed25519', 'ecdsa', 'rsa'])"
BLOCK_ONCE = "amlhpc.azureml.amlhpc_known_hosts_block(item.item.value.ips, ['ed25519', 'ecdsa', 'rsa'])"
KNOWN_HOSTS_PLAYS = {
    "baseline": [{"name": "Read", "ansible.builtin.set_fact": {"node_known_hosts_lines": "{{ [aml_private_ip] }}"}}],
    "per node": [{"name": "Read", "ansible.builtin.set_fact": {"node_known_hosts_lines": (
        "{{ ((ssh_trust_scans.results | selectattr('item.key', 'equalto', aml_cluster) | first).stdout | "
        + BLOCK + ").lines }}")}}],
    "once": [
        {"name": "Sort", "ansible.builtin.set_fact": {"ssh_trust_host_keys": (
            "{{ ssh_trust_host_keys | default({}) | combine({item.item.key: item.stdout | " + BLOCK_ONCE + "}) }}")},
         "loop": "{{ ssh_trust_scans.results }}", "run_once": True},
        {"name": "Read", "ansible.builtin.set_fact": {"node_known_hosts_lines": "{{ ssh_trust_host_keys[aml_cluster].lines }}"}}],
}


def scan_vars(nodes: int) -> dict:
    """ssh_trust_plan and ssh_trust_scans as head.yml registers them, for one cluster of N nodes."""
    ips = [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(nodes)]
    sizes = {"ssh-ed25519": 51, "ecdsa-sha2-nistp256": 104, "ssh-rsa": 407}  # key blob bytes
    lines = []
    for ip in ips:
        lines.append(f"# {ip}:22 SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.6")
        lines.extend(f"{ip} {kind} {base64.b64encode(os.urandom(n)).decode()}" for kind, n in sizes.items())
    plan = {"head": "node-0", "ips": ips, "hosts": [f"node-{i}" for i in range(nodes)]}
    return {"ssh_trust_plan": {"gpu": plan},
            "ssh_trust_scans": {"results": [{"item": {"key": "gpu", "value": plan}, "stdout": "\n".join(lines)}]}}


def inventory(path: Path, nodes: int) -> Path:
    hosts = {f"node-{i}": {"aml_cluster": "gpu", "aml_node_rank": i, "aml_private_ip": f"10.0.{i // 250}.{i % 250 + 1}",
                           "aml_node_id": f"tvmps_{i:032x}_d", "ansible_host": "127.0.0.1", "ansible_port": 50000 + i}
             for i in range(nodes)}
    path.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local"}, "children": {
        "aml_nodes": {"hosts": hosts}, "cluster_gpu": {"hosts": dict.fromkeys(hosts)}}}}))
    return path


def cpu_of(argv: list[str], cwd: Path = ROOT) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False,
                         env=dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal"))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode:
        sys.exit(res.stdout[-2000:] + res.stderr[-2000:])
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="32,128,256")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each play; the least CPU is kept")
    ap.add_argument("--known-hosts", action="store_true", help="ssh_trust's known_hosts block instead of BeeOND's plan")
    args = ap.parse_args()
    plays = KNOWN_HOSTS_PLAYS if args.known_hosts else PLAYS
    print(f"controller: {cpumeter.cpu_name()}; CPU = user+sys of ansible-playbook and its forks, least of {args.repeat}")
    print(f"{'nodes':>5} | {'baseline s':>10} | {'per node: s':>11} {'ms/node':>8} | {'once: s':>8} {'ms/node':>8}")
    with tempfile.TemporaryDirectory(prefix="amlhpc-cfb-") as tmp:
        for nodes in (int(s) for s in args.sizes.split(",")):
            inv = inventory(Path(tmp) / f"inv{nodes}.yml", nodes)
            extra_vars = []
            if args.known_hosts:
                (Path(tmp) / "scan.json").write_text(json.dumps(scan_vars(nodes)))
                extra_vars = ["-e", f"@{Path(tmp) / 'scan.json'}"]
            cpu = {}
            for label, tasks in plays.items():
                book = Path(tmp) / "play.yml"
                book.write_text(yaml.safe_dump([{"name": label, "hosts": "aml_nodes", "gather_facts": False,
                                                 "tasks": tasks}], sort_keys=False))
                cpu[label] = min(cpu_of([ANSIBLE_PLAYBOOK, "-i", str(inv), str(book), *extra_vars])
                                 for _ in range(args.repeat))
            extra = {k: cpu[k] - cpu["baseline"] for k in ("per node", "once")}
            print(f"{nodes:>5} | {cpu['baseline']:>10.1f} | {extra['per node']:>11.1f} {1e3 * extra['per node'] / nodes:>8.0f} | "
                  f"{extra['once']:>8.1f} {1e3 * extra['once'] / nodes:>8.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
