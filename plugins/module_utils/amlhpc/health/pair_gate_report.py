# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""What the pair gate shows: its verdict on every node as health.py's check dicts
(:func:`node_checks`, the ``pair_link`` check, with :func:`blame_reason`'s sentence for a named
node), the rounds, pairs and figures as lines (:func:`summary`), the run report's section
(:func:`report_lines`), and the state the role carries between rounds with the next round's roles
and its summary (:func:`with_roles`).

The rounds and the decisions are :mod:`.pair_gate`'s; nothing here changes a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import health
from .pair_gate import fig, roles, tested_pairs

CHECK = "pair_link"


def with_roles(state: Mapping[str, Any], addresses: Mapping[str, str], base_port: int) -> dict[str, Any]:
    """``state`` with the next round's ``roles`` (a new port each round), ``port`` and ``summary``."""
    port = base_port + len(state.get("rounds") or []) + 1
    return {**state, "roles": roles(state, addresses, port), "port": port, "summary": summary(state)}


def _partners_failed(state: Mapping[str, Any], node: str) -> list[str]:
    return list(dict.fromkeys(m["b"] if m["a"] == node else m["a"] for m in tested_pairs(state)
                              if node in (m["a"], m["b"]) and m["status"] != health.PASS))


def _threshold(state: Mapping[str, Any]) -> str:
    unit = state.get("unit", "")
    parts = [f">= {state['minimum']:g} {unit}"] if state.get("minimum") is not None else []
    last = (state.get("rounds") or [{}])[-1].get("reference") or {}
    if last.get("threshold"):
        parts.append(f">= {fig(last['pass_threshold'])} {unit} ({last['pass_factor']:.2g} x median "
                     f"{fig(last['median'])} {unit})")
    return " and ".join(parts)


def node_checks(state: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The gate's verdict on every node as one ``pair_link`` check (health.py's shape)."""
    if state.get("skip_reason"):
        return {node: [health.skipped(CHECK, state["skip_reason"])] for node in state.get("nodes") or []}
    unit, rounds = state.get("unit", ""), len(state.get("rounds") or [])
    threshold = _threshold(state)
    best: dict[str, float] = {}
    for m in tested_pairs(state):
        if m["status"] == health.PASS:
            for node in (m["a"], m["b"]):
                best[node] = max(best.get(node, 0.0), m["value"])
    retested = {x for pair in state.get("cleared") or [] for x in pair}
    undecided = set(state.get("undecided") or [])
    out: dict[str, list[dict[str, Any]]] = {}
    for node in state.get("nodes") or []:
        blamed = (state.get("blamed") or {}).get(node)
        if blamed:
            value = "" if blamed["value"] is None else f"{fig(blamed['value'])} {unit}"
            out[node] = [health.check(CHECK, health.FAIL, value, threshold, blame_reason(state, node, blamed))]
        elif node in undecided:
            partners = _partners_failed(state, node)
            last = next((m for m in reversed(tested_pairs(state)) if node in (m["a"], m["b"])
                         and m["status"] != health.PASS), None)
            why = f" (its last pair: {last['reason']})" if last else ""
            if state.get("cannot_tell"):
                reason = f"undecided: {state['cannot_tell']}"
            elif len(state["nodes"]) == 2:
                reason = f"the only pair failed{why} and no third node can tell which end is slow"
            elif not partners:
                reason = (f"undecided after {rounds} round(s): no known-good partner was free to test it with; too "
                          "few known-good nodes were left to decide")
            else:
                reason = (f"undecided after {rounds} round(s): it failed beside {' and '.join(partners)}, not known "
                          f"good, and too few known-good nodes were left to tell which end is slow{why}")
            out[node] = [health.check(CHECK, health.FAIL, "", threshold, reason)]
        elif node in best:
            note = "a low pair was retested and passed" if node in retested else ""
            out[node] = [health.check(CHECK, health.PASS, f"{best[node]:.2f} {unit}", threshold, note)]
        else:
            out[node] = [health.skipped(CHECK, "single node: no partner to test with")]
    return out


def blame_reason(state: Mapping[str, Any], node: str, blamed: Mapping[str, Any]) -> str:
    """Why ``node`` is named, in one sentence."""
    if blamed["kind"] == "link":
        rounds = " and ".join(str(r) for r in blamed.get("rounds") or [blamed["round"]])
        return (f"the link between {blamed['partners'][0]} and {node} failed in rounds {rounds} ({blamed['reason']}) "
                f"while each passes with other nodes: a route or switch port they share; leaving out {node} "
                "removes it")
    if blamed["kind"] == "links":
        return (f"its links to {' and '.join(blamed['partners'])} each failed twice while they pass with other "
                f"nodes ({blamed['reason']}): its own network port, cable or NIC")
    return (f"fails the {state['tool']} pair test with {' and '.join(blamed['partners'])}, each known good "
            f"(round {blamed['round']}: {blamed['reason']}): its own network port, cable or NIC")


def summary(state: Mapping[str, Any]) -> list[str]:
    """The rounds, pairs and figures, one line each, the pairs retested and cleared, then the
    verdict: every failing node, named or undecided (never "passed" while one fails)."""
    unit = state.get("unit", "")
    lines = [f"pair gate: {state.get('tool')} over {len(state.get('nodes') or [])} node(s), "
             f"{len(state.get('rounds') or [])} round(s)"
             + (f", median {state['reference']:.2f} {unit}" if state.get("reference") else "")]
    lines += [f"warning: {w}" for w in state.get("warnings") or []]
    for r in state.get("rounds") or []:
        for m in r["pairs"]:
            figure = "no figure" if m["value"] is None else f"{fig(m['value'])} {unit}"
            best = f", best of {m['readings']} readings" if m.get("readings", 1) > 1 else ""
            lines.append(f"round {r['round']}: {m['a']} <-> {m['b']}: {figure} {m['status'].upper()}"
                         + (f" ({m['reason']}{best})" if m["reason"] else f" ({best[2:]})" if best else ""))
    for a, b in state.get("cleared") or []:
        lines.append(f"retested: {a} <-> {b} failed, both passed with other nodes and the pair passed again: cleared")
    blamed = state.get("blamed") or {}
    undecided = [n for n in state.get("undecided") or [] if n not in blamed]
    kinds = {"node": "node", "links": "node"}
    said = [f"{node} ({kinds.get(b['kind']) or 'link to ' + b['partners'][0]})" for node, b in sorted(blamed.items())]
    said += [f"{node} (undecided)" for node in undecided]
    if undecided and not state.get("cannot_tell"):
        lines.append(f"undecided: {', '.join(undecided)}: too few known-good nodes were left to decide "
                     f"within {len(state.get('rounds') or [])} round(s)")
    if not state.get("done", True):  # between rounds: nothing is decided for the nodes still open
        lines.append(f"verdict so far: {'; '.join(said) or 'nobody named'}; round {len(state.get('rounds') or []) + 1} next")
        return lines
    if state.get("cannot_tell"):
        lines.append(f"verdict: cannot tell: {state['cannot_tell']} ({'; '.join(said)})")
        return lines
    lines.append("verdict: " + ("; ".join(said) if said else "every node passed"))
    return lines


def report_lines(state: Mapping[str, Any], max_pairs: int = 16) -> list[str]:
    """The run report's section: :func:`summary`, with the passing pairs counted instead of
    listed where there are more than ``max_pairs`` pairs (every failing pair is listed)."""
    lines = summary(state)
    pairs = tested_pairs(state)
    if len(pairs) <= max_pairs:
        return [f"healthcheck {line}" for line in lines]
    passed = [m["value"] for m in pairs if m["status"] == health.PASS]
    unit = state.get("unit", "")
    kept = [line for line in lines[1:-1] if " FAIL" in line or " LOW" in line
            or line.startswith(("retested:", "undecided:", "warning:"))]
    counted = (f"{len(passed)} pair(s) passed, {min(passed):.2f} to {max(passed):.2f} {unit}" if passed
               else "no pair passed")
    return [f"healthcheck {line}" for line in (lines[0], counted, *kept, lines[-1])]
