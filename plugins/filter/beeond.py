"""Filters of the beeond role (logic in plugins/module_utils/amlhpc/beeond.py)."""

from __future__ import annotations

import os
import sys
from typing import Any

_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from amlhpc.beeond import (  # noqa: E402
    autoscale_refusal,
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
