# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The multi-node health gate: pair tests in rounds that name a bad node or link at any scale.

A cluster-wide NCCL run says that *something* is slow, not what. Here every node is tested
against one partner at a time with the field's own two-node tools, every pair of a round at
once:

* **Round 1** pairs the nodes in order (a perfect matching; with an odd count the last node
  waits for round 2). A pair that passes makes both its nodes *known good* (a pair's figure is
  bounded by the slower end). The two nodes of a failed pair are *suspects*.
* **Round 2 and on** pair each suspect (and the odd node out) with a distinct known-good node.
  A suspect that fails again, now beside a node known to be good, is **blamed** (node fault:
  its NIC, port or cable); one that passes is good. When both nodes of a failed pair pass
  with others, the fault is the **link between them** (a route or switch port they share):
  one of them (the second) is blamed for it, so leaving it out removes the link from the run.

Rounds needed: ``1 + ceil(S / G)`` where ``S`` is the suspects (two per failed pair, plus the
odd node out) and ``G`` the known-good nodes - independent of the node count. For **one bad
node** that is **2 rounds for every even N >= 4 and every odd N >= 7, 3 for N = 5**; a
healthy cluster needs 1 (2 with an odd N). ``max_rounds`` (3) caps it; what is still
undecided then fails with that reason.

The tool is chosen by what every node has (:func:`choose_tool`): a two-node nccl-tests
``all_reduce_perf`` on GPU nodes, perftest's ``ib_write_bw`` on InfiniBand nodes, ``iperf3``
(TCP, both directions at once) elsewhere. A pair is judged against the VM size's floor
(:data:`PAIR_THRESHOLDS`) and against ``relative`` x the round-1 median (upper median) of every
pair, which catches a slow link on a size with no published figure.

The gate's state is a plain dict (a fact between the role's rounds): :func:`start`,
:func:`roles` (what each node runs in a round), :func:`advance` (judge a round, plan the
next), :func:`node_checks` (the verdicts as health.py's check dicts, ``pair_link``),
:func:`summary` (the rounds, pairs and figures as lines).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from . import health

CHECK = "pair_link"
TOOLS = ("nccl", "ib_write_bw", "iperf3")
UNITS = {"nccl": "GB/s", "ib_write_bw": "Gb/s", "iperf3": "Gb/s"}

# Floors per VM size and tool (None: judged against the round's median only).
#   nccl         two-node all_reduce_perf bus bandwidth, GB/s: health.py's
#                allreduce_cluster_busbw (80% of aznhc's InfiniBand floor per node).
#   ib_write_bw  one HCA port, Gb/s, GPU-direct: aznhc conf/<size>.conf check_ib_bw_gdr
#                (ND A100 v4 185 Gb/s HDR; ND H100 v5 and ND H200 v5 380 Gb/s NDR);
#                ND40rs_v2 check_ib_bw_non_gdr 78 (EDR).
#   iperf3       TCP both ways, Gb/s: no published figure; Azure's "expected network
#                bandwidth" of a size is a cap, not a floor, so the median rule judges.
PAIR_THRESHOLDS: dict[str, dict[str, float | None]] = {
    "standard_nd96asr_v4": {"nccl": 148.0, "ib_write_bw": 185.0, "iperf3": None},
    "standard_nd96amsr_a100_v4": {"nccl": 148.0, "ib_write_bw": 185.0, "iperf3": None},
    "standard_nd96isr_h100_v5": {"nccl": 304.0, "ib_write_bw": 380.0, "iperf3": None},
    "standard_nd96isr_h200_v5": {"nccl": 304.0, "ib_write_bw": 380.0, "iperf3": None},
    "standard_nd40rs_v2": {"nccl": 7.8, "ib_write_bw": 78.0, "iperf3": None},
}


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
def start(nodes: Iterable[str], tool: str, *, minimum: float | None = None, relative: float = 0.5,
          max_rounds: int = 3) -> dict[str, Any]:
    """The gate before round 1: its first round's pairs planned."""
    order = list(dict.fromkeys(nodes))
    pairs = [[order[i], order[i + 1]] for i in range(0, len(order) - 1, 2)]
    state = {"tool": tool, "unit": UNITS.get(tool, ""), "nodes": order, "minimum": minimum,
             "relative": relative, "max_rounds": max_rounds, "reference": None, "rounds": [],
             "good": [], "suspects": [], "untested": order[len(pairs) * 2:], "blamed": {},
             "links": [], "next": pairs, "done": not pairs and len(order) < 2}
    if len(order) == 1:
        state["untested"] = []
    return state


def skipped_state(nodes: Iterable[str], reason: str) -> dict[str, Any]:
    """A gate that does not run (no tool, switched off, one node): every node's check skips."""
    return {"tool": "", "unit": "", "nodes": list(nodes), "rounds": [], "blamed": {}, "next": [],
            "done": True, "skip_reason": reason, "roles": {}, "summary": [f"pair gate skipped: {reason}"]}


def with_roles(state: Mapping[str, Any], addresses: Mapping[str, str], base_port: int) -> dict[str, Any]:
    """``state`` with the next round's ``roles`` (a new port each round), ``port`` and ``summary``."""
    port = base_port + len(state.get("rounds") or []) + 1
    return {**state, "roles": roles(state, addresses, port), "port": port, "summary": summary(state)}


def client_figures(state: Mapping[str, Any], results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The figures of the round just run from each client's registered result; one of an
    earlier round (another port) or none at all counts as no result."""
    out: dict[str, dict[str, Any]] = {}
    for node, role in (state.get("roles") or {}).items():
        got = results.get(node)
        if role["role"] != "client" or not isinstance(got, Mapping) or got.get("port") != role["port"]:
            continue
        if got.get("failed") or got.get("unreachable"):
            out[node] = {"value": None, "error": str(got.get("msg") or "the client task failed")}
        else:
            out[node] = {"value": got.get("value"), "error": str(got.get("error") or "")}
    return out


def roles(state: Mapping[str, Any], addresses: Mapping[str, str], port: int = 5201) -> dict[str, dict[str, Any]]:
    """What each node runs in the next round: ``{node: {"role": "server"|"client", "peer",
    "peer_address", "port"}}`` (the first of a pair serves, the second runs the client and
    reports the figure). Nodes not in the round have no entry."""
    out: dict[str, dict[str, Any]] = {}
    for a, b in state.get("next") or []:
        out[a] = {"role": "server", "peer": b, "peer_address": str(addresses.get(b, b)), "port": port}
        out[b] = {"role": "client", "peer": a, "peer_address": str(addresses.get(a, a)), "port": port}
    return out


def judge(value: float | None, error: str, minimum: float | None, reference: float | None,
          relative: float, unit: str) -> tuple[str, str]:
    """``(status, reason)`` of one pair."""
    if value is None:
        return health.FAIL, error or "no figure in the tool's output"
    if minimum is not None and value < minimum:
        return health.FAIL, f"{fig(value)} {unit} is below the floor {minimum:g} {unit}"
    if reference and relative and value < relative * reference:
        return health.FAIL, (f"{fig(value)} {unit} is below {relative:g} x the median pair "
                             f"({reference:.2f} {unit})")
    return health.PASS, ""


def fig(value: float) -> str:
    """A figure as printed: two decimals, three significant digits below 0.1 (a lossy link's)."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3g}"


def _upper_median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def advance(state: Mapping[str, Any], figures: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Judge the round just run and plan the next one.

    ``figures[client]`` is ``{"value": float|None, "error": str}`` of the pair the client ran
    (a pair whose client left no figure fails with "no result")."""
    new = json.loads(json.dumps(state))
    pairs = new["next"]
    number = len(new["rounds"]) + 1
    measured = []
    for a, b in pairs:
        got = figures.get(b) or {}
        value = got.get("value")
        measured.append({"a": a, "b": b, "value": None if value in (None, "") else float(value),
                         "error": str(got.get("error") or ("" if got else f"no result from {b}"))})
    if number == 1:
        new["reference"] = _upper_median([m["value"] for m in measured if m["value"] is not None])
    good, suspects = set(new["good"]), set(new["suspects"])
    for m in measured:
        m["status"], m["reason"] = judge(m["value"], m["error"], new["minimum"], new["reference"],
                                         new["relative"], new["unit"])
    for m in measured:
        a, b = m["a"], m["b"]
        if m["status"] == health.PASS:
            good |= {a, b}
            continue
        if number == 1:
            suspects |= {a, b}
            continue
        # A later round pairs a known-good node (a) with one suspect (b): the suspect is to blame.
        new["blamed"][b] = {"kind": "node", "round": number, "partners": [*_partners(new, b), a],
                            "value": m["value"], "reason": m["reason"]}
    for m in measured:
        if m["status"] == health.FAIL and number > 1:
            suspects.discard(m["a"])
            suspects.discard(m["b"])
    new["rounds"].append({"round": number, "pairs": measured})
    suspects -= good
    untested = [n for n in new["untested"] if n not in good and n not in new["blamed"]]
    if number > 1:
        untested = [n for n in untested if not any(n in (m["a"], m["b"]) for m in measured)]
    # A failed round-1 pair whose two nodes both passed with others: the link between them.
    if number > 1:
        for m in new["rounds"][0]["pairs"]:
            a, b = m["a"], m["b"]
            if m["status"] == health.FAIL and a in good and b in good and [a, b] not in new["links"]:
                new["links"].append([a, b])
                new["blamed"][b] = {"kind": "link", "round": number, "partners": [a], "value": m["value"],
                                    "reason": m["reason"]}
    new["good"] = sorted(good - set(new["blamed"]))
    new["suspects"] = sorted(suspects - set(new["blamed"]))
    new["untested"] = untested
    waiting = new["suspects"] + untested
    partners = [n for n in new["nodes"] if n in set(new["good"])]
    if not waiting or number >= new["max_rounds"] or not partners:
        new["next"], new["done"] = [], True
        return new
    new["next"] = [[partners[i], waiting[i]] for i in range(min(len(partners), len(waiting)))]
    new["done"] = False
    return new


def _partners(state: Mapping[str, Any], node: str) -> list[str]:
    return [m["b"] if m["a"] == node else m["a"] for r in state["rounds"] for m in r["pairs"]
            if node in (m["a"], m["b"]) and m["status"] == health.FAIL]


def node_checks(state: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The gate's verdict on every node as one ``pair_link`` check (health.py's shape)."""
    if state.get("skip_reason"):
        return {node: [health.skipped(CHECK, state["skip_reason"])] for node in state.get("nodes") or []}
    unit, rounds = state.get("unit", ""), len(state.get("rounds") or [])
    floor = [f">= {state['minimum']:g} {unit}"] if state.get("minimum") is not None else []
    if state.get("reference") and state.get("relative"):
        floor.append(f">= {state['relative']:g} x median {state['reference']:.2f} {unit}")
    threshold = " and ".join(floor)
    best: dict[str, float] = {}
    for r in state.get("rounds") or []:
        for m in r["pairs"]:
            if m["status"] == health.PASS:
                for node in (m["a"], m["b"]):
                    best[node] = max(best.get(node, 0.0), m["value"])
    out: dict[str, list[dict[str, Any]]] = {}
    for node in state.get("nodes") or []:
        blamed = (state.get("blamed") or {}).get(node)
        if blamed:
            value = "" if blamed["value"] is None else f"{fig(blamed['value'])} {unit}"
            if blamed["kind"] == "link":
                reason = (f"the link between {blamed['partners'][0]} and {node} is slow ({blamed['reason']}) "
                          f"while each passes with other nodes: a route or switch port they share; "
                          f"leaving out {node} removes it")
            else:
                reason = (f"fails the {state['tool']} pair test with {' and '.join(blamed['partners'])} "
                          f"(round {blamed['round']}: {blamed['reason']}): its own network port, cable or NIC")
            out[node] = [health.check(CHECK, health.FAIL, value, threshold, reason)]
        elif node in (state.get("suspects") or []) or node in (state.get("untested") or []):
            last = next((m for r in reversed(state.get("rounds") or []) for m in r["pairs"]
                         if node in (m["a"], m["b"]) and m["status"] == health.FAIL), None)
            why = f" (its last pair: {last['reason']})" if last else ""
            reason = (f"undecided after {rounds} round(s) of pair tests: no known-good partner left, or "
                      f"healthcheck_pair_max_rounds reached{why}" if len(state["nodes"]) > 2 else
                      f"the only pair failed{why} and no third node can tell which end is slow")
            out[node] = [health.check(CHECK, health.FAIL, "", threshold, reason)]
        elif node in best:
            out[node] = [health.check(CHECK, health.PASS, f"{best[node]:.2f} {unit}", threshold)]
        else:
            out[node] = [health.skipped(CHECK, "single node: no partner to test with")]
    return out


def summary(state: Mapping[str, Any]) -> list[str]:
    """The rounds, pairs and figures, one line each, then the verdict."""
    unit = state.get("unit", "")
    lines = [f"pair gate: {state.get('tool')} over {len(state.get('nodes') or [])} node(s), "
             f"{len(state.get('rounds') or [])} round(s)"
             + (f", median {state['reference']:.2f} {unit}" if state.get("reference") else "")]
    for r in state.get("rounds") or []:
        for m in r["pairs"]:
            figure = "no figure" if m["value"] is None else f"{fig(m['value'])} {unit}"
            lines.append(f"round {r['round']}: {m['a']} <-> {m['b']}: {figure} {m['status'].upper()}"
                         + (f" ({m['reason']})" if m["reason"] else ""))
    blamed = state.get("blamed") or {}
    lines.append("verdict: " + ("; ".join(
        f"{node} ({'link to ' + b['partners'][0] if b['kind'] == 'link' else 'node'})" for node, b in sorted(blamed.items()))
        if blamed else "every link passed"))
    return lines


def report_lines(state: Mapping[str, Any], max_pairs: int = 16) -> list[str]:
    """The run report's section: :func:`summary`, with the passing pairs counted instead of
    listed where there are more than ``max_pairs`` pairs (every failing pair is listed)."""
    lines = summary(state)
    pairs = [m for r in state.get("rounds") or [] for m in r["pairs"]]
    if len(pairs) <= max_pairs:
        return [f"healthcheck {line}" for line in lines]
    passed = [m["value"] for m in pairs if m["status"] == health.PASS]
    unit = state.get("unit", "")
    kept = [line for line in lines[1:-1] if " FAIL" in line]
    counted = (f"{len(passed)} pair(s) passed, {min(passed):.2f} to {max(passed):.2f} {unit}" if passed
               else "no pair passed")
    return [f"healthcheck {line}" for line in (lines[0], counted, *kept, lines[-1])]


def simulate(nodes: list[str], bandwidth: Any, tool: str = "iperf3", **kw: Any) -> dict[str, Any]:
    """Run the gate against ``bandwidth(a, b) -> float | None`` (tests and bench)."""
    state = start(nodes, tool, **kw)
    while not state["done"]:
        figures = {b: {"value": bandwidth(a, b), "error": ""} for a, b in state["next"]}
        state = advance(state, figures)
    return state


def rounds_bound(nodes: int, failed_pairs: int = 1) -> int:
    """Rounds the gate needs at most for ``failed_pairs`` failed round-1 pairs among ``nodes``."""
    if nodes < 2:
        return 0
    waiting = 2 * failed_pairs + nodes % 2
    good = nodes - waiting
    if waiting == 0:
        return 1
    return 1 + math.ceil(waiting / good) if good > 0 else 1


# --------------------------------------------------------------------------------------
# The tools: command lines and their output
# --------------------------------------------------------------------------------------
def iperf3_argv(binary: str, role: str, peer_address: str, port: int, seconds: int,
                pidfile: str = "") -> list[str]:
    """The iperf3 side of ``role``: a one-off server in the background that gives up when idle
    (its pid in ``pidfile``, so that the next gate can end it), or a client that runs both
    directions at once (``--bidir``) with JSON output."""
    if role == "server":
        return [binary, "-s", "-1", "-D", "-p", str(port), "--idle-timeout", str(max(30, 4 * seconds)),
                *(["-I", pidfile] if pidfile else [])]
    return [binary, "-c", peer_address, "-p", str(port), "-t", str(seconds), "--bidir", "-J"]


def iperf3_pidfile(tmpdir: str, uid: int, port: int) -> str:
    """Where the gate's iperf3 server on ``port`` keeps its pid (one per user and port)."""
    return f"{tmpdir.rstrip('/')}/amlhpc-pair-iperf3-{uid}-{port}.pid"


def is_gate_server(cmdline: list[str], port: int, pidfile: str) -> bool:
    """Whether a process's argv is the gate's own iperf3 server on ``port`` (started with that
    ``pidfile``): an earlier gate's server left busy by a test that never ended, safe to end.
    Any other process, an unrelated iperf3 included, is not."""
    if not cmdline or not cmdline[0].rsplit("/", 1)[-1].startswith("iperf3") or "-s" not in cmdline:
        return False
    pairs = set(zip(cmdline, cmdline[1:]))
    return ("-p", str(port)) in pairs and ("-I", pidfile) in pairs


def parse_iperf3(text: str) -> tuple[float | None, str]:
    """``(Gbit/s, error)``: the slower direction of an ``iperf3 --bidir -J`` run (received
    bytes, so packets lost on the way do not count)."""
    try:
        data = json.loads(text[text.index("{"):]) if "{" in text else {}
    except ValueError:
        return None, "iperf3 printed no JSON"
    if data.get("error"):
        return None, f"iperf3: {data['error']}"
    end = data.get("end") or {}
    rates = [end[k]["bits_per_second"] for k in ("sum_received", "sum_received_bidir_reverse")
             if isinstance(end.get(k), Mapping) and "bits_per_second" in end[k]]
    if not rates:
        return None, "no received totals in iperf3's JSON"
    return min(rates) / 1e9, ""


def ib_write_bw_argv(binary: str, role: str, peer_address: str, port: int, seconds: int,
                     device: str = "") -> list[str]:
    """perftest's RDMA write bandwidth: the server waits for one client, the client reports."""
    dev = ["-d", device] if device else []
    common = [binary, *dev, "-p", str(port), "--report_gbits", "-F", "-D", str(seconds)]
    return common if role == "server" else [*common, peer_address]


_IB_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", re.M)


def parse_ib_write_bw(text: str) -> tuple[float | None, str]:
    """``(Gb/s, error)``: BW average of ``ib_write_bw --report_gbits`` (its result row:
    #bytes #iterations BW-peak BW-average MsgRate)."""
    rows = _IB_ROW.findall(text)
    if not rows:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        return None, f"ib_write_bw printed no result row ({first[:120]})" if first else "ib_write_bw printed nothing"
    return float(rows[-1][3]), ""


def nccl_pair_argv(mpirun: str, tool: str, peer_address: str, self_address: str, gpus: int, args: str = "",
                   mpirun_args: str = "") -> list[str]:
    """A two-node nccl-tests all_reduce from the client's side: one rank per GPU on each node."""
    return [mpirun, "-np", str(2 * gpus), "--host", f"{self_address}:{gpus},{peer_address}:{gpus}",
            "--map-by", f"ppr:{gpus}:node", *shlex.split(mpirun_args), tool, *shlex.split(args)]


def parse_nccl_pair(text: str) -> tuple[float | None, str]:
    """``(GB/s, error)``: the largest message's bus bandwidth of nccl-tests' table."""
    value = health.nccl_busbw(health.parse_nccl_tests(text))
    return (value, "") if value is not None else (None, "no bus bandwidth in nccl-tests' output")


PARSERS = {"iperf3": parse_iperf3, "ib_write_bw": parse_ib_write_bw, "nccl": parse_nccl_pair}
