# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters of the beeond role (logic in plugins/module_utils/amlhpc/nodes/beeond.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.lazy_logic import lazy


class FilterModule:
    """beeond filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_beeond_autoscale_refusal": lazy("azure.autoscale", "autoscale_refusal"),
            "amlhpc_beeond_start_argv": lazy("nodes.beeond", "build_start_argv"),
            "amlhpc_beeond_stop_argv": lazy("nodes.beeond", "build_stop_argv"),
            "amlhpc_beeond_nodefile_problems": lazy("nodes.beeond", "nodefile_problems"),
            "amlhpc_beeond_tcp_fallbacks": lazy("nodes.beeond", "tcp_fallbacks"),
            "amlhpc_beeond_rdma_connections": lazy("nodes.beeond", "rdma_connections"),
        }
