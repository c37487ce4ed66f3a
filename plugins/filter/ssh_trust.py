"""Filters of the ssh_trust role (logic in plugins/module_utils/amlhpc/ssh_trust.py)."""

from __future__ import annotations

import os
import sys
from typing import Any

_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from ansible.errors import AnsibleFilterError  # noqa: E402

from amlhpc.ssh_trust import cluster_plan, known_hosts_block, nodefile_lines  # noqa: E402


def _nodefile_lines(nodes: Any) -> list[str]:
    try:
        return nodefile_lines(nodes)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def _cluster_plan(nodes: Any) -> dict[str, dict[str, Any]]:
    try:
        return cluster_plan(nodes)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """ssh_trust filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_nodefile_lines": _nodefile_lines,
            "amlhpc_known_hosts_block": known_hosts_block,
            "amlhpc_ssh_trust_plan": _cluster_plan,
        }
