# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters of the healthcheck role: thin wrappers around plugins/module_utils/amlhpc/health/health.py.

Each is documented in plugins/filter/<name>.yml (ansible-doc -t filter amlhpc.azureml.<name>)."""

from __future__ import annotations

from typing import Any

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.lazy_logic import lazy, logic


def tools(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        key, _unused, path = line.partition("=")
        if key:
            out[key.strip()] = path.strip()
    return out


def nvsmi_args(binary: str, kind: str) -> list[str]:
    health = logic("health.health")
    if kind == "gpu":
        return health.nvidia_smi_gpu_args(binary)
    if kind == "remap":
        return health.nvidia_smi_remap_args(binary)
    raise ValueError(f"kind must be gpu or remap, not {kind!r}")


def h2d(outputs: Any, tool: str, minimum: Any) -> dict[str, Any]:
    if isinstance(outputs, str):
        outputs = [outputs]
    return logic("health.health").h2d_check(tool, list(outputs), None if minimum in (None, "") else float(minimum))


def nccl(text: str, name: str, minimum: Any) -> dict[str, Any]:
    return logic("health.health").nccl_check(name, text, None if minimum in (None, "") else float(minimum))


def report(hostvars: Any, all_hosts: list[str], active_hosts: list[str], cluster_run: Any = None) -> dict[str, Any]:
    results = {host: hostvars[host].get("healthcheck_checks") if host in active_hosts else None for host in all_hosts}
    health = logic("health.health")
    return health.report(health.with_cluster_checks(results, (cluster_run or {}).get("results") or []))


def cluster_runs(hostvars: Any, hosts: list[str]) -> list[dict[str, Any]]:
    """The multi-node NCCL commands each head's healthcheck_node decided on, with the head."""
    return [{"head": host, **run} for host in hosts for run in hostvars[host].get("healthcheck_cluster_runs") or []]


class FilterModule:
    """amlhpc health-check filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_health_thresholds": lazy("health.health", "thresholds_for"),
            "amlhpc_health_tools": tools,
            "amlhpc_health_nvsmi_args": nvsmi_args,
            "amlhpc_health_gpu_checks": lazy("health.health", "gpu_checks"),
            "amlhpc_health_h2d_check": h2d,
            "amlhpc_health_nccl_check": nccl,
            "amlhpc_health_fs_checks": lambda result, tool, limits: logic("health.health").fs_checks(tool, result, limits),
            "amlhpc_health_skip": lazy("health.health", "skipped"),
            "amlhpc_health_report": report,
            "amlhpc_health_cluster_runs": cluster_runs,
        }
