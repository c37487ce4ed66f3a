"""Filters that expose the project's pure logic (plugins/module_utils/amlhpc) to playbooks."""

from __future__ import annotations

import os
import sys
from typing import Any

_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from amlhpc.inventory_checks import inventory_problems  # noqa: E402
from amlhpc.report import run_report  # noqa: E402


def cluster_nodes(hostvars: Any, hosts: list[str]) -> list[dict[str, Any]]:
    """Hostvars of ``hosts`` with ``inventory_hostname`` set, in cluster and rank order."""
    out = []
    for name in hosts:
        hv = dict(hostvars[name])
        hv["inventory_hostname"] = name
        out.append(hv)
    return sorted(out, key=lambda h: (str(h.get("aml_cluster", "")), h.get("aml_node_rank", 0)))


class FilterModule:
    """amlhpc filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_cluster_nodes": cluster_nodes,
            "amlhpc_inventory_problems": inventory_problems,
            "amlhpc_run_report": run_report,
        }
