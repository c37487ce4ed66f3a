#!/usr/bin/env python3
"""Controller CPU of templating each node role's one task per node, with and without the
arguments that hand a variable on resolved as the variable (plugins/plugin_utils/task_args.py).

On a rerun every node's worker does this once per role: Ansible's real ``Task.post_validate``
(what TaskExecutor runs in the worker before the action) of the role's real task, read from
its YAML like Ansible reads it, with the role defaults and the host variables of a node of the
twin. Printed, side by side in one process, per role:

  ansible    ansible-core's own templating of every argument (``ActionBase.finalize_task_arg``)
  passed-on  the collection's: an argument that is exactly ``{{ name }}`` is the variable's value,
             templated (no Jinja compile for a plain value)

the templates compiled and the CPU ms per node-task, and whether the arguments came out equal
(they must: tests/unit/test_task_args.py runs this with --json and fails where not).

    .venv/bin/python bench/task_args_bench.py [--repeat 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from ansible.plugins.loader import init_plugin_loader  # noqa: E402

init_plugin_loader([str(ROOT / ".cache" / "collections")])

from ansible._internal._templating import _engine  # noqa: E402  # pylint: disable=wrong-import-position
from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.playbook.play import Play  # noqa: E402
from ansible.plugins.action import ActionBase  # noqa: E402
from ansible.vars.manager import VariableManager  # noqa: E402

from ansible_collections.amlhpc.azureml.plugins.plugin_utils import task_args  # noqa: E402

# (role, tasks file, the module of the role's one task per node)
TASKS = [
    ("ssh_trust", "node.yml", "amlhpc.azureml.ssh_trust_node"),
    ("nvme_raid", "main.yml", "amlhpc.azureml.nvme_raid"),
    ("gpu_clocks", "pin.yml", "amlhpc.azureml.nvidia_gpu_clocks"),
    ("nccl", "config.yml", "amlhpc.azureml.nccl_config"),
    ("healthcheck", "main.yml", "amlhpc.azureml.healthcheck_node"),
    ("stage", "stage.yml", "amlhpc.azureml.azcopy_stage"),
]

# A node of the twin as the inventory plugin and the earlier plays of site.yml leave it.
HOST = {
    "inventory_hostname": "n0", "aml_cluster": "gpu", "aml_vm_size": "Standard_ND96asr_v4",
    "groups": {"all": ["n0", "n1"], "aml_nodes": ["n0", "n1"], "head": ["n0"], "cluster_gpu": ["n0", "n1"]},
    "ssh_trust_keypairs": {"results": [{"item": {"key": "gpu"}, "public_key": "ssh-ed25519 AAAAC3Nz head"}]},
    "ssh_trust_head_keys": {}, "ssh_trust_plan": {"gpu": {"ips": ["10.0.0.4", "10.0.0.5"], "head": "n0"}},
    "ssh_trust_host_keys": {"gpu": {"lines": ["10.0.0.4 ssh-ed25519 AAAAC3Nz n0"]}},
    "stage_plan": {"shards": {"n0": {"rank": 0, "files": ["a.tfrecord.gz"], "bytes": 1}}, "known_names": "", "num_hosts": 2},
    "stage_auth": "msi", "beeond_mount_point": "/mnt/scratch",
}


def role_task(loader: DataLoader, role: str, tasks_file: str, module: str) -> dict:
    """The role's task that runs ``module``, as Ansible reads it (its templates trusted)."""
    for task in loader.load_from_file(str(ROOT / "roles" / role / "tasks" / tasks_file), trusted_as_template=True):
        if module in task:
            return task
    raise LookupError(f"{module} not in roles/{role}/tasks/{tasks_file}")


def variables(loader: DataLoader, task: dict) -> dict:
    """Every role's defaults, the node's host variables and the task's own vars."""
    out: dict = {}
    for defaults in sorted(ROOT.glob("roles/*/defaults/main.yml")):
        out.update(loader.load_from_file(str(defaults), trusted_as_template=True) or {})
    return {**out, **HOST, **(task.get("vars") or {})}


class Compiles:
    """Counts the templates and expressions the engine compiles."""

    def __init__(self) -> None:
        self.count = 0
        self._saved = (_engine.TemplateEngine._compile_template, _engine.TemplateEngine._compile_expression)

    def __enter__(self) -> "Compiles":
        template, expression = self._saved

        def counted(original):
            def compile_(engine, source, options):
                self.count += 1
                return original(engine, source, options)
            return compile_

        _engine.TemplateEngine._compile_template = counted(template)
        _engine.TemplateEngine._compile_expression = counted(expression)
        return self

    def __exit__(self, *exc) -> None:
        _engine.TemplateEngine._compile_template, _engine.TemplateEngine._compile_expression = self._saved


def post_validated(loader: DataLoader, task_ds: dict, task_vars: dict, passed_on: bool) -> tuple[dict, int, float]:
    """(the task's arguments after Task.post_validate, templates compiled, CPU seconds)."""
    saved = task_args.PassedOnArgs.__dict__["finalize_task_arg"]
    if not passed_on:  # ansible-core's own, for the same action classes
        task_args.PassedOnArgs.finalize_task_arg = classmethod(ActionBase.finalize_task_arg.__func__)
    try:
        play = Play.load({"name": "p", "hosts": "all", "gather_facts": False, "tasks": [task_ds]},
                         loader=loader, variable_manager=VariableManager(loader=loader))
        task = play.get_tasks()[0][0]
        templar = _engine.TemplateEngine(loader=loader, variables=task_vars)
        with Compiles() as compiles:
            start = time.process_time()
            task.post_validate(templar)
            cpu = time.process_time() - start
        return dict(task.args), compiles.count, cpu
    finally:
        task_args.PassedOnArgs.finalize_task_arg = saved


def comparable(args: dict) -> str:
    """The arguments as the module gets them (JSON)."""
    return json.dumps(args, sort_keys=True, default=str)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=50, help="post_validate runs per role and way (default 50)")
    parser.add_argument("--json", action="store_true", help="one JSON object per role, for the test")
    opts = parser.parse_args()
    loader = DataLoader()
    rows = []
    for role, tasks_file, module in TASKS:
        task_ds = role_task(loader, role, tasks_file, module)
        task_vars = variables(loader, task_ds)
        row: dict = {"role": role, "module": module}
        for way, passed_on in (("ansible", False), ("passed_on", True)):
            args, compiles, _ = post_validated(loader, task_ds, task_vars, passed_on)
            cpu = [post_validated(loader, task_ds, task_vars, passed_on)[2] for _ in range(opts.repeat)]
            row[way] = {"args": comparable(args), "compiles": compiles, "cpu_ms": 1000 * sorted(cpu)[len(cpu) // 2]}
        row["equal"] = row["ansible"]["args"] == row["passed_on"]["args"]
        rows.append(row)
    if opts.json:
        print(json.dumps(rows))
        return 0
    cpu_name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), "?")
    print(f"Task.post_validate of each role's task per node, median of {opts.repeat} (CPU: {cpu_name})")
    print(f"{'role':<12} {'compiles':>17} {'CPU ms per node':>22}  args equal")
    print(f"{'':<12} {'ansible':>8} {'passed':>8} {'ansible':>10} {'passed':>10}")
    for row in rows:
        a, p = row["ansible"], row["passed_on"]
        print(f"{row['role']:<12} {a['compiles']:>8} {p['compiles']:>8} {a['cpu_ms']:>10.2f} {p['cpu_ms']:>10.2f}  {row['equal']}")
    total_a = sum(r["ansible"]["cpu_ms"] for r in rows)
    total_p = sum(r["passed_on"]["cpu_ms"] for r in rows)
    print(f"{'per node':<12} {'':>17} {total_a:>10.2f} {total_p:>10.2f}"
          f"  ({(total_a - total_p) * 512 / 1000:.1f} s less controller CPU for 512 nodes)")
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
