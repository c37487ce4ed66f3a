#!/usr/bin/env python3
"""Cost of the health role's pair gate (roles/healthcheck/tasks/pairs.yml) on N twin nodes,
side by side with the same role without it (healthcheck_pairs: false), in one run.

For each size (4, 16, 32 by default) on the AmlCompute twin (tests/twin/cluster.py, iperf3 in
the node image): the health role (site.yml --tags healthcheck; mount test off) without the
gate, with the gate on healthy nodes, and with the gate and a slow link on one node
(tests/twin/netfaults.py, tc tbf 10 Mbit/s), each the run with the least controller CPU of
``--repeat`` runs. Printed: wall time, controller CPU seconds (bench/cpumeter.py: the
ansible-playbook tree with its forks and ssh masters), the gate's share (with - without), its
rounds and whether it named the slow node.

The 512-node projection: the gate is ``rounds`` x (one host-task per node in a round, server
or client, plus a run_once judge) plus the probe and the verdict (one host-task per node each),
so its controller CPU is linear in N for a fixed number of rounds; a least-squares line over
the sizes gives CPU(512). Its wall time is the rounds' tests (``healthcheck_pair_seconds`` plus
the connection, every pair at once) plus the controller's CPU spread over its cores:
``rounds x (seconds + 1) + CPU(512) / cores`` on a 4-core controller.

    .venv/bin/python bench/health_gate_bench.py [--sizes 4,16,32] [--repeat 1] [--seconds 2]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "bench"))

import cpumeter  # noqa: E402
from cpumeter import fit  # noqa: E402
from test_multinode import ANSIBLE_PLAYBOOK, user_inventory  # noqa: E402
from twin.cluster import Twin  # noqa: E402
from twin.netfaults import slow_link  # noqa: E402

PROJECTED_NODES = 512
PROJECTED_CORES = 4


def measure(inv: Path, pairs: bool, repeat: int) -> tuple[cpumeter.Measured, dict]:
    """The run with the least controller CPU of ``repeat``, and what its gate printed."""
    best = None
    for _run in range(repeat):
        m = cpumeter.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "site.yml", "--tags", "healthcheck",
                          "-e", f"healthcheck_pairs={'true' if pairs else 'false'}"], cwd=ROOT, timeout=3600)
        cpumeter.close_orphans()
        if best is None or m.cpu < best.cpu:
            best = m
    out = best.stdout
    header = re.search(r'"pair gate: (\S+) over (\d+) node\(s\), (\d+) round\(s\)', out)
    verdict = re.search(r'"verdict: (.*?)"', out)
    return best, {"rounds": int(header.group(3)) if header else 0, "verdict": verdict.group(1) if verdict else "-",
                  "pairs": re.findall(r'"(round \d+: .*?)"', out)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", default="4,16,32")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seconds", type=int, default=2, help="healthcheck_pair_seconds")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    cpumeter.become_subreaper()
    print(f"controller: {cpumeter.cpu_name()}")
    print(f"{'nodes':>5} {'run':<22} {'wall s':>7} {'ctl CPU s':>9} {'rounds':>6}  verdict")
    xs, gate_cpu, rounds_seen = [], [], []
    for index, size in enumerate(sizes):
        with tempfile.TemporaryDirectory(prefix="hg-bench-") as tmp, \
                Twin(size, Path(tmp) / "twin", prefix=f"hg-bench{size}", base_port=53100 + 100 * index) as twin:
            inv = user_inventory(twin, Path(tmp) / "inventory", "hgb", {
                "ansible_ssh_private_key_file": str(twin.key), "healthcheck_fs_path": "",
                "healthcheck_pair_seconds": args.seconds,
                # as tests/integration/test_twin_pair_gate.py: a floor, not the median rule, on shared cores
                "healthcheck_pair_thresholds": {"default": {"iperf3": 0.05}}, "healthcheck_pair_relative": 0})
            base, _unused = measure(inv, False, args.repeat)
            clean, clean_gate = measure(inv, True, args.repeat)
            bad = twin.ranked()[size // 2]
            with slow_link(twin, bad):
                slow, slow_gate = measure(inv, True, args.repeat)
            for label, m, gate in (("without the gate", base, None), ("gate, healthy", clean, clean_gate),
                                   (f"gate, slow hgb-{size // 2}", slow, slow_gate)):
                print(f"{size:>5} {label:<22} {m.wall:>7.1f} {m.cpu:>9.1f} "
                      f"{gate['rounds'] if gate else '-':>6}  {gate['verdict'] if gate else ''}")
            if slow_gate["verdict"] != f"hgb-{size // 2} (node)":
                print(f"      the slow node was not named alone: {slow_gate['pairs']}")
            print(f"{size:>5} the gate's share: healthy {clean.wall - base.wall:+.1f} s wall, "
                  f"{clean.cpu - base.cpu:+.1f} s CPU; one slow node {slow.wall - base.wall:+.1f} s wall, "
                  f"{slow.cpu - base.cpu:+.1f} s CPU")
            xs.append(size)
            gate_cpu.append(slow.cpu - base.cpu)
            rounds_seen.append(slow_gate["rounds"])
    b, slope = fit([float(x) for x in xs], gate_cpu)
    cpu512 = b + slope * PROJECTED_NODES
    rounds = max(rounds_seen)
    wall512 = rounds * (args.seconds + 1) + cpu512 / PROJECTED_CORES
    print(f"gate with one slow node: {slope:.3f} s of controller CPU per node ({b:+.1f} s); "
          f"{PROJECTED_NODES} nodes: {cpu512:.0f} s CPU, {rounds} round(s), about {wall512:.0f} s wall on a "
          f"{PROJECTED_CORES}-core controller (model: rounds x (seconds + 1) + CPU / cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
