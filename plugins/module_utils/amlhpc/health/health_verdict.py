# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""What the run does with the nodes the health gate failed: the verdict.

The gate (:mod:`amlhpc.health.health`, and the checks other parts of the gate add in the same shape)
gives every node a list of checks, or nothing when the node stopped answering. The user's
``healthcheck_on_failure`` decides:

``stop``
    the run stops, one sentence per failing node (the report's message);
``exclude``
    up to ``healthcheck_spare_nodes`` failing nodes are left out and the run goes on with the
    good ones: the stage plans the shards over the good nodes only (:func:`amlhpc.staging.shards.plan_shards_without`)
    and the job, placed by AzureML on nodes it chooses, trains on the good nodes only: every node
    starts ``workload/launch.py``, which reads its node's verdict file (:func:`node_file`) and
    either joins torchrun's elastic rendezvous on a good node or ends without training. More
    failing nodes than spares: the run stops, saying so.

:func:`verdict` makes the decision, :func:`health_json` the controller's
``outputs/<run>/health.json`` (per node, each check with its figure, threshold and status; the
nodes the job uses), :func:`node_file` the small file written on each node. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

ON_FAILURE = ("stop", "exclude")
RDZV_PORT = 29400  # torchrun's own default for the c10d rendezvous
NODE_FILE = "/etc/amlhpc/health-verdict.json"
GOOD = "good"
EXCLUDED = "excluded"


class VerdictError(ValueError):
    """The options make no sense; the message names the fix."""


def _reasons(checks: Iterable[Mapping[str, Any]] | None) -> list[str]:
    if checks is None:
        return ["no health check results (the node stopped answering or its checks failed to run)"]
    return [f"{c['check']}: {c.get('reason') or 'failed'}" for c in checks if c.get("status") == "fail"]


def _failed_checks(checks: Iterable[Mapping[str, Any]] | None) -> list[str]:
    if checks is None:
        return ["unreachable"]
    return list(dict.fromkeys(str(c["check"]) for c in checks if c.get("status") == "fail"))


def verdict(results: Mapping[str, Iterable[Mapping[str, Any]] | None], ranked: Sequence[str], *,
            on_failure: str = "stop", spares: int = 0, ignore_failures: bool = False,
            addresses: Mapping[str, str] | None = None, port: int = RDZV_PORT,
            stop_message: str = "", failing: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The run's decision over the gate's ``results`` (``{node: [check, ...] or None}``).

    ``ranked`` lists every node in rank order (the rendezvous meets on the first good one);
    ``addresses`` gives each node's private address for that endpoint. ``stop_message`` is the
    report's sentence per failing node, used as is where the run stops on ``stop``. ``failing``
    (the report's ``failing``: ``[{"node", "reasons"}]``), where given, names the failing nodes
    instead of the checks in ``results``, so that every part of the gate that feeds the report
    is heard.

    ``action`` is ``pass`` (no failing node), ``exclude`` (failing nodes left out), ``ignore``
    (``healthcheck_ignore_failures``: every node kept) or ``stop``; ``message`` says it in
    one paragraph, ``good``/``excluded`` list the nodes in rank order."""
    if on_failure not in ON_FAILURE:
        raise VerdictError(f"healthcheck_on_failure must be one of {', '.join(ON_FAILURE)}, not {on_failure!r}")
    if int(spares) < 0:
        raise VerdictError(f"healthcheck_spare_nodes must be 0 or more, not {spares}")
    nodes = [n for n in ranked if n in results] + sorted(set(results) - set(ranked))
    if failing is None:
        failed = {n: _reasons(results[n]) for n in nodes}
        names = {n: _failed_checks(results[n]) for n in nodes}
    else:
        failed = {str(f["node"]): list(f.get("reasons") or ["failed"]) for f in failing}
        names = {str(f["node"]): list(f.get("checks") or _failed_checks(results.get(str(f["node"])))) or ["failed"]
                 for f in failing}
        nodes += sorted(set(failed) - set(nodes))
    why = {n: r for n, r in failed.items() if r}
    bad = [n for n in nodes if n in why]
    good = [n for n in nodes if n not in why]
    action, message = "pass", f"every node passed the health check ({len(nodes)})"
    if bad and ignore_failures:
        action, good, bad = "ignore", list(nodes), []
        message = f"IGNORED (healthcheck_ignore_failures: true): {stop_message}"
    elif bad and on_failure == "stop":
        action, message = "stop", stop_message or "; ".join(f"{n}: {', '.join(why[n])}" for n in why)
    elif bad and (len(bad) > int(spares) or not good):
        action = "stop"
        message = (f"{len(bad)} node(s) failed the health check but healthcheck_spare_nodes allows {spares}: "
                   + "; ".join(f"{n} ({', '.join(why[n])})" for n in bad)
                   + f". Replace or repair them, or raise healthcheck_spare_nodes to {len(bad)}"
                   + (" (no node passed, so nothing can train)." if not good else " to train on the others."))
    elif bad:
        action = "exclude"
        message = (f"excluding {len(bad)} of {len(nodes)} node(s) (healthcheck_spare_nodes: {spares}): "
                   + "; ".join(f"{n} ({', '.join(why[n])})" for n in bad)
                   + f". Training goes on with the {len(good)} other node(s): " + ", ".join(good) + ".")
    addresses = addresses or {}
    endpoint = ""
    if good and action != "stop":
        endpoint = f"{addresses.get(good[0]) or good[0]}:{int(port)}"
    out = {
        "action": action,
        "on_failure": on_failure,
        "spares": int(spares),
        "nodes": nodes,
        "good": good if action != "stop" else [],
        "excluded": bad if action == "exclude" else [],
        "failing": [{"node": n, "reasons": why[n], "checks": names.get(n) or ["failed"]} for n in nodes if n in why],
        "rendezvous": endpoint,
        "min_nodes": len(good) if action != "stop" else 0,
        "max_nodes": len(good) if action != "stop" else 0,
        "message": message,
    }
    out["id"] = verdict_id(out)
    return out


def verdict_id(v: Mapping[str, Any]) -> str:
    """A short digest of who trains and where they meet: the job carries it, and a launcher whose
    node file holds another one (a file left by an earlier run) does not train."""
    key = json.dumps({k: v.get(k) for k in ("good", "excluded", "rendezvous", "min_nodes", "max_nodes")},
                     sort_keys=True)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def node_file(v: Mapping[str, Any], node: str) -> dict[str, Any]:
    """What the launcher on ``node`` reads: whether it trains, where the rendezvous is, how many
    nodes take part, and the checks it failed by name. No measured figure: they change on every
    run, and the file is to stay the same bytes while the verdict does (a rerun reports
    ``changed=0``); the figures are in the run's ``health.json``."""
    excluded = node in v.get("excluded", []) or node not in v.get("good", [])
    checks = next((list(f.get("checks") or []) for f in v.get("failing", []) if f["node"] == node), [])
    reasons = [("did not answer the health gate" if c == "unreachable" else f"{c} failed")
               + " (the figures are in the run's health.json)" for c in checks]
    return {"id": v["id"], "node": node, "status": EXCLUDED if excluded else GOOD, "checks": checks,
            "reasons": reasons, "rendezvous": v.get("rendezvous", ""), "min_nodes": v.get("min_nodes", 0),
            "max_nodes": v.get("max_nodes", 0), "good": list(v.get("good", []))}


def health_json(v: Mapping[str, Any], results: Mapping[str, Iterable[Mapping[str, Any]] | None],
                run: str = "") -> dict[str, Any]:
    """The controller's ``outputs/<run>/health.json``: the decision, the nodes the job uses and,
    per node, each check with its figure, threshold and status."""
    nodes = {}
    for node in v["nodes"]:
        checks = results.get(node)
        status = EXCLUDED if node in v["excluded"] else ("fail" if any(f["node"] == node for f in v["failing"])
                                                         else GOOD)
        nodes[node] = {
            "status": status,
            "reachable": checks is not None,
            "checks": [{"check": c["check"], "status": c["status"], "value": c.get("value", ""),
                        "threshold": c.get("threshold", ""), "reason": c.get("reason", "")}
                       for c in checks or []],
        }
    return {"run": run, "action": v["action"], "on_failure": v["on_failure"], "spare_nodes": v["spares"],
            "verdict_id": v["id"], "message": v["message"], "job_nodes": v["good"], "excluded": v["excluded"],
            "rendezvous": v["rendezvous"], "nodes": nodes}


def report_lines(v: Mapping[str, Any]) -> list[str]:
    """The verdict's section of the run's report."""
    lines = [f"health verdict: {v['action']} ({v['message']})"]
    if v["action"] == "exclude":
        lines.append(f"the job trains on {len(v['good'])} node(s) ({', '.join(v['good'])}), rendezvous "
                     f"{v['rendezvous']}; left out: {', '.join(v['excluded'])}")
    return lines
