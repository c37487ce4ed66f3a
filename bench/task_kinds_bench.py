#!/usr/bin/env python3
"""Controller CPU per host-task by kind of task, on N nodes of the AmlCompute twin
(tests/twin/cluster.py, as bench/nodes_phase_bench.py starts it): a module run over ssh
(ansible.builtin.ping, ansible.builtin.command), a task that runs only on the controller
(set_fact, debug, assert), a skipped task (when: false), and a role's argument-spec check
(ansible.builtin.validate_argument_spec with the nccl role's spec and values, what a role's
meta/argument_specs.yml makes Ansible run on every host before the role's tasks).

Each kind is a play of --tasks copies of one task; its CPU (user+sys of the ansible-playbook
process tree, bench/cpumeter.py) less that of the same play with no task, divided by
tasks x nodes, is the cost of one host-task of that kind; beside it, the same for the nodes'
own CPU (the twin's containers, from their cgroups: sshd, sudo, the module's Python). Run each kind --repeat times and
take the lowest (the machine is shared; the lowest is the least disturbed).

    .venv/bin/python bench/task_kinds_bench.py [--nodes 4] [--tasks 20] [--repeat 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import cpumeter  # noqa: E402
from nodes_phase_bench import ANSIBLE_PLAYBOOK, start_twin, write_inventory  # noqa: E402

NCCL_SPEC = yaml.safe_load((ROOT / "roles" / "nccl" / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]
NCCL_DEFAULTS = yaml.safe_load((ROOT / "roles" / "nccl" / "defaults" / "main.yml").read_text())

KINDS: dict[str, dict] = {
    "module: ping": {"ansible.builtin.ping": {}},
    "module: command": {"ansible.builtin.command": {"argv": ["true"]}, "changed_when": False},
    "module: ping, become root": {"ansible.builtin.ping": {}, "become": True},
    # No Python on the node: what an action plugin's probe costs when it reads the node's
    # state with one shell command (ActionBase._low_level_execute_command) instead of a module.
    "raw: cat a file": {"ansible.builtin.raw": "cat /etc/hostname /etc/os-release", "changed_when": False},
    "raw: cat a file, become root": {"ansible.builtin.raw": "cat /etc/hostname /etc/os-release",
                                     "changed_when": False, "become": True},
    "controller: set_fact": {"ansible.builtin.set_fact": {"bench_fact": "{{ inventory_hostname | upper }}"}},
    "controller: debug": {"ansible.builtin.debug": {"msg": "{{ inventory_hostname }} is here"}},
    "controller: assert": {"ansible.builtin.assert": {"that": "inventory_hostname | length > 0", "quiet": True}},
    "skipped (when: false)": {"ansible.builtin.debug": {"msg": "never"}, "when": "bench_never | default(false)"},
    "argument-spec check (nccl's)": {"ansible.builtin.validate_argument_spec": {
        "argument_spec": NCCL_SPEC["options"],
        "provided_arguments": {k: f"{{{{ {k} }}}}" for k in NCCL_SPEC["options"]}}},
}


def playbook(path: Path, task: dict | None, count: int) -> Path:
    tasks = [] if task is None else [dict(name=f"Task {i}", **task) for i in range(count)]
    path.write_text(yaml.safe_dump([{"name": "Bench", "hosts": "aml_nodes", "gather_facts": False,
                                     "vars": {k: v for k, v in NCCL_DEFAULTS.items() if k in NCCL_SPEC["options"]},
                                     "tasks": tasks or [{"name": "Nothing", "ansible.builtin.meta": "noop"}]}],
                                   sort_keys=False))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--prefix", default="perf-kinds")
    ap.add_argument("--only", default="", help="kinds to run, separated by semicolons (default: every kind)")
    args = ap.parse_args()
    cpumeter.become_subreaper()
    print(f"controller: {cpumeter.cpu_name()}; {args.nodes} twin nodes, {args.tasks} tasks a play, "
          f"lowest of {args.repeat}")
    with tempfile.TemporaryDirectory(prefix="amlhpc-kinds-") as tmp:
        tmp_path = Path(tmp)
        cluster = start_twin(args.nodes, tmp_path / "cluster", args.prefix)
        try:
            inv = write_inventory(cluster, args.nodes, tmp_path, {})

            label = f"amlhpc.twin={cluster.prefix}"

            def cpu(task: dict | None) -> tuple[float, float]:
                """(controller CPU, the nodes' CPU) of the play, the run with the least controller CPU."""
                book = playbook(tmp_path / "play.yml", task, args.tasks)
                best = None
                for _ in range(args.repeat):
                    nodes_before = cpumeter.containers_cpu(label) or 0.0
                    m = cpumeter.run([ANSIBLE_PLAYBOOK, "-i", str(inv), str(book)], cwd=ROOT, timeout=1200)
                    nodes = (cpumeter.containers_cpu(label) or 0.0) - nodes_before
                    if m.returncode != 0:
                        sys.exit(f"bench play failed:\n{m.stdout[-3000:]}{m.stderr[-2000:]}")
                    best = (m.cpu, nodes) if best is None or m.cpu < best[0] else best
                return best

            cpu({"ansible.builtin.ping": {}})  # warm the ssh masters and caches
            empty, empty_nodes = cpu(None)
            print(f"{'kind':<32} {'ms CPU per host-task':>20} {'nodes ms per host-task':>22}")
            print(f"{'(play with no task)':<32} {empty:>19.2f}s {empty_nodes:>21.2f}s")
            only = {k.strip() for k in args.only.split(";") if k.strip()}
            unknown = only - set(KINDS)
            if unknown:
                sys.exit(f"unknown kind(s) {sorted(unknown)}: choose from {list(KINDS)}")
            for name, task in KINDS.items():
                if only and name not in only:
                    continue
                ctl, nodes = cpu(task)
                per, per_node = (ctl - empty) / (args.tasks * args.nodes), (nodes - empty_nodes) / (args.tasks * args.nodes)
                print(f"{name:<32} {1000 * per:>20.0f} {1000 * per_node:>22.0f}", flush=True)
        finally:
            cluster.stop()
            cpumeter.close_orphans()
    return 0


if __name__ == "__main__":
    sys.exit(main())
