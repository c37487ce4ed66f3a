#!/usr/bin/env python3
"""Controller CPU of the stage role's argument check on one node, by data set size.

Every node of the stage play holds ``stage_plan``, the azcopy_shards result, which lists
every blob of the data set (with its expected size and checksum). The stage role is imported
with ``rolespec_validate: false`` and its first task, the azcopy_stage action, checks the
role's variables against ``roles/stage/meta/argument_specs.yml`` in that node's worker
(``plugins/plugin_utils/role_args.py``). Ansible's own check (and this one up to round 7)
templates every variable whole, the plan included: CPU that grows with the whole data set,
on every node. This prints, side by side in one run, with Ansible's real Templar and
ArgumentSpecValidator on the role's real spec and defaults and a plan made by the real
``plan_shards``/``plan_summary``:

  ansible   the variables templated whole, then validated (validate_argument_spec's way)
  now       role_argument_errors: a dict or list whose spec checks only its type is not walked
  shard     what the node's tasks still template per node: its own shard of the plan

per node, and for the play (x nodes). Same verdict both ways: tests/unit/test_role_argument_checks.py.

    .venv/bin/python bench/role_check_bench.py [--sizes 32x192,32x8192,32x65536,512x524288]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "plugins" / "module_utils")]

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # noqa: E402
from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.template import Templar, trust_as_template  # noqa: E402

import cpumeter  # noqa: E402
from amlhpc.shards import Blob, plan_shards, plan_summary  # noqa: E402

STAGE = ROOT / "roles" / "stage"
SPEC_OPTIONS = DataLoader().load_from_file(str(STAGE / "meta" / "argument_specs.yml"))["argument_specs"]["main"]["options"]


def _role_args():
    import importlib.util
    spec = importlib.util.spec_from_file_location("role_args", ROOT / "plugins" / "plugin_utils" / "role_args.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Role:
    _should_validate = False
    _from_files: dict = {}
    _role_path = str(STAGE)

    @staticmethod
    def get_name() -> str:
        return "amlhpc.azureml.stage"


def cpu(fn, repeat: int) -> float:
    """Least CPU seconds of ``repeat`` calls (the machine is shared)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="32x192,32x8192,32x65536,512x524288",
                    help="NODESxFILES, comma-separated (suffix mode up to 64 nodes, balanced above)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    role_args = _role_args()
    defaults = DataLoader().load_from_file(str(STAGE / "defaults" / "main.yml"))
    print(f"controller: {cpumeter.cpu_name()}; CPU = process time, least of {args.repeat}")
    print(f"{'nodes':>5} {'files':>7} | {'ansible ms/node':>15} {'now ms/node':>11} {'shard ms/node':>13} | "
          f"{'ansible s/play':>14} {'now s/play':>10}")
    for size in args.sizes.split(","):
        nodes, files = (int(x) for x in size.lower().split("x"))
        hosts = [f"node-{i}" for i in range(nodes)]
        blobs = [Blob(name=f"train/univ_ics_2019-03_a{i:07d}_{i % 64:03d}.tfrecord.gz", size=4_000_000 + i,
                      raw_size=16_777_216, content_encoding="gzip", raw_sha256=f"{i:064x}") for i in range(files)]
        mode = "suffix" if nodes <= 64 else "balanced"
        plan = plan_summary(plan_shards(hosts, mode, blobs), mode)
        del blobs
        task_vars = {**defaults, "stage_plan": plan, "stage_account_url": "https://acct.blob.core.windows.net",
                     "inventory_hostname": hosts[nodes // 2]}
        templar = Templar(loader=DataLoader(), variables=task_vars)
        action = type("Action", (), {"_task": type("Task", (), {"_role": _Role()})(), "_templar": templar})()

        def ansible_way():
            provided = templar.template({k: task_vars[k] for k in SPEC_OPTIONS if k in task_vars})
            return ArgumentSpecValidator(SPEC_OPTIONS).validate(provided, validate_role_argument_spec=True).error_messages

        assert not ansible_way() and role_args.role_argument_errors(action, task_vars) is None
        shard_expr = trust_as_template("{{ stage_plan.shards[inventory_hostname] | default(omit) }}")
        repeat = args.repeat if files <= 65536 else 1
        old = cpu(ansible_way, repeat)
        new = cpu(lambda: role_args.role_argument_errors(action, task_vars), repeat)
        shard = cpu(lambda: templar.template(shard_expr), repeat)
        print(f"{nodes:>5} {files:>7} | {old * 1e3:>15.1f} {new * 1e3:>11.2f} {shard * 1e3:>13.1f} | "
              f"{old * nodes:>14.1f} {new * nodes:>10.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
