# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filter of the report play: a thin wrapper around plugins/module_utils/amlhpc/report_html.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.report_html import report_html

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
