"""Issue 42, items 1-3: the pair gate confirms before it blames, judges against a statistic, and
names any number of bad nodes in a bounded number of rounds (module_utils/amlhpc/health/pair_gate.py).

The figures replayed here are the issue's (a healthy 5-node twin whose round-1 pair read 0.61
Gb/s against 0.5 x 1.37) and the twin's recorded readings
(``fixtures/pair_gate/twin_iperf3_readings.json``, written by ``bench/twin_pair_figures.py``:
iperf3 between healthy twin nodes on this machine's shared cores). Every test drives the gate's
own functions (``start``/``advance``, through ``tests/gate_sim.py``), as the role does.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from amlhpc.health import pair_gate, pair_gate_report
from gate_sim import simulate

FIX = Path(__file__).parent / "fixtures" / "pair_gate"
TWIN = json.loads((FIX / "twin_iperf3_readings.json").read_text())["readings"]


def names(n: int, prefix: str = "n") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def failing(state) -> list[str]:
    return sorted(n for n, checks in pair_gate_report.node_checks(state).items() if checks[0]["status"] == "fail")


def drive(state, figure):
    """Run the gate to its end; ``figure(a, b, round)`` is the pair's reading."""
    while not state["done"]:
        number = len(state["rounds"]) + 1
        state = pair_gate.advance(state, {b: {"value": figure(a, b, number), "error": ""} for a, b in state["next"]})
    return state


def test_one_low_reading_is_retested_and_cleared_not_blamed():
    # The issue's run: 5 healthy twin nodes, round 1 read 0.61 against 1.37 and both ends then
    # passed with other partners; 2.1.0 named h-1 "link to h-0" on that one reading.
    state = pair_gate.start([f"h-{i}" for i in range(5)], "iperf3", relative=0.5)
    # 0.61 below 0.5 x the upper median (1.37) failed round 1 in 2.1.0; a low reading makes a
    # suspect at most, never a verdict.
    state = drive(state, lambda a, b, n: 0.61 if {a, b} == {"h-0", "h-1"} and n == 1 else 1.37 if n == 1 else 1.25)
    assert failing(state) == [], pair_gate_report.summary(state)
    # Even a pair far below the rest is retested, not blamed, when it passes again later.
    state = drive(pair_gate.start([f"h-{i}" for i in range(5)], "iperf3"),
                  lambda a, b, n: 0.2 if {a, b} == {"h-0", "h-1"} and n == 1 else 1.3)
    assert failing(state) == [], pair_gate_report.summary(state)
    lines = pair_gate_report.summary(state)
    assert any(line.startswith("retested: h-0 <-> h-1") for line in lines), lines
    assert lines[-1] == "verdict: every node passed", lines


def test_a_node_is_named_only_after_two_distinct_known_good_partners():
    slow = {"n002"}
    state = simulate(names(8), lambda a, b: 0.05 if {a, b} & slow else 10.0)
    blamed = state["blamed"]["n002"]
    assert blamed["kind"] == "node"
    # Two distinct partners, each known good (n003, its round-1 partner, passed with another node).
    assert len(set(blamed["partners"])) >= 2, blamed
    assert all(p in state["good"] for p in blamed["partners"])
    # Every failing reading of it: round 1 once, then three readings beside a known-good node.
    assert [m["readings"] for r in state["rounds"] for m in r["pairs"] if "n002" in (m["a"], m["b"])] == [1, 3]
    assert failing(state) == ["n002"]


def test_a_link_needs_the_same_pair_to_fail_again():
    # n002 <-> n003 is slow every time: named as the link, after a retest of that pair.
    state = simulate(names(8), lambda a, b: 0.05 if {a, b} == {"n002", "n003"} else 10.0)
    assert failing(state) == ["n003"] and state["blamed"]["n003"]["kind"] == "link"
    tests = [m for r in state["rounds"] for m in r["pairs"] if {m["a"], m["b"]} == {"n002", "n003"}]
    assert len(tests) == 2 and all(m["status"] == "fail" for m in tests)
    # Slow only in round 1 (a transient dip): retested, cleared.
    state = drive(pair_gate.start(names(8), "iperf3"),
                  lambda a, b, n: 0.05 if {a, b} == {"n002", "n003"} and n == 1 else 10.0)
    assert failing(state) == [] and state["cleared"] == [["n002", "n003"]]


def twin_noise(seed: int):
    rng = random.Random(seed)
    return lambda a, b: rng.choice(TWIN)


def test_the_issue_replay_healthy_twin_figures_blame_nobody():
    # 2.1.0: a healthy node blamed in about 28 % of runs at N = 5 and 86 % at N = 64 with the
    # twin's figures and the defaults. Seeded, so the test is exact.
    for n, runs in ((5, 300), (64, 100)):
        blamed = sum(bool(failing(simulate(names(n), twin_noise(seed)))) for seed in range(runs))
        assert blamed == 0, (n, blamed, runs)


def test_two_bad_nodes_in_different_first_round_pairs_are_both_named():
    # The issue's 5-node run: one slow node and one lossy one in different round-1 pairs, a
    # floor as the twin tests set it. 2.1.0: all five "undecided" under "every link passed".
    for bad in ({"h-1": 0.009, "h-2": 0.0008}, {"h-0": 0.009, "h-3": 0.0008}, {"h-1": 0.009, "h-3": 0.0008}):
        state = simulate([f"h-{i}" for i in range(5)],
                         lambda a, b, bad=bad: min(bad.get(a, 2.0), bad.get(b, 2.0)), minimum=0.05)
        assert failing(state) == sorted(bad), (bad, pair_gate_report.summary(state))
        assert all(state["blamed"][n]["kind"] == "node" for n in bad)
        assert len(state["rounds"]) <= 4
        assert pair_gate_report.summary(state)[-1] == "verdict: " + "; ".join(f"{n} (node)" for n in sorted(bad))


def test_too_few_good_nodes_says_so_and_the_summary_agrees():
    # Four nodes, three bad: no known-good pair of partners is left for anyone.
    bad = {"n000", "n001", "n002"}
    state = simulate(names(4), lambda a, b: 0.01 if {a, b} & bad else 2.0, minimum=0.05)
    checks = pair_gate_report.node_checks(state)
    undecided = [n for n, c in checks.items() if c[0]["status"] == "fail" and "undecided" in c[0]["reason"]]
    assert undecided, pair_gate_report.summary(state)
    assert all("too few known-good nodes" in checks[n][0]["reason"] for n in undecided)
    verdict = pair_gate_report.summary(state)
    assert "every node passed" not in "\n".join(verdict)
    assert all(n in verdict[-1] or any(n in line for line in verdict if line.startswith("undecided"))
               for n in failing(state))


@st.composite
def clusters(draw):
    n = draw(st.integers(min_value=8, max_value=96))
    bad = draw(st.sets(st.integers(min_value=0, max_value=n - 1), min_size=1, max_size=max(1, n // 8)))
    speed = draw(st.lists(st.floats(min_value=9.0, max_value=11.0), min_size=n, max_size=n))
    worse = draw(st.lists(st.floats(min_value=0.01, max_value=0.5), min_size=n, max_size=n))
    return n, bad, speed, worse


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_up_to_n_over_8_bad_nodes_named_in_at_most_4_rounds(cluster):
    n, bad, speed, worse = cluster
    nodes = names(n)
    rate = {nodes[i]: speed[i] * (worse[i] if i in bad else 1.0) for i in range(n)}
    state = simulate(nodes, lambda a, b: min(rate[a], rate[b]))
    assert failing(state) == sorted(nodes[i] for i in bad), pair_gate_report.summary(state)
    assert len(state["rounds"]) <= 4
    for r in state["rounds"]:
        ends = [x for m in r["pairs"] for x in (m["a"], m["b"])]
        assert len(ends) == len(set(ends))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=2, max_value=12), st.randoms(use_true_random=False),
       st.floats(min_value=0.0, max_value=1.0))
def test_the_summary_never_contradicts_the_checks(n, rng, low_share):
    nodes = names(n)
    state = simulate(nodes, lambda a, b: rng.choice([0.001, 0.02, 1.0, 5.0]) if rng.random() < low_share
                     else 5.0, minimum=0.05)
    lines = pair_gate_report.summary(state)
    fails = failing(state)
    said = "\n".join(line for line in lines if line.startswith(("verdict:", "undecided:")))
    if fails:
        assert "every node passed" not in said
        assert all(node in said for node in fails), (fails, lines)
    else:
        assert lines[-1] == "verdict: every node passed", lines
