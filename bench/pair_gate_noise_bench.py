#!/usr/bin/env python3
"""The pair gate against noise: its own logic (module_utils/amlhpc/health/pair_gate.py: ``start`` and
``advance``, as the healthcheck role drives them) run many times against noise models made of
recorded figures, at N = 4 ... 512 nodes. Printed per model and N:

* **false blame**: the share of runs in which a healthy node fails its ``pair_link`` check
  (named, or undecided), every node healthy and 2 % of readings dipping transiently;
* **detection**: one node at half bandwidth (and one at a quarter), the same dips: the share of
  runs that name it and nobody else;
* **N/8 bad**: N/8 nodes at half bandwidth (N >= 8): the share of runs naming exactly them;
* **rounds**: the most rounds any run took.

Noise models (each reading = the pair's figure x per-reading noise, x a dip factor drawn from
U(0.1, 0.9) in ``--dip`` of the readings; a pair's figure is its slower node's):

* ``nd-a100-nccl``: two-node all_reduce_perf busbw of ND A100 v4 at 8 GB, 187.6 GB/s ("Running
  GPU Enabled HPC Applications on Azure Machine Learning Platform", Azure HPC blog: 187.67
  out-of-place and 187.51 in-place between two Standard_ND96asr_v4 nodes), the gate's floor
  148 GB/s;
* ``nd-h100-ibwb``: ib_write_bw GPU-direct of ND H100 v5, 390.98 Gb/s (Azure/azurehpc-health-
  checks, distributed_nhc/README.md, "Example Logs from Real Tests": 390.98, 390.98, 390.99,
  390.98 Gbps on four HCA pairs of one node), the gate's floor 380 Gb/s;
* ``nd-h100-nccl``: two-node all_reduce busbw of 8 x H100 + 8 x NDR per node, 435 GB/s at 1 GB
  (drmysore/nebius-h100-16gpu-benchmark, README.md: 434.99 GB/s; not Azure: no Azure
  two-node ND H100 v5 figure was found), the gate's floor 304 GB/s.
  These published spreads are below 0.1 % within a run; each model takes 1 % per node and 1 %
  per reading (log-normal), ten times that, so that it errs toward noise; ``nd-h100-ibwb`` takes
  0.5 % and 0.5 %: its floor sits 2.8 % under the published figure, and a model noisier than
  that (4 sigma) would make healthy nodes slow by the floor's own rule.
* ``twin``: iperf3 between healthy AmlCompute-twin nodes on this machine's shared cores, as
  recorded by bench/twin_pair_figures.py (bench/data/twin_iperf3_pairs.json): a round of the
  gate draws one recorded round's level (the geometric mean of its three pairs, run at once),
  each reading that level x a recorded ratio of a reading to its round's level. No floor
  (the role's default for iperf3); ``twin-floor`` is the same with the floor the twin tests
  set (0.05 Gb/s); ``twin-iid`` draws every reading from all recorded ones alike (the
  replay of issue 42, harsher than the twin: its rounds move together).

    .venv/bin/python bench/pair_gate_noise_bench.py [--runs 1000] [--runs-512 3000] [--sizes 4,5,8,16,32,64,128,256,512]
        [--models nd-a100-nccl,nd-h100-ibwb,nd-h100-nccl,twin,twin-floor,twin-iid] [--dip 0.02] [--json out.json]
        [--compare <a checkout of another version, e.g. git worktree add /tmp/v210 2.1.0>]
    .venv/bin/python bench/pair_gate_noise_bench.py --small [--runs 60] [--runs-512 100] [--models steady,twin]

``--small`` (issue 50): N = 2 ... 16 with 1 ... N/2 nodes at 0.35x and at 0.5x, placed one per
round-1 pair, packed into the fewest pairs, or at random in turn, no floor; per cell the share
of runs that are exact (the bad nodes fail, nobody else, nothing undecided), that name a healthy
node, that pass a bad node silently (no "cannot tell"), that end undecided or "cannot tell",
and the most rounds; then healthy 512-node clusters with the dips.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
sys.path.insert(0, str(ROOT / "bench"))

import cpumeter  # noqa: E402
from amlhpc.health import pair_gate, pair_gate_report  # noqa: E402


def load_gate(checkout: str):
    """pair_gate.py of another checkout (``--compare``), as a package of its own name."""
    folder = Path(checkout) / "plugins" / "module_utils" / "amlhpc"
    spec = importlib.util.spec_from_file_location("amlhpc_compare", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    package = importlib.util.module_from_spec(spec)
    sys.modules["amlhpc_compare"] = package
    spec.loader.exec_module(package)
    return importlib.import_module("amlhpc_compare.pair_gate")


TWIN = json.loads((ROOT / "bench" / "data" / "twin_iperf3_pairs.json").read_text())["readings"]
TWIN_ROUNDS = [TWIN[i:i + 3] for i in range(0, len(TWIN) - 2, 3)]
# A round's level is the geometric mean of its pairs (not their median, which would make one
# ratio in three exactly 1 and the model tighter than the twin).
TWIN_LEVELS = [statistics.geometric_mean(r) for r in TWIN_ROUNDS]
TWIN_RATIOS = [v / statistics.geometric_mean(r) for r in TWIN_ROUNDS for v in r]

MODELS = {
    "nd-a100-nccl": {"tool": "nccl", "nominal": 187.6, "floor": 148.0, "node": 0.01, "read": 0.01},
    "nd-h100-ibwb": {"tool": "ib_write_bw", "nominal": 390.98, "floor": 380.0, "node": 0.005, "read": 0.005},
    "nd-h100-nccl": {"tool": "nccl", "nominal": 435.0, "floor": 304.0, "node": 0.01, "read": 0.01},
    "twin": {"tool": "iperf3", "twin": "rounds", "floor": None},
    "twin-floor": {"tool": "iperf3", "twin": "rounds", "floor": 0.05},
    "twin-iid": {"tool": "iperf3", "twin": "iid", "floor": None},
}


def run_gate(model: dict, n: int, bad: dict[int, float], dip: float, rng: random.Random, gate=pair_gate) -> dict:
    """One gate over ``n`` nodes; ``bad`` maps a node's index to its bandwidth factor."""
    nodes = [f"n{i:03d}" for i in range(n)]
    index = {name: i for i, name in enumerate(nodes)}
    node_factor = [rng.lognormvariate(0, model.get("node", 0.0)) * bad.get(i, 1.0) for i in range(n)]
    state = gate.start(nodes, model["tool"], minimum=model["floor"])
    while not state["done"]:
        level = rng.choice(TWIN_LEVELS) if model.get("twin") == "rounds" else 1.0
        figures = {}
        for a, b in state["next"]:
            slower = min(node_factor[index[a]], node_factor[index[b]])
            values = []
            for _reading in range(state.get("next_readings", 1)):  # 2.1.0 read each pair once
                if model.get("twin") == "rounds":
                    v = level * rng.choice(TWIN_RATIOS)
                elif model.get("twin") == "iid":
                    v = rng.choice(TWIN)
                else:
                    v = model["nominal"] * rng.lognormvariate(0, model["read"])
                v *= slower
                if rng.random() < dip:
                    v *= rng.uniform(0.1, 0.9)
                values.append(v)
            figures[b] = {"value": max(values), "values": values, "error": ""}
        state = gate.advance(state, figures)
    # An older checkout's pair_gate.py (--compare) shows its own verdicts; this one's are pair_gate_report's.
    node_checks = getattr(gate, "node_checks", None) or pair_gate_report.node_checks
    failing = {name for name, checks in node_checks(state).items() if checks[0]["status"] == "fail"}
    return {"failing": {index[x] for x in failing}, "rounds": len(state["rounds"])}


def measure(model: dict, name: str, n: int, args: argparse.Namespace, gate) -> dict:
    """One row: the false-blame, detection and N/8 runs of ``gate`` (the same seed for every gate)."""
    rng = random.Random(f"{args.seed}-{name}-{n}")
    runs = args.runs_512 if n >= 512 else args.runs
    false = rounds = 0
    for _run in range(runs):
        got = run_gate(model, n, {}, args.dip, rng, gate)
        false += bool(got["failing"])
        rounds = max(rounds, got["rounds"])
    found = {}
    for label, factor in (("half", 0.5), ("quarter", 0.25)):
        hits = 0
        for _run in range(args.runs):
            who = rng.randrange(n)
            got = run_gate(model, n, {who: factor}, args.dip, rng, gate)
            hits += got["failing"] == {who}
            rounds = max(rounds, got["rounds"])
        found[label] = hits
    many = None
    if n >= 8:
        many = 0
        for _run in range(args.runs):
            who = set(rng.sample(range(n), n // 8))
            got = run_gate(model, n, dict.fromkeys(who, 0.5), args.dip, rng, gate)
            many += got["failing"] == who
            rounds = max(rounds, got["rounds"])
    return {"model": name, "n": n, "runs": runs, "false_blame": false, "detect_runs": args.runs,
            "half_named": found["half"], "quarter_named": found["quarter"], "n8_named": many, "max_rounds": rounds}


SMALL_MODELS = {
    # A steady fabric with no floor (iperf3 on a size without one, or healthcheck_pair_relative
    # alone): 1 % per node and per reading, as the ND models above.
    "steady": {"tool": "iperf3", "nominal": 10.0, "floor": None, "node": 0.01, "read": 0.01},
    "twin": MODELS["twin"],
}
PLACEMENTS = ("apart", "together", "random")


def placed(n: int, k: int, how: str, rng: random.Random) -> set[int]:
    """``k`` bad nodes placed adversarially: one in each round-1 pair (``apart``: the first
    nodes of pairs 1, 2, ...; round 1 then reads a bad node in k pairs), in as few round-1
    pairs as they fill (``together``), or anywhere (``random``)."""
    if how == "apart":
        return {2 * i for i in range(k)}
    if how == "together":
        return set(range(k))
    return set(rng.sample(range(n), k))


def small_cell(model: dict, name: str, n: int, k: int, factor: float, args: argparse.Namespace) -> dict:
    """One cell of the small-N sweep: ``runs`` gates of ``n`` nodes with ``k`` bad at ``factor``."""
    rng = random.Random(f"{args.seed}-{name}-{n}-{k}-{factor}")
    got = {"exact": 0, "healthy_named": 0, "bad_passed": 0, "undecided": 0, "rounds": 0}
    for run in range(args.runs):
        bad = placed(n, k, PLACEMENTS[run % len(PLACEMENTS)], rng)
        state = gate_run(model, n, dict.fromkeys(bad, factor), args.dip, rng)
        checks = {int(node[1:]): c[0] for node, c in pair_gate_report.node_checks(state).items()}
        named = {int(node[1:]) for node in state.get("blamed") or {}}
        unsure = bool(state.get("cannot_tell") or state.get("undecided"))
        failing = {i for i, c in checks.items() if c["status"] == "fail"}
        got["exact"] += failing == bad and not unsure
        got["healthy_named"] += bool(named - bad)
        got["bad_passed"] += any(checks[i]["status"] == "pass" for i in bad) and not state.get("cannot_tell")
        got["undecided"] += unsure
        got["rounds"] = max(got["rounds"], len(state["rounds"]))
    return {"model": name, "n": n, "bad": k, "factor": factor, "runs": args.runs, **got,
            "decidable": n >= 3 and 2 * k < n and k > 0}


def gate_run(model: dict, n: int, bad: dict[int, float], dip: float, rng: random.Random) -> dict:
    """:func:`run_gate`'s gate, its whole state."""
    holder: dict = {}

    class Keep:  # the gate's functions, keeping the last state
        def __getattr__(self, attr):
            return getattr(pair_gate, attr)

        @staticmethod
        def advance(state, figures):
            holder["state"] = pair_gate.advance(state, figures)
            return holder["state"]

        @staticmethod
        def start(*a, **kw):
            holder["state"] = pair_gate.start(*a, **kw)
            return holder["state"]

    run_gate(model, n, bad, dip, rng, Keep())
    return holder["state"]


def small(args: argparse.Namespace) -> int:
    """The small-N sweep (``--small``): N = 2 ... 16, 1 ... N/2 bad nodes at 0.35x and 0.5x, and
    healthy 512-node clusters with dips."""
    started, cpu0 = time.time(), time.process_time()
    print(f"CPU: {cpumeter.cpu_name()}; dips: {100 * args.dip:g} % of readings x U(0.1, 0.9); "
          f"{args.runs} runs per cell, bad nodes placed {'/'.join(PLACEMENTS)} in turn")
    print(f"{'model':<7} {'N':>3} {'bad':>3} {'x':>5} {'exact':>7} {'healthy named':>14} {'bad passed':>11} "
          f"{'undecided':>10} {'rounds':>6}")
    out = []
    for name in args.models.split(","):
        for n in range(2, 17):
            for k in range(0, n // 2 + 1):
                for factor in ((0.35, 0.5) if k else (1.0,)):
                    row = small_cell(SMALL_MODELS[name], name, n, k, factor, args)
                    out.append(row)
                    keys = ("exact", "healthy_named", "bad_passed", "undecided")
                    pct = {key: 100 * row[key] / row["runs"] for key in keys}
                    print(f"{name:<7} {n:>3} {k:>3} {factor:>5} {pct['exact']:>6.1f}% {pct['healthy_named']:>13.1f}% "
                          f"{pct['bad_passed']:>10.1f}% {pct['undecided']:>9.1f}% {row['rounds']:>6}"
                          + ("" if n >= 3 and 2 * k < n else "  (tie or one pair: the readings cannot decide)"),
                          flush=True)
    rng = random.Random(f"{args.seed}-512")
    false = 0
    for _run in range(args.runs_512):
        state = gate_run(SMALL_MODELS["steady"], 512, {}, args.dip, rng)
        false += any(c[0]["status"] == "fail" for c in pair_gate_report.node_checks(state).values())
    print(f"steady  512 healthy, {args.runs_512} runs: a healthy node failed in {rate(false, args.runs_512)}")
    print(f"{time.time() - started:.0f} s wall, {time.process_time() - cpu0:.0f} s CPU")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpumeter.cpu_name(), "dip": args.dip, "rows": out,
                                               "n512_false": false, "n512_runs": args.runs_512}, indent=1))
    return 0


def rate(hits: int, runs: int) -> str:
    """A share with its 95 % upper bound where no run hit (3 / runs, the rule of three)."""
    if hits == 0:
        return f"0 (< {100 * 3 / runs:.2g} %)"
    return f"{100 * hits / runs:.3g} %"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--runs-512", type=int, default=3000, help="runs of the false-blame case at 512 nodes")
    parser.add_argument("--sizes", default="4,5,8,16,32,64,128,256,512")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--dip", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", default="")
    parser.add_argument("--compare", default="", help="another checkout (e.g. a worktree of 2.1.0): its gate "
                                                      "runs the same runs, printed below each row")
    parser.add_argument("--small", action="store_true", help="the small-N sweep: N = 2 ... 16 with 1 ... N/2 bad "
                        "nodes placed adversarially (models: steady, twin)")
    args = parser.parse_args()
    if args.small:
        if args.models == ",".join(MODELS):
            args.models = ",".join(SMALL_MODELS)
        return small(args)
    gates = [("this", pair_gate)] + ([("compare", load_gate(args.compare))] if args.compare else [])
    sizes = [int(s) for s in args.sizes.split(",")]
    started, cpu0 = time.time(), time.process_time()
    print(f"CPU: {cpumeter.cpu_name()}; dips: {100 * args.dip:g} % of readings x U(0.1, 0.9)")
    print(f"{'model':<14} {'N':>4} {'false blame':>16} {'half bw named':>15} {'quarter named':>15} "
          f"{'N/8 half named':>15} {'max rounds':>10}")
    out = []
    for name in args.models.split(","):
        model = MODELS[name]
        for n in sizes:
            for label, gate in gates:
                row = measure(model, name, n, args, gate)
                row["gate"] = label
                out.append(row)
                many = row["n8_named"]
                print(f"{name if label == 'this' else '  (' + label + ')':<14} {n:>4} "
                      f"{rate(row['false_blame'], row['runs']):>16} "
                      f"{100 * row['half_named'] / args.runs:>13.1f} % {100 * row['quarter_named'] / args.runs:>13.1f} % "
                      f"{'-' if many is None else f'{100 * many / args.runs:.1f} %':>15} {row['max_rounds']:>10}",
                      flush=True)
    print(f"{time.time() - started:.0f} s wall, {time.process_time() - cpu0:.0f} s CPU")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpumeter.cpu_name(), "dip": args.dip, "rows": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
