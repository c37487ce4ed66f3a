#!/usr/bin/env python3
"""Controller CPU of a host-task that uses an amlhpc filter, beside one that uses a builtin one.

Ansible looks up a collection's filter by loading every filter file of the collection, in the
worker process of each host-task (plugins/plugin_utils/lazy_logic.py says why). This runs, on N
inventory hosts with a local connection (no node is contacted), plays of one set_fact per host:

  builtin      ``{{ aml_private_ip | upper }}``
  amlhpc       ``{{ [node] | amlhpc.azureml.amlhpc_nodefile_lines }}`` (ssh_trust's logic)
  amlhpc x3    three amlhpc filters of three filter files in one task

and prints the controller CPU (user+sys of ansible-playbook and its forks) per play and the
extra per host-task over ``builtin``. ``--project DIR`` runs the plays in another checkout
(a git worktree of an older commit, with its .cache/collections/ansible_collections/amlhpc/azureml
linked to it), so two trees can be compared one right after the other.

    .venv/bin/python bench/filter_load_bench.py [--nodes 64] [--repeat 3] [--project DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import cluster_facts_bench  # noqa: E402
import cpumeter  # noqa: E402

NODE = "[{'aml_private_ip': aml_private_ip, 'aml_node_rank': aml_node_rank}]"
PLAYS = {
    "builtin": {"x": "{{ aml_private_ip | upper }}"},
    "amlhpc": {"x": "{{ " + NODE + " | amlhpc.azureml.amlhpc_nodefile_lines }}"},
    "amlhpc x3": {"x": "{{ " + NODE + " | amlhpc.azureml.amlhpc_nodefile_lines }}",
                  "y": "{{ aml_cluster | amlhpc.azureml.amlhpc_beeond_autoscale_refusal(2, 2) }}",
                  "z": "{{ false | amlhpc.azureml.amlhpc_data_scope }}"},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each play; the least CPU is kept")
    ap.add_argument("--project", type=Path, default=ROOT, help="the checkout whose collection the plays use")
    args = ap.parse_args()
    print(f"controller: {cpumeter.cpu_name()}; {args.nodes} hosts; project {args.project}; "
          f"CPU = user+sys of ansible-playbook and its forks, least of {args.repeat}")
    with tempfile.TemporaryDirectory(prefix="amlhpc-flb-") as tmp:
        inv = cluster_facts_bench.inventory(Path(tmp) / "inv.yml", args.nodes)
        cpu = {}
        for label, facts in PLAYS.items():
            book = Path(tmp) / "play.yml"
            book.write_text(yaml.safe_dump([{"name": label, "hosts": "aml_nodes", "gather_facts": False,
                                             "tasks": [{"name": "Set", "ansible.builtin.set_fact": facts}]}]))
            cpu[label] = min(cluster_facts_bench.cpu_of([cluster_facts_bench.ANSIBLE_PLAYBOOK, "-i", str(inv), str(book)],
                                                        cwd=args.project) for _ in range(args.repeat))
            extra = cpu[label] - cpu["builtin"]
            print(f"{label:>10}: {cpu[label]:6.2f} s, {1e3 * cpu[label] / args.nodes:5.1f} ms per host-task, "
                  f"{1e3 * extra / args.nodes:+5.1f} ms over builtin", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
