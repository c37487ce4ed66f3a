# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters of the beeond role (logic in plugins/module_utils/amlhpc/beeond.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.autoscale import autoscale_refusal
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.beeond import (
    build_start_argv,
    build_stop_argv,
    nodefile_problems,
    rdma_connections,
    tcp_fallbacks,
)


class FilterModule:
    """beeond filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_beeond_autoscale_refusal": autoscale_refusal,
            "amlhpc_beeond_start_argv": build_start_argv,
            "amlhpc_beeond_stop_argv": build_stop_argv,
            "amlhpc_beeond_nodefile_problems": nodefile_problems,
            "amlhpc_beeond_tcp_fallbacks": tcp_fallbacks,
            "amlhpc_beeond_rdma_connections": rdma_connections,
        }
