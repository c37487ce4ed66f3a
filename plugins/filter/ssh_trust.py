# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters of the ssh_trust role (logic in plugins/module_utils/amlhpc/ssh_trust.py)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError  # noqa: E402

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.ssh_trust import cluster_plan, known_hosts_block, nodefile_lines


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
