# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The multi-node health gate: pair tests in rounds that name a bad node or link at any scale.

A cluster-wide NCCL run says that *something* is slow, not what. Here every node is tested
against one partner at a time with the field's own two-node tools, every pair of a round at
once:

One reading decides nothing:

* **Round 1** pairs the nodes in order (a perfect matching; with an odd count the last node
  waits), one reading each. A pair that passes makes both its nodes *known good* (a pair's
  figure is bounded by the slower end). The two nodes of a failed pair are *suspects*.
* **Every later round** reads each pair :data:`READINGS` times (the best reading counts, as
  AzNHC retries a check until it passes) and pairs each suspect, most evidence first, with a
  known-good node it has not met. A node is **named** only once it has failed beside
  :data:`CONFIRM` distinct known-good partners (a failure beside a node later found good
  counts); one that passes is good. When both nodes of a failed pair pass with others, the
  **pair itself is retested**: it passes (cleared, and the summary says so) or fails again (the
  **link** between them: the second is named, so leaving it out removes the link).
* Where no known-good partner is free, suspects from different failed pairs meet each other
  (never a pair met before): a pass there finds good nodes. What is still open after
  ``max_rounds`` (:data:`MAX_ROUNDS`) is **undecided**, fails, and one sentence says that too
  few known-good nodes were left; the summary's verdict lists every failing node.

Each pair is judged against the VM size's floor (:data:`PAIR_THRESHOLDS`) and against one
reference of every round so far (:func:`level_reference`: the level more than half the nodes
can have reached, as a fault only slows; then :func:`reference`'s ``relative`` x the median,
lowered where the figures' own robust spread says that is within their noise). Every round
judges the earlier ones again, so a node that passed beside a bad partner is not good for
good. With no floor, up to :data:`CANNOT_TELL_MAX_NODES` nodes, the gate runs until a pair
inside every possible healthy majority is measured; where it cannot (one pair, or
``max_rounds`` spent) it says so and what to set (:func:`cannot_tell`) and the nodes fail as
undecided. Up to N/8 bad nodes are named in at most 4 rounds
(``tests/unit/plugins/module_utils/test_pair_gate_confirm.py``); the false-blame and
detection rates under a noise model made of recorded figures are ``bench/pair_gate_noise_bench.py``'s.

The tool is chosen by what every node has (:func:`choose_tool`): a two-node nccl-tests
``all_reduce_perf`` on GPU nodes, perftest's ``ib_write_bw`` on InfiniBand nodes, ``iperf3``
(TCP, both directions at once) elsewhere.

The gate's state is a plain dict (a fact between the role's rounds): :func:`start`,
:func:`roles` (what each node runs in a round), :func:`advance` (judge a round, work out
:func:`evidence`, :func:`plan` the next). What the gate shows of it (the verdicts as
health.py's check dicts, the summary and the run report's lines) is :mod:`.pair_gate_report`'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from . import health

TOOLS = ("nccl", "ib_write_bw", "iperf3")
UNITS = {"nccl": "GB/s", "ib_write_bw": "Gb/s", "iperf3": "Gb/s"}

# Floors per VM size and tool (None: judged against the pairs' statistic only). Every figure is
# checks.py's VM_THRESHOLDS figure for the size (tests/unit/plugins/module_utils/test_pair_floors.py
# holds the two tables together), from AzNHC, github.com/Azure/azurehpc-health-checks, conf/<size>.conf:
#   ib_write_bw  one HCA port, Gb/s: the conf's check_ib_bw_gdr (from GPU memory) or
#                check_ib_bw_non_gdr (host memory) line, as VM_THRESHOLDS' ib_bw_gbps.
#   nccl         two-node all_reduce_perf bus bandwidth, GB/s: VM_THRESHOLDS'
#                allreduce_cluster_busbw, 80% of the node's AzNHC InfiniBand floor
#                (ports x per-port Gb/s / 8); AzNHC publishes no two-node figure.
#   iperf3       TCP both ways, Gb/s: no published figure; Azure's "expected network
#                bandwidth" of a size is a cap, not a floor, so the relative rule judges.
PAIR_THRESHOLDS: dict[str, dict[str, float | None]] = {
    # nd96asr_v4.conf, nd96amsr_a100_v4.conf: check_ib_bw_gdr 185.0; check_hw_ib 200 mlx5_ib0:1 ... mlx5_ib7:1
    "standard_nd96asr_v4": {"nccl": 148.0, "ib_write_bw": 185.0, "iperf3": None},
    "standard_nd96amsr_a100_v4": {"nccl": 148.0, "ib_write_bw": 185.0, "iperf3": None},
    # nd96isr_h100_v5.conf: check_ib_bw_gdr 380; check_hw_ib 400 mlx5_ib0:1 ... mlx5_ib7:1
    "standard_nd96isr_h100_v5": {"nccl": 304.0, "ib_write_bw": 380.0, "iperf3": None},
    # nd96isr_h200_v5.conf: check_ib_bw_gdr 360; check_hw_ib 400 mlx5_ib0:1 ... mlx5_ib7:1
    "standard_nd96isr_h200_v5": {"nccl": 288.0, "ib_write_bw": 360.0, "iperf3": None},
    # nd40rs_v2.conf: check_ib_bw_non_gdr 78 65536; check_hw_ib 100 mlx5_ib0:1 (one EDR port)
    "standard_nd40rs_v2": {"nccl": 7.8, "ib_write_bw": 78.0, "iperf3": None},
    # nd128isr_ndr_gb200_v6.conf: check_ib_bw_gdr 360; check_hw_ib 400 mlx5_ib0:1 ... mlx5_ib3:1
    "standard_nd128isr_ndr_gb200_v6": {"nccl": 144.0, "ib_write_bw": 360.0, "iperf3": None},
    # nd96isr_mi300x_v5.conf: check_ib_bw_non_gdr 390; check_hw_ib 400 mlx5_ib0:1 ... mlx5_ib7:1.
    # No nccl floor: its all-reduce is RCCL (check_rccl_allreduce 314, one node) and the nccl
    # tool needs nvidia-smi.
    "standard_nd96isr_mi300x_v5": {"nccl": None, "ib_write_bw": 390.0, "iperf3": None},
}
# No source gives a floor for ND GB300 v6 (Azure's size page lists 4 x 800 Gb/s InfiniBand;
# AzNHC has no conf file for it) or for the NC sizes (no InfiniBand pair figure): those, and
# every size with the iperf3 tool, get floor_warning's sentence.


def pair_minimum(vm_size: str | None, tool: str, overrides: Mapping[str, Any] | None = None) -> float | None:
    """The floor of ``tool`` on ``vm_size``; ``overrides`` maps a VM size or ``default`` to
    ``{tool: figure}`` (the role's ``healthcheck_pair_thresholds``)."""
    key = (vm_size or "").strip().lower()
    value = PAIR_THRESHOLDS.get(key, {}).get(tool)
    for name, extra in (overrides or {}).items():
        if name.lower() in ("default", key) and isinstance(extra, Mapping):
            unknown = sorted(set(extra) - set(TOOLS))
            if unknown:
                raise ValueError(f"healthcheck_pair_thresholds['{name}'] has unknown keys {unknown}; "
                                 f"known: {', '.join(TOOLS)}")
            if tool in extra:
                value = extra[tool]
    return None if value in (None, "") else float(value)


def floor_warning(vm_size: str | None, tool: str, overrides: Mapping[str, Any] | None = None) -> str:
    """One sentence where no floor of ``tool`` is known for ``vm_size``: a size outside
    :data:`PAIR_THRESHOLDS` (ND GB300 v6, the NC sizes), a tool the table has no figure of for
    it (iperf3 everywhere, nccl on ND MI300X v5), and no override sets one; else "". No size
    known (the twin): ""."""
    size = (vm_size or "").strip()
    if not size or pair_minimum(vm_size, tool, overrides) is not None:
        return ""
    return (f"no {tool} pair floor is known for {size}: only the pairs' relative rule judges, and where "
            f"it cannot tell the gate says so; set healthcheck_pair_thresholds: "
            f"{{{size}: {{{tool}: <figure>}}}}")


def link_speed_warning(speeds: Mapping[str, float | None]) -> str:
    """One sentence naming the nodes whose pair-test interface reports a lower link speed (Mb/s,
    :func:`.pair_tools.parse_link_speed`) than the speed more than half of the reporting nodes
    share: a link trained down or a bad cable, seen without a byte sent. "" where no speed has
    such a majority. A warning, not a floor: iperf3's figure is not a share of the link's speed
    (Azure caps each size below it; healthy twin pairs read 4 % of theirs under load)."""
    known = {node: float(v) for node, v in speeds.items() if v}
    counts: dict[float, int] = {}
    for value in known.values():
        counts[value] = counts.get(value, 0) + 1
    usual = next((v for v, n in counts.items() if 2 * n > len(known)), None)
    slow = sorted(node for node, v in known.items() if usual is not None and v < usual)
    if not slow:
        return ""
    named = ", ".join(f"{node} ({known[node]:g} Mb/s)" for node in slow)
    return (f"{named} report(s) a lower link speed on the pair-test interface than the {usual:g} Mb/s most "
            f"nodes report (a link trained down or a bad cable): reseat or replace the cable, or leave the "
            f"node out")


def choose_tool(found: Mapping[str, Mapping[str, Any]], preferred: str = "auto") -> tuple[str, str]:
    """``(tool, reason)`` from what each node has (``found[node]``: ``{"nccl": bool,
    "ib_write_bw": bool, "iperf3": bool}``); ``("", reason)`` when no tool is on every node."""
    if not found:
        return "", "no nodes"
    order = TOOLS if preferred in ("", "auto") else (preferred,)
    for tool in order:
        lacking = sorted(node for node, has in found.items() if not has.get(tool))
        if not lacking:
            return tool, f"every node has {tool}" if preferred in ("", "auto") else f"{tool} (healthcheck_pair_tool)"
        if preferred not in ("", "auto"):
            return "", f"healthcheck_pair_tool is {tool} but {', '.join(lacking[:5])} lack(s) it"
    return "", ("no pair-test tool on every node (nccl-tests with mpirun and GPUs, ib_write_bw with an "
                "InfiniBand device, or iperf3): install iperf3 on the nodes to test their links")


# --------------------------------------------------------------------------------------
# Rounds
# --------------------------------------------------------------------------------------
RELATIVE = 0.7        # a pair below this share of the median pair fails (healthcheck_pair_relative)
SPREAD_Z = 4.0        # ... unless the pairs' own spread says that is within their noise
SPREAD_MIN_FIGURES = 8  # fewer figures than this: no spread is estimated (the floor carries)
CONFIRM = 2           # distinct known-good partners a node must fail with before it is named
READINGS = 3          # readings of a pair in every round after the first (best one counts)
MAX_ROUNDS = 4
CONTROL_PAIRS = 16    # at most this many pairs of idle known-good nodes measure the fabric in a later round


def start(nodes: Iterable[str], tool: str, *, minimum: float | None = None, relative: float = RELATIVE,
          max_rounds: int = MAX_ROUNDS, readings: int = READINGS, confirm: int = CONFIRM,
          warnings: Iterable[str] = ()) -> dict[str, Any]:
    """The gate before round 1: its first round's pairs planned (inventory order, one reading
    each); ``warnings`` (:func:`floor_warning`) head its summary."""
    order = list(dict.fromkeys(nodes))
    pairs = [[order[i], order[i + 1]] for i in range(0, len(order) - 1, 2)]
    return {"tool": tool, "unit": UNITS.get(tool, ""), "nodes": order, "minimum": minimum,
            "relative": float(relative), "max_rounds": int(max_rounds), "readings": max(1, int(readings)),
            "confirm": max(2, int(confirm)), "reference": None, "spread": None, "threshold": None,
            "rounds": [], "good": [], "suspects": [], "untested": order[len(pairs) * 2:] if len(order) > 1 else [],
            "blamed": {}, "undecided": [], "links": [], "cleared": [], "next": pairs, "next_readings": 1,
            "done": not pairs, "warnings": [w for w in warnings if w]}


def skipped_state(nodes: Iterable[str], reason: str) -> dict[str, Any]:
    """A gate that does not run (no tool, switched off, one node): every node's check skips."""
    return {"tool": "", "unit": "", "nodes": list(nodes), "rounds": [], "blamed": {}, "next": [],
            "done": True, "skip_reason": reason, "roles": {}, "summary": [f"pair gate skipped: {reason}"]}


READING_PORT_STEP = 100  # reading i of a round uses its port + 100 x i


def client_figures(state: Mapping[str, Any], results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The figures of the round just run from each client's registered result (``value``, the
    best reading, and ``readings``, every reading); one of an earlier round (another port) or
    none at all counts as no result."""
    out: dict[str, dict[str, Any]] = {}
    for node, role in (state.get("roles") or {}).items():
        got = results.get(node)
        if role["role"] != "client" or not isinstance(got, Mapping) or got.get("port") != role["port"]:
            continue
        if got.get("failed") or got.get("unreachable"):
            out[node] = {"value": None, "error": str(got.get("msg") or "the client task failed")}
        else:
            out[node] = {"value": got.get("value"), "values": list(got.get("readings") or []),
                         "error": str(got.get("error") or "")}
    return out


def roles(state: Mapping[str, Any], addresses: Mapping[str, str], port: int = 5201) -> dict[str, dict[str, Any]]:
    """What each node runs in the next round: ``{node: {"role": "server"|"client", "peer",
    "peer_address", "port", "ports"}}`` (the first of a pair serves, the second runs the client
    and reports the figure; ``ports``: one per reading). Nodes not in the round have no entry."""
    readings = max(1, int(state.get("next_readings") or 1))
    ports = [port + READING_PORT_STEP * i for i in range(readings)]
    out: dict[str, dict[str, Any]] = {}
    for a, b in state.get("next") or []:
        out[a] = {"role": "server", "peer": b, "peer_address": str(addresses.get(b, b)), "port": port, "ports": ports}
        out[b] = {"role": "client", "peer": a, "peer_address": str(addresses.get(a, a)), "port": port, "ports": ports}
    return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _log_spread(groups: Iterable[list[float]], within: bool = False) -> tuple[float, int] | None:
    """A robust standard deviation of ln(reading) and how many readings it is made of: 1.4826 x
    the median absolute deviation of each reading from its group's median, or (``within``: small
    groups, the repeated readings of one pair, where a group's own median would add its zero
    deviation) the median absolute difference of every two readings of a group / 0.954 (|X - Y|
    of two normal readings has the median 0.954 sigma). None where no group has two readings."""
    devs: list[float] = []
    readings = 0
    for group in groups:
        logs = [math.log(v) for v in group if v and v > 0]
        if len(logs) < 2:
            continue
        readings += len(logs)
        if within:
            devs += [abs(x - y) / 0.954 for i, x in enumerate(logs) for y in logs[i + 1:]]
        else:
            centre = _median(logs)
            devs += [1.4826 * abs(v - centre) for v in logs]
    return (_median(devs), readings) if devs else None


LOW = "low"  # a pair's status between the two floors: not good, no evidence against anyone


def reference(figures: Iterable[float | None], relative: float,
              repeats: Iterable[Iterable[float]] = (), clean: bool = True) -> dict[str, Any]:
    """The statistic a pair is judged against, over ``figures``: their ``median`` and a robust
    ``spread`` (of ln(reading): bandwidth noise multiplies), and two floors below the median.

    * ``pass_threshold``: ``relative`` x the median, lowered to median x exp(-4 spread) where
      the readings' own spread is that wide. A pair at or above it passes: its nodes are good.
    * ``threshold``: the same with the spread at its upper bound (x 1 + 2 / sqrt(readings): an
      estimate from a few readings is itself uncertain). A pair below it fails: evidence
      against a node. Between the two a pair is ``low``: retested, evidence of nothing.

    A spread wrongly small would blame a healthy node, one wrongly large would pass a slow one
    as good: each decision takes the bound that is safe for it. On a steady fabric (a spread of
    a few per cent) both floors are ``relative`` x the median.

    The spread is the larger of two: that of ``figures`` about their median (from
    :data:`SPREAD_MIN_FIGURES` of them on, and only where they are ``clean``: a sample of the
    fabric, not a round made of suspects, whose faults would widen it and hide themselves) and
    that of the repeated readings of one pair about their own median (``repeats``: the later
    rounds read each pair several times). The second needs no clean sample: a pair with a slow
    node reads low every time and its readings still scatter only by the noise, so at small N,
    where a few figures say nothing, the repeats do. With neither both floors are ``relative``
    x the median."""
    xs = [float(v) for v in figures if v is not None and float(v) > 0]
    empty = {"median": _median(xs) if xs else None, "spread": None, "factor": None, "threshold": None,
             "pass_factor": None, "pass_threshold": None, "figures": len(xs)}
    if not xs or not relative:
        return empty
    median = _median(xs)
    found = [x for x in (_log_spread([xs]) if clean and len(xs) >= SPREAD_MIN_FIGURES else None,
                         _log_spread([list(r) for r in repeats], within=True)) if x is not None]
    spread = max(x[0] for x in found) if found else None
    upper = max(x[0] * (1 + 2 / math.sqrt(x[1])) for x in found) if found else None
    pass_factor = float(relative) if spread is None else min(float(relative), math.exp(-SPREAD_Z * spread))
    factor = float(relative) if upper is None else min(float(relative), math.exp(-SPREAD_Z * upper))
    return {"median": median, "spread": spread, "factor": factor, "threshold": factor * median,
            "pass_factor": pass_factor, "pass_threshold": pass_factor * median, "figures": len(xs)}


def judge(value: float | None, error: str, minimum: float | None, ref: Mapping[str, Any] | float | None,
          relative: float = RELATIVE, unit: str = "") -> tuple[str, str]:
    """``(status, reason)`` of one pair: below the floor ``minimum`` or the relative floor of
    ``ref`` (:func:`reference`'s dict, or a bare median judged with ``relative``) fails, at or
    above both passes, between them it is :data:`LOW`."""
    if value is None:
        return health.FAIL, error or "no figure in the tool's output"
    if minimum is not None and value < minimum:
        return health.FAIL, f"{fig(value)} {unit} is below the floor {minimum:g} {unit}"
    if not isinstance(ref, Mapping):
        t = relative * ref if ref and relative else None
        ref = {"median": ref, "factor": relative, "spread": None, "threshold": t, "pass_factor": relative,
               "pass_threshold": t}
    if ref.get("threshold") and value < ref["threshold"]:
        if ref["factor"] < relative:
            return health.FAIL, (f"{fig(value)} {unit} is below {fig(ref['threshold'])} {unit}, the median pair "
                                 f"({fig(ref['median'])} {unit}) less {SPREAD_Z:g} robust spreads")
        return health.FAIL, (f"{fig(value)} {unit} is below {ref['factor']:g} x the median pair "
                             f"({ref['median']:.2f} {unit})")
    if ref.get("pass_threshold") and value < ref["pass_threshold"]:
        return LOW, (f"{fig(value)} {unit} is between {fig(ref['threshold'])} and {fig(ref['pass_threshold'])} "
                     f"{unit}, within what the pairs' spread leaves unsure: retested")
    return health.PASS, ""


def fig(value: float) -> str:
    """A figure as printed: two decimals, three significant digits below 0.1 (a lossy link's)."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3g}"


def _readings(got: Mapping[str, Any]) -> list[float]:
    values = got.get("values") or []
    if not values and got.get("value") not in (None, ""):
        values = [got["value"]]
    return [float(v) for v in values if v not in (None, "")]


def advance(state: Mapping[str, Any], figures: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Judge the round just run, judge every earlier round again, and plan the next one.

    ``figures[client]`` is ``{"value": float|None, "values": [float], "error": str}`` of the pair
    the client ran (its best reading counts; a pair whose client left no figure fails with "no
    result"). Every pair of every round is judged against one reference, that of all the rounds
    so far (:func:`level_reference`), so a verdict moves when the reference does; what the
    figures say about each node is worked out again from every round (:func:`evidence`)."""
    new = {**state, "rounds": [{**r, "pairs": [dict(m) for m in r["pairs"]]} for r in state["rounds"]]}
    number = len(new["rounds"]) + 1
    measured = []
    for a, b in new["next"]:
        got = figures.get(b) or {}
        values = _readings(got)
        measured.append({"a": a, "b": b, "value": max(values) if values else None, "values": values,
                         "readings": len(values),
                         "error": str(got.get("error") or ("" if got else f"no result from {b}"))})
    new["rounds"].append({"round": number, "pairs": measured, "reference": None})
    ref = level_reference(new["rounds"], new["relative"], new["minimum"])
    for r in new["rounds"]:
        for m in r["pairs"]:
            m["status"], m["reason"] = judge(m["value"], m["error"], new["minimum"], ref, new["relative"], new["unit"])
    new["rounds"][-1]["reference"] = ref
    new["reference"], new["spread"], new["threshold"] = ref["median"], ref["spread"], ref["threshold"]
    ev = evidence(new)
    new.update({"good": ev["good"], "suspects": ev["suspects"], "untested": ev["untested"], "blamed": ev["blamed"],
                "links": ev["links"], "cleared": ev["cleared"]})
    pairs = [] if number >= new["max_rounds"] else plan(new, ev)
    new["next"], new["next_readings"], new["done"] = pairs, new.get("readings", READINGS), not pairs
    new["undecided"] = (ev["suspects"] + ev["untested"]) if not pairs else []
    new["cannot_tell"] = cannot_tell(new) if not pairs else ""
    if new["cannot_tell"]:
        new["undecided"] = [n for n in new["nodes"] if n not in new["blamed"]]
    return new


def level_reference(rounds: Iterable[Mapping[str, Any]], relative: float,
                    minimum: float | None = None) -> dict[str, Any]:
    """The one reference every pair of every round is judged against, from all the rounds so far.

    A fault only slows a node, and a pair reads its slower end, so a node's best pair figure is
    a lower bound of what it can do, and a pair that reads low beside a partner that has shown
    more names the slow end. The fabric's level is the highest figure ``v`` that more than half
    of the nodes can have reached: ``v`` is shown (within the cut, ``relative`` lowered by the
    repeated readings' own spread) by more than half of the nodes whose readings say anything
    about themselves, and the nodes it proves slow (never at the cut, and below it beside a node
    that reached it) are fewer than half. A node whose every pair was with a node proven slow says nothing about
    itself (its best figure is its partner's). :func:`reference` is then taken over every reading
    of every pair of two nodes not proven slow, in every round."""
    tests = [m for r in rounds for m in r["pairs"] if m.get("value")]
    repeats = [list(m.get("values") or []) for r in rounds for m in r["pairs"]]
    best: dict[str, float] = {}
    for m in tests:
        for node in (m["a"], m["b"]):
            best[node] = max(best.get(node, 0.0), float(m["value"]))
    if not best:
        return reference([], relative, repeats)
    factor = reference([1.0], relative, repeats, clean=False)["factor"] or relative or 0.0
    ordered = sorted(set(best.values()), reverse=True)
    upper = sorted(best.values())[len(best) // 2]

    partners: dict[str, set[str]] = {}
    for m in tests:
        partners.setdefault(m["a"], set()).add(m["b"])
        partners.setdefault(m["b"], set()).add(m["a"])

    def slow_at(level: float) -> tuple[set[str], int]:
        cut = factor * level
        slow = {x for m in tests if m["value"] < cut
                for x, other in ((m["a"], m["b"]), (m["b"], m["a"])) if best[other] >= cut > best[x]}
        mute = sum(1 for n in best if n not in slow and partners[n] <= slow)
        return slow, len(best) - len(slow) - mute

    slow: set[str] = set()
    for level in ordered:
        if level < upper:
            break
        shown = sum(value >= factor * level for value in best.values())
        if shown < 2:
            continue
        slow, telling = slow_at(level)
        if 2 * shown > telling and 2 * len(slow) < len(best):
            break
    else:
        slow, _telling = slow_at(upper)
    if minimum is not None:
        slow |= {n for n, value in best.items() if value < float(minimum)}
    sample = [float(v) for m in tests if m["a"] not in slow and m["b"] not in slow
              for v in (m.get("values") or [m["value"]])]
    ref = reference(sample, relative, repeats)
    # Nodes in doubt: below the cut of the highest figure two nodes have shown, which the level
    # did not take (a minority reached it). A pair beside one of those nodes tells.
    top = next((v for v in ordered if sum(value >= factor * v for value in best.values()) >= 2), ordered[0])
    ref["top"] = sorted(n for n, value in best.items() if value >= factor * top)
    ref["doubt"] = sorted(n for n, value in best.items() if value < factor * top and n not in slow
                          and any(m["value"] < factor * top for m in tests if n in (m["a"], m["b"])))
    return ref


CANNOT_TELL_MAX_NODES = 16  # up to here the gate checks that its readings can tell a fault from the level


def _can_hide(state: Mapping[str, Any]) -> bool:
    """Whether a majority of the nodes (more than half) could be healthy without one pair of
    them measured: then every reading may be a bad node's, and the readings cannot tell a
    fault from the fabric's level (exactly, up to :data:`CANNOT_TELL_MAX_NODES` nodes)."""
    if len(state["nodes"]) > CANNOT_TELL_MAX_NODES:
        return False
    nodes = [n for n in state["nodes"] if n not in (state.get("blamed") or {})]  # named: decided
    bit = {n: 1 << i for i, n in enumerate(nodes)}
    near = dict.fromkeys(nodes, 0)
    for m in tested_pairs(state):
        if m.get("value") and m["a"] in bit and m["b"] in bit:
            near[m["a"]] |= bit[m["b"]]
            near[m["b"]] |= bit[m["a"]]
    adjacent = [near[n] for n in nodes]
    return _largest_unmeasured(adjacent, (1 << len(nodes)) - 1, {}) > len(state["nodes"]) // 2


def _largest_unmeasured(adjacent: list[int], mask: int, memo: dict[int, int]) -> int:
    """The most nodes of ``mask`` (a bit set) no two of which met: a maximum independent set."""
    if not mask:
        return 0
    if mask not in memo:
        v = (mask & -mask).bit_length() - 1
        rest = mask & ~(1 << v)
        took = 1 + _largest_unmeasured(adjacent, rest & ~adjacent[v], memo)
        memo[mask] = took if not rest & adjacent[v] else max(took, _largest_unmeasured(adjacent, rest, memo))
    return memo[mask]


def cannot_tell(state: Mapping[str, Any]) -> str:
    """The sentence that says the readings could not tell a fault from the fabric's level and
    what to set, or "" where they could: with no floor, one pair (two nodes) or a set of more
    than half the nodes with no pair of them measured (:func:`_can_hide`)."""
    if state.get("minimum") is not None or len(state.get("nodes") or []) < 2:
        return ""
    tool = state.get("tool", "")
    if len(state["nodes"]) == 2:
        why = "one pair is judged against itself and cannot tell a slow node from the fabric's level"
    elif _can_hide(state):
        why = (f"after {len(state.get('rounds') or [])} round(s) more than half the nodes have no measured pair "
               "among themselves, so the readings cannot tell a slow node from the fabric's level")
    else:
        return ""
    return (f"{why}: set a floor (healthcheck_pair_thresholds: {{default: {{{tool}: <figure>}}}}), add a "
            "known-good node or test more nodes")


def tested_pairs(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every pair of every round so far, each with its ``round``."""
    return [{**m, "round": r["round"]} for r in state.get("rounds") or [] for m in r["pairs"]]


def evidence(state: Mapping[str, Any]) -> dict[str, Any]:
    """What every round so far says, worked out from all of them at once.

    * ``good``: a node in a passing pair (a pair's figure is bounded by its slower end).
    * a node that is not good and failed with ``confirm`` distinct good partners is **blamed**
      (``node``: its own port, cable or NIC);
    * a pair that did not pass whose two nodes are both good is a **link** suspect: retested
      (every reading of a later round, the best counts) it passes and is ``cleared``, or fails a
      second time and is a **link** (its second node blamed, which leaves the link out); a good
      node on two such links is blamed itself;
    * ``suspects`` did not pass and lack the evidence yet; ``untested`` never ran a pair.

    Only a pair that *failed* is evidence against a node; one :data:`LOW` (between the floors
    of :func:`reference`) is evidence of nothing and is retested."""
    nodes, confirm = list(state["nodes"]), int(state.get("confirm", CONFIRM))
    tests = tested_pairs(state)
    good = {x for m in tests if m["status"] == health.PASS for x in (m["a"], m["b"])}
    history: dict[frozenset, list[dict[str, Any]]] = {}
    for m in tests:
        history.setdefault(frozenset((m["a"], m["b"])), []).append(m)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for m in tests:
        by_node.setdefault(m["a"], []).append(m)
        by_node.setdefault(m["b"], []).append(m)
    blamed: dict[str, dict[str, Any]] = {}
    good_failures: dict[str, list[str]] = {}
    for node in nodes:
        if node in good:
            continue
        failed = [m for m in by_node.get(node, []) if m["status"] == health.FAIL]
        partners = list(dict.fromkeys(m["b"] if m["a"] == node else m["a"] for m in failed))
        good_failures[node] = [p for p in partners if p in good]
        if len(good_failures[node]) >= confirm:
            last = [m for m in failed if (m["b"] if m["a"] == node else m["a"]) in good][-1]
            blamed[node] = {"kind": "node", "round": last["round"], "partners": good_failures[node],
                            "value": last["value"], "reason": last["reason"]}
    suspects, cleared, confirmed = [], [], []
    for hist in history.values():
        a, b = hist[0]["a"], hist[0]["b"]
        if not (a in good and b in good) or all(m["status"] == health.PASS for m in hist):
            continue
        if any(m["status"] == health.PASS for m in hist):
            cleared.append([a, b])
        elif sum(m["status"] == health.FAIL for m in hist) >= 2:
            confirmed.append([m for m in hist if m["status"] == health.FAIL])
        else:
            suspects.append([a, b])
    on_links: dict[str, list[str]] = {}
    for hist in confirmed:
        a, b = hist[0]["a"], hist[0]["b"]
        on_links.setdefault(a, []).append(b)
        on_links.setdefault(b, []).append(a)
    links = []
    for hist in confirmed:
        a, b = hist[0]["a"], hist[0]["b"]
        links.append([a, b])
        hub = next((x for x in (a, b) if len(on_links[x]) >= 2), None)
        if hub is not None:
            if hub not in blamed:
                blamed[hub] = {"kind": "links", "round": hist[-1]["round"], "partners": on_links[hub],
                               "value": hist[-1]["value"], "reason": hist[-1]["reason"]}
        elif b not in blamed and a not in blamed:
            blamed[b] = {"kind": "link", "round": hist[-1]["round"], "partners": [a],
                         "rounds": [m["round"] for m in hist], "value": hist[-1]["value"],
                         "reason": hist[-1]["reason"]}
    tested = set(by_node)
    return {"good": [n for n in nodes if n in good and n not in blamed],
            "suspects": [n for n in nodes if n not in good and n not in blamed and n in tested],
            "untested": [n for n in nodes if n not in tested],
            "blamed": blamed, "links": links, "cleared": cleared, "link_suspects": suspects,
            "good_failures": good_failures}


def _met(state: Mapping[str, Any]) -> set[frozenset]:
    """The pairs measured so far. A pair whose only measurement left no figure (the tool failed:
    no JSON totals, a refused connection) is not: one reading decides nothing, so it may be
    measured again; a second one without a figure stands."""
    tries: dict[frozenset, list[Any]] = {}
    for m in tested_pairs(state):
        tries.setdefault(frozenset((m["a"], m["b"])), []).append(m.get("value"))
    return {pair for pair, values in tries.items() if len(values) >= 2 or any(v is not None for v in values)}


def plan(state: Mapping[str, Any], ev: Mapping[str, Any]) -> list[list[str]]:
    """The next round's pairs, each node in at most one: every link suspect retested; every
    suspect (most evidence first) and untested node beside a known-good partner it has not met;
    what is left paired among itself, never a pair met before (a pass there finds good nodes);
    then up to :data:`CONTROL_PAIRS` pairs of idle known-good nodes, the round's own reference."""
    order = {n: i for i, n in enumerate(state["nodes"])}
    met = _met(state)
    busy: set[str] = set()
    pairs: list[list[str]] = []
    for a, b in ev["link_suspects"]:
        if a not in busy and b not in busy:
            pairs.append([a, b])
            busy |= {a, b}
    ref = (state.get("rounds") or [{}])[-1].get("reference") or {}
    top = [n for n in ref.get("top") or [] if n in ev["good"]]
    goods = top + [g for g in ev["good"] if g not in top]
    waiting = sorted(ev["suspects"], key=lambda n: (-len(ev["good_failures"].get(n, [])), order[n])) + ev["untested"]
    if state.get("minimum") is None:  # with a floor the floor judges; without, a node in doubt meets the top
        waiting += [n for n in ref.get("doubt") or [] if n not in waiting and n not in ev["blamed"]
                    and any(frozenset((n, t)) not in met for t in top)]
    left = []
    for node in waiting:
        partner = next((g for g in goods if g not in busy and frozenset((g, node)) not in met), None)
        if partner is None:
            left.append(node)
            continue
        pairs.append([partner, node])
        busy |= {partner, node}
    while left:
        node = left.pop(0)
        other = next((x for x in left if frozenset((node, x)) not in met), None)
        if other is not None:
            left.remove(other)
            pairs.append([node, other])
            busy |= {node, other}
    blamed = set(ev["blamed"])
    if _can_hide(state) and state.get("minimum") is None:
        # The readings cannot yet tell a fault from the level: every idle node meets one it has
        # not met, so that a pair of healthy nodes is measured wherever they are.
        idle = [n for n in state["nodes"] if n not in busy and n not in blamed]
        while idle:
            node = idle.pop(0)
            other = next((x for x in idle if frozenset((node, x)) not in met), None)
            if other is not None:
                idle.remove(other)
                pairs.append([node, other])
        return pairs
    if not pairs:
        return pairs
    # Control pairs: known-good nodes left idle measure the fabric as it is now, beside the
    # suspects, each with one it has not met where it can.
    idle = [g for g in goods if g not in busy][:2 * CONTROL_PAIRS]
    while len(idle) > 1:
        node = idle.pop(0)
        other = next((x for x in idle if frozenset((node, x)) not in met), idle[0])
        idle.remove(other)
        pairs.append([node, other])
    return pairs
