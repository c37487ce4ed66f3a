"""The pair gate run to its end against a simulated fabric (tests and bench only).

``simulate(nodes, bandwidth)`` drives ``amlhpc.health.pair_gate``'s ``start`` and ``advance``
as the healthcheck role does, calling ``bandwidth(a, b) -> float | None`` once per reading. It
is not product code: the role drives the gate from the nodes' real readings.
"""

from __future__ import annotations

from typing import Any

from amlhpc.health import pair_gate


def simulate(nodes: list[str], bandwidth: Any, tool: str = "iperf3", **kw: Any) -> dict[str, Any]:
    """Run the gate against ``bandwidth(a, b) -> float | None``, called once per reading."""
    state = pair_gate.start(nodes, tool, **kw)
    while not state["done"]:
        k = state["next_readings"]
        figures = {b: {"values": [v for v in (bandwidth(a, b) for _i in range(k)) if v is not None], "error": ""}
                   for a, b in state["next"]}
        state = pair_gate.advance(state, figures)
    return state
