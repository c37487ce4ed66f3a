# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters of the ssh_trust role (logic in plugins/module_utils/amlhpc/trust/ssh_trust.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.lazy_logic import lazy


class FilterModule:
    """ssh_trust filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_nodefile_lines": lazy("trust.ssh_trust", "nodefile_lines", errors=(ValueError,)),
            "amlhpc_known_hosts_block": lazy("trust.ssh_trust", "known_hosts_block"),
            "amlhpc_ssh_trust_plan": lazy("trust.ssh_trust", "cluster_plan", errors=(ValueError,)),
            "amlhpc_head_key_command": lazy("trust.ssh_trust", "head_key_command"),
            "amlhpc_head_key_state": lazy("trust.ssh_trust", "head_key_state"),
            "amlhpc_controller_host_keys": lazy("trust.ssh_trust", "controller_host_keys"),
            "amlhpc_pinned_host_keys": lazy("trust.ssh_trust", "pinned_host_keys"),
            "amlhpc_scanned_host_keys": lazy("trust.ssh_trust", "scanned_host_keys"),
        }
