# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters of the healthcheck role's pair gate: thin wrappers around
plugins/module_utils/amlhpc/health/pair_gate.py (the rounds) and pair_gate_report.py (the state the
role carries, with its summary, and the verdicts as checks), documented in plugins/filter/<name>.yml."""

from __future__ import annotations

from typing import Any

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.lazy_logic import logic


def _addresses(hostvars: Any, hosts: list[str]) -> dict[str, str]:
    """Each node's address as its probe echoed it (``healthcheck_pair_address``, templated on the node)."""
    return {h: str((hostvars[h].get("healthcheck_pair_probe") or {}).get("address") or h) for h in hosts}


def start(hostvars: Any, hosts: list[str], settings: dict[str, Any]) -> dict[str, Any]:
    """The gate before round 1, from each node's probe (``healthcheck_pair_probe``)."""
    gate = logic("health.pair_gate")
    if len(hosts) < 2:
        return gate.skipped_state(hosts, "single node: no partner to test with")
    found = {h: (hostvars[h].get("healthcheck_pair_probe") or {}).get("found") or {} for h in hosts}
    tool, reason = gate.choose_tool(found, str(settings.get("tool") or "auto"))
    if not tool:
        return gate.skipped_state(hosts, reason)
    try:
        minimum = gate.pair_minimum(settings.get("vm_size"), tool, settings.get("thresholds"))
        warning = gate.floor_warning(settings.get("vm_size"), tool, settings.get("thresholds"))
        # iperf3 runs over the interface the probe read the link speed of; the other tools over InfiniBand.
        speeds = {h: (hostvars[h].get("healthcheck_pair_probe") or {}).get("link_speed_mbps") for h in hosts}
        link = gate.link_speed_warning(speeds) if tool == "iperf3" else ""
    except ValueError as exc:
        from ansible.errors import AnsibleFilterError
        raise AnsibleFilterError(str(exc)) from exc
    state = gate.start(hosts, tool, minimum=minimum, relative=float(settings.get("relative", gate.RELATIVE)),
                       max_rounds=int(settings.get("max_rounds", gate.MAX_ROUNDS)),
                       readings=int(settings.get("readings", gate.READINGS)), warnings=[warning, link])
    state["tool_reason"] = reason
    report = logic("health.pair_gate_report")
    return report.with_roles(state, _addresses(hostvars, hosts), int(settings.get("port", 5300)))


def advance(state: dict[str, Any], hostvars: Any, hosts: list[str], base_port: int) -> dict[str, Any]:
    """Judge the round just run from the clients' ``healthcheck_pair_client`` and plan the next."""
    gate = logic("health.pair_gate")
    results = {h: hostvars[h].get("healthcheck_pair_client") for h in state.get("roles") or {} if h in hostvars}
    new = gate.advance(state, gate.client_figures(state, results))
    return logic("health.pair_gate_report").with_roles(new, _addresses(hostvars, hosts), int(base_port))


def checks(state: dict[str, Any], node: str) -> list[dict[str, Any]]:
    """This node's pair_link check (health.py's check dict shape), none when it was not in the gate."""
    return logic("health.pair_gate_report").node_checks(state).get(node, [])


class FilterModule:
    """amlhpc pair-gate filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_pair_gate_start": start,
            "amlhpc_pair_gate_advance": advance,
            "amlhpc_pair_gate_checks": checks,
        }
