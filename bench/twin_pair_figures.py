#!/usr/bin/env python3
"""Record the pair gate's readings on the AmlCompute twin: the noise model of
``bench/pair_gate_noise_bench.py`` ("twin").

A twin of ``--nodes`` healthy nodes (tests/twin/cluster.py; iperf3 in the node image) runs
``--rounds`` rounds of pair tests the way the gate runs them: every node in one pair per round,
every pair of a round at once, the first node of a pair serving (``iperf3 -s -1``), the second
running ``iperf3 --bidir -J -t <seconds>`` (the gate's own command lines, pair_tools.iperf3_argv)
and the figure read by the gate's parser (pair_tools.parse_iperf3: the slower direction). The
pairings are random each round. Nothing else is made to run beside it: the load is whatever
else runs on the machine (on the development machine, five other checkouts' tests).

Written to ``--out`` (bench/data/twin_iperf3_pairs.json by default): every reading in Gb/s,
with the CPU, its cores, the load average before and after, and the command.

    AMLHPC_TWIN_NS=gate .venv/bin/python bench/twin_pair_figures.py [--nodes 6] [--rounds 40] [--seconds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
sys.path.insert(0, str(ROOT / "bench"))

import cpumeter  # noqa: E402
from amlhpc.health import pair_tools  # noqa: E402
from twin.cluster import Twin, free_base_port  # noqa: E402


def one_pair(twin: Twin, server, client, port: int, seconds: int) -> dict:
    argv = pair_tools.iperf3_argv("iperf3", "server", "", port, seconds)
    started = twin.exec(server, *argv)
    if started.returncode != 0:
        return {"server": server.container, "client": client.container, "value": None,
                "error": f"server: {started.stderr.strip()}"}
    time.sleep(0.3)
    argv = pair_tools.iperf3_argv("iperf3", "client", server.private_ip, port, seconds)
    res = twin.exec(client, "timeout", "60", *argv, timeout=90)
    value, error = pair_tools.parse_iperf3(res.stdout)
    return {"server": server.container, "client": client.container, "value": value, "error": error}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seconds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "bench" / "data" / "twin_iperf3_pairs.json"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    load_before = os.getloadavg()
    readings = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="twin-pairs-") as tmp, \
            Twin(args.nodes, Path(tmp) / "twin", prefix="pairfig", base_port=free_base_port(args.nodes)) as twin:
        nodes = twin.ranked()
        for r in range(args.rounds):
            order = nodes[:]
            rng.shuffle(order)
            pairs = [(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]
            port = 5400 + r % 100
            with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
                got = list(pool.map(lambda p: one_pair(twin, p[0], p[1], port, args.seconds), pairs))
            for g in got:
                g["round"] = r + 1
            readings += got
            values = [g["value"] for g in got if g["value"] is not None]
            print(f"round {r + 1}: " + ", ".join(f"{v:.2f}" for v in values), flush=True)
    load_after = os.getloadavg()
    values = sorted(g["value"] for g in readings if g["value"] is not None)
    out = {"what": "iperf3 --bidir -J pair readings between healthy twin nodes, Gb/s (the slower direction)",
           "command": " ".join(["AMLHPC_TWIN_NS=" + os.environ.get("AMLHPC_TWIN_NS", ""),
                                ".venv/bin/python bench/twin_pair_figures.py", *sys.argv[1:]]),
           "cpu": cpumeter.cpu_name(), "cores": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
           "load_after": [round(x, 2) for x in load_after], "nodes": args.nodes, "seconds": args.seconds,
           "wall_s": round(time.time() - started, 1), "date": time.strftime("%Y-%m-%d"),
           "readings": [g["value"] for g in readings],
           "errors": [g["error"] for g in readings if g["value"] is None]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    n = len(values)
    print(f"{n} readings, min {values[0]:.3f}, median {values[n // 2]:.3f}, max {values[-1]:.3f} Gb/s; "
          f"load {load_before[0]:.1f} -> {load_after[0]:.1f}; {out['cpu']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
