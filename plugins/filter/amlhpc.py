# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters that expose the project's pure logic (plugins/module_utils/amlhpc) to playbooks."""

from __future__ import annotations

from typing import Any

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.lazy_logic import lazy


# What describes a node; cluster_nodes copies only these (and any extra keys asked for), so
# that N hosts each listing N nodes template N x (a few) variables, not N x all hostvars.
NODE_KEYS = ("aml_cluster", "aml_node_rank", "aml_private_ip", "aml_node_id", "aml_node_state",
             "aml_run_id", "aml_cluster_min_nodes", "aml_cluster_max_nodes", "aml_vm_size",
             "ansible_host", "ansible_port")


def cluster_nodes(hostvars: Any, hosts: list[str], extra_keys: list[str] | tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The node variables of ``hosts`` (plus ``extra_keys`` where set) with
    ``inventory_hostname``, in cluster and rank order."""
    out = []
    for name in hosts:
        hv = hostvars[name]
        node = {key: hv[key] for key in (*NODE_KEYS, *extra_keys) if key in hv}
        node["inventory_hostname"] = name
        out.append(node)
    return sorted(out, key=lambda h: (str(h.get("aml_cluster", "")), h.get("aml_node_rank", 0)))


class FilterModule:
    """amlhpc filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_cluster_nodes": cluster_nodes,
            "amlhpc_cluster_group": lazy("azure.aml_nodes", "group_name"),
            "amlhpc_inventory_problems": lazy("validate.inventory_checks", "inventory_problems"),
            "amlhpc_run_report": lazy("report.report", "run_report"),
            "amlhpc_data_scope": lazy("azure.job_spec", "data_scope_for"),
            "amlhpc_data_scope_problem": lazy("azure.job_spec", "data_scope_problem"),
            "amlhpc_stage_shared_problem": lazy("azure.job_spec", "stage_shared_problem"),
            "amlhpc_stage_read_command": lazy("staging.azcopy_handoff", "shard_read_command", (ValueError,)),
            "amlhpc_stage_handoff": lazy("staging.azcopy_handoff", "stage_handoff"),
            "amlhpc_roles_to_check": lazy("validate.variable_checks", "roles_to_check"),
            "amlhpc_host_key_problem": lazy("trust.host_key_checks", "host_key_problem"),
            "amlhpc_control_socket_problem": lazy("trust.control_socket", "control_socket_problem"),
        }
