# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters of the health verdict: thin wrappers around plugins/module_utils/amlhpc/health/health_verdict.py.

Each is documented in plugins/filter/<name>.yml (ansible-doc -t filter amlhpc.azureml.<name>)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.lazy_logic import logic


def _results(hostvars: Any, all_hosts: list[str], active_hosts: list[str], cluster_run: Any) -> dict[str, Any]:
    """Each node's checks as the report sees them (its own, its cluster's, the pair gate's)."""
    results = {}
    for host in all_hosts:
        checks = hostvars[host].get("healthcheck_checks") if host in active_hosts else None
        extra = hostvars[host].get("healthcheck_pair_checks") or []
        if checks is not None:
            # Each check once: a pair verdict already in healthcheck_checks is not added again.
            have = {c.get("check") for c in checks}
            checks = [*checks, *(c for c in extra if c.get("check") not in have)]
        results[host] = checks
    return logic("health.health").with_cluster_checks(results, (cluster_run or {}).get("results") or [])


def _ranked(hostvars: Any, hosts: list[str]) -> list[str]:
    def key(host: str) -> tuple[str, int, str]:
        hv = hostvars[host]
        return (str(hv.get("aml_cluster", "")), int(hv.get("aml_node_rank", 0) or 0), host)
    return sorted(hosts, key=key)


def verdict(hostvars: Any, all_hosts: list[str], active_hosts: list[str], cluster_run: Any = None,
            report: Any = None, on_failure: str = "stop", spares: int = 0, ignore_failures: bool = False,
            port: int = 29400) -> dict[str, Any]:
    """The run's decision; with health.json's content under ``health_json``."""
    results = _results(hostvars, all_hosts, active_hosts, cluster_run)
    logic_ = logic("health.health_verdict")
    report = report or {}
    addresses = {h: str(hostvars[h].get("aml_private_ip") or "") for h in all_hosts}
    try:
        out = logic_.verdict(results, _ranked(hostvars, list(all_hosts)), on_failure=on_failure,
                             spares=int(spares), ignore_failures=bool(ignore_failures), addresses=addresses,
                             port=int(port), stop_message=str(report.get("message") or ""),
                             failing=report.get("failing"))
    except logic_.VerdictError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    out["health_json"] = logic_.health_json(out, results)
    out["report_lines"] = logic_.report_lines(out)
    return out


def node_file(v: dict[str, Any], node: str) -> dict[str, Any]:
    return logic("health.health_verdict").node_file(v, node)


class FilterModule:
    """amlhpc health-verdict filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_health_verdict": verdict,
            "amlhpc_health_node_verdict": node_file,
        }
