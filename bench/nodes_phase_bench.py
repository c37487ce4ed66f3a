#!/usr/bin/env python3
"""Wall time of the nodes phase (playbooks/nodes.yml: ssh_trust, nvme_raid, gpu_clocks, nccl)
on 1, 4, 16 and 32 Docker containers that stand in for AmlCompute nodes (sshd on
127.0.0.1:<port>, private IPs on their own network, read through the azureml_compute
inventory plugin's nodes_file source). First run and second (idempotent) run.

    .venv/bin/python bench/nodes_phase_bench.py [--sizes 1,4,16,32]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from containers import ContainerCluster  # noqa: E402

ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def run_nodes_phase(inv: Path, env: dict) -> tuple[float, int, int]:
    start = time.monotonic()
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "playbooks/nodes.yml"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - start
    if res.returncode != 0:
        sys.exit(f"nodes.yml failed:\n{res.stdout[-4000:]}")
    changed = sum(int(c) for c in re.findall(r"changed=(\d+)", res.stdout.split("PLAY RECAP")[-1]))
    hosts = len(re.findall(r"^\S+\s+: ok=", res.stdout.split("PLAY RECAP")[-1], re.M))
    return wall, changed, hosts, changed_tasks(res.stdout)


def changed_tasks(output: str) -> list[str]:
    """'task (host)' for every task result reported as changed."""
    out, task = [], ""
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[6:line.rfind("]")]
        elif line.startswith("changed: ["):
            out.append(f"{task} ({line[10:line.index(']')]})")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,16,32")
    args = parser.parse_args()
    print(f"{'nodes':>5} {'start (s)':>10} {'first run (s)':>14} {'changed':>8} {'second run (s)':>15} {'changed':>8}")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="amlhpc-bench-") as tmp:
            tmp_path = Path(tmp)
            cluster = ContainerCluster(size, "amlhpc-bench", tmp_path / "cluster")
            t0 = time.monotonic()
            cluster.start()
            started = time.monotonic() - t0
            try:
                inv_dir = tmp_path / "inventory"
                (inv_dir / "group_vars").mkdir(parents=True)
                nodes_file = cluster.write_nodes_file(tmp_path / "nodes.json")
                inv = inv_dir / "bench.azureml_compute.yml"
                inv.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file",
                                               "cluster": "bench", "nodes_file": str(nodes_file),
                                               "admin_user": "azureuser", "min_nodes": size, "max_nodes": size}))
                (inv_dir / "group_vars" / "all.yml").write_text(yaml.safe_dump({
                    "ansible_ssh_private_key_file": str(cluster.key),
                    "ansible_ssh_common_args": "-o StrictHostKeyChecking=accept-new "
                                               f"-o UserKnownHostsFile={tmp_path / 'known_hosts'}",
                    # the control paths of 32 nodes must stay short and private to this run
                    "ansible_ssh_pipelining": True}))
                env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="true", ANSIBLE_FORCE_COLOR="0")
                first, changed1, hosts, _ = run_nodes_phase(inv, env)
                second, changed2, _, again = run_nodes_phase(inv, env)
                assert hosts == size, f"{hosts} hosts in the recap, expected {size}"
                print(f"{size:>5} {started:>10.1f} {first:>14.1f} {changed1:>8} {second:>15.1f} {changed2:>8}",
                      flush=True)
                for task in again:
                    print(f"      changed again: {task}", flush=True)
            finally:
                cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
