# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""A listed node that does not answer is handled like a lost one (issue 48).

AmlCompute keeps a dead or hung VM in its listing as ``idle`` or ``running`` for minutes before it
marks it. The listing is not trusted on its own (as Kubernetes calls a node NotReady once it stops
reporting, whatever the node object says): at the start of the node phases every listed node must
answer within a bound (``node_loss_probe_timeout``, Ansible's ``wait_for_connection``), and
:func:`answering` decides from the answers:

* ``silent``: each listed node that did not answer (timed out, unreachable, or no answer at all),
  named in one sentence with what the listing says of it and the bound;
* ``heads``: each cluster's head (the rendezvous, the node that scans the others' keys, the node
  whose job environment submit reads) is its answering node of lowest rank; ``moved`` says where
  the listed head was silent and the role moved;
* ``action``: the health gate's own rule (``healthcheck_on_failure``, ``healthcheck_spare_nodes``)
  over the silent nodes: ``pass`` (every node answered), ``exclude`` (left out, the gate's new
  ``verdict``: the stage moves their shards to ``verdict.good``) or ``stop``.

:func:`job_head` is the node whose job environment (NCCL files) submit reads: the first node of the
run's rank order that trains and answered. Standard library only (the health rule imported lazily).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PHASES = "ssh_trust, the health gate, the stage and the last look"


def _silent_reason(answer: Mapping[str, Any] | None, state: str, timeout: float) -> str | None:
    """Why a listed node counts as silent (None: it answered)."""
    listed = f"is listed by AmlCompute as {state or 'usable'} but"
    if answer is None:
        return f"{listed} did not answer within {timeout:g} s (it left the run before the look)"
    if answer.get("unreachable") or answer.get("failed"):
        return f"{listed} did not answer within {timeout:g} s"
    return None


def answering(listed: Iterable[Mapping[str, Any]], answers: Mapping[str, Mapping[str, Any] | None], *,
              timeout: float, on_failure: str = "stop", spares: int = 0, port: int = 29400) -> dict[str, Any]:
    """The decision of the look at the start of the node phases.

    ``listed``: the inventory's nodes (``host``, ``cluster``, ``rank``, ``state``: AmlCompute's
    nodeState, ``ip``: the private address); ``answers``: each node's registered
    ``wait_for_connection`` result (missing or None: no answer). Returns ``answering`` and
    ``silent`` (``{node, listed, reason}``) in rank order, ``heads`` (cluster -> host or None),
    ``moved`` (``{cluster, from, to}``), ``action``, ``verdict`` (the gate's, where it left
    nodes out) and ``message`` (one sentence per silent node and what happens)."""
    from ..health.health_verdict import verdict as health_verdict  # the gate's own rule decides

    ranked = sorted(({**n, "host": str(n["host"]), "cluster": str(n.get("cluster") or ""),
                      "rank": int(n.get("rank") or 0)} for n in listed),
                    key=lambda n: (n["cluster"], n["rank"], n["host"]))
    silent, alive = [], []
    for node in ranked:
        reason = _silent_reason(answers.get(node["host"]), str(node.get("state") or ""), timeout)
        if reason:
            silent.append({"node": node["host"], "listed": str(node.get("state") or ""), "reason": reason})
        else:
            alive.append(node["host"])
    heads: dict[str, str | None] = {}
    moved = []
    for node in ranked:
        cluster = node["cluster"]
        if cluster in heads:
            continue
        members = [n["host"] for n in ranked if n["cluster"] == cluster]
        heads[cluster] = next((h for h in members if h in alive), None)
        if heads[cluster] != members[0] and heads[cluster] is not None:
            moved.append({"cluster": cluster, "from": members[0], "to": heads[cluster]})
    out: dict[str, Any] = {"answering": alive, "silent": silent, "heads": heads, "moved": moved,
                           "action": "pass", "verdict": None,
                           "message": f"every listed node answered within {timeout:g} s ({len(ranked)})"}
    if not silent:
        return out
    named = " ".join(f"node {s['node']} {s['reason']}: handled as a lost node." for s in silent)
    if on_failure != "exclude":
        out.update(action="stop", message=(
            f"{named} The run stops before the node phases: rerun site.yml once AmlCompute marks it or it answers "
            "again, or set healthcheck_on_failure: exclude with healthcheck_spare_nodes to go on without it."))
        return out
    addresses = {n["host"]: str(n.get("ip") or "") for n in ranked}
    failing = [{"node": s["node"], "reasons": [f"did not answer within {timeout:g} s at the start of the node "
                                               f"phases (listed as {s['listed'] or 'usable'})"],
                "checks": ["answer"]} for s in silent]
    new = health_verdict({n["host"]: [] for n in ranked}, [n["host"] for n in ranked], on_failure="exclude",
                         spares=int(spares), addresses=addresses, port=int(port), failing=failing)
    if new["action"] != "exclude":
        out.update(action="stop", message=f"{named} {new['message']}")
        return out
    head_moves = "".join(f", and the head's role (rendezvous, job environment) moves from {m['from']} to {m['to']}"
                         for m in moved)
    out.update(action="exclude", verdict=new, message=(
        f"{named} Left out (healthcheck_spare_nodes: {spares}): {PHASES} run on {', '.join(new['good'])}, "
        f"its shard moves to them{head_moves}."))
    return out


def job_head(ranked: Sequence[str], good: Sequence[str] | None, silent: Iterable[str]) -> str:
    """The node whose job environment submit reads: the first of ``ranked`` that trains (in
    ``good``, the gate's verdict, where there is one) and did not stay silent ('' when none)."""
    silent = set(silent)
    return next((h for h in ranked if h not in silent and (good is None or h in set(good))), "")
