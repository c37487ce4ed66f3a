"""Filter of the report play: a thin wrapper around plugins/module_utils/amlhpc/report_html.py."""

from __future__ import annotations

import os
import sys
from typing import Any

_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from amlhpc.report_html import report_html  # noqa: E402

DOCUMENTATION = r"""
name: amlhpc_report
short_description: The run's self-contained HTML report
description:
  - C(amlhpc_report_html(node_vars, job, summary_lines, title, cache_dir)) one HTML page (inline CSS, PNG plots as
    data URIs) with staging throughput, health checks against thresholds, NCCL bus bandwidth by
    message size, shared-mount throughput and training loss and validation MAE per epoch.
  - I(node_vars) is the output of C(amlhpc_cluster_nodes) with the registered results
    (stage_result, healthcheck_checks, healthcheck_nccl_node_run, healthcheck_nccl_cluster_run,
    healthcheck_fs_bench_run, healthcheck_elbencho_run); I(job) the aml_job result; I(cache_dir) where
    matplotlib keeps its font cache (default ~/.cache/matplotlib).
"""


class FilterModule:
    """amlhpc report filter."""

    def filters(self) -> dict[str, Any]:
        return {"amlhpc_report_html": report_html}
