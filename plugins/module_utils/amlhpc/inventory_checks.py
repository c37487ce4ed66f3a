"""Sanity checks of the inventory, run by the first play of site.yml.

Every problem is one sentence that names the fix.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

# Node states in which a node can take part in a job (AmlCompute nodeState values).
USABLE_STATES = frozenset({"idle", "running", "preparing"})

# amlhpc_profile values: what the roles know how to run on.
PROFILES = {
    "azureml": "AmlCompute nodes, the default",
    "local": "this machine as a one-node cluster, inventory/local.yml",
}


def profile_problem(profile: str) -> str | None:
    """The sentence refusing an ``amlhpc_profile`` the roles do not know (None: known)."""
    if profile in PROFILES:
        return None
    choices = " or ".join(f"'{name}' ({what})" for name, what in PROFILES.items())
    return f"amlhpc_profile '{profile}' is not a profile: use {choices}"


def _nodes_by_cluster(nodes: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    clusters: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for node in nodes:
        clusters[str(node.get("aml_cluster", ""))].append(node)
    return dict(clusters)


def inventory_problems(nodes: Iterable[Mapping[str, Any]], beeond_enabled: bool = False,
                       profile: str = "azureml") -> list[str]:
    """Return a sentence for each thing wrong with the cluster nodes of an inventory.

    ``nodes`` holds one mapping per host: its hostvars plus ``inventory_hostname``.
    """
    problems: list[str] = []
    wrong_profile = profile_problem(str(profile))
    if wrong_profile:
        return [wrong_profile]
    nodes = list(nodes)
    if not nodes:
        return ["the inventory has no hosts in group 'aml_nodes': point -i at a "
                "*.azureml_compute.yml file or at inventory/local.yml"]
    for cluster, members in sorted(_nodes_by_cluster(nodes).items()):
        names = sorted(str(m["inventory_hostname"]) for m in members)
        if not cluster:
            problems.append(f"hosts {', '.join(names)} have no aml_cluster: set it "
                            "(the azureml_compute inventory plugin does)")
            continue
        ranks = sorted(m.get("aml_node_rank") for m in members if isinstance(m.get("aml_node_rank"), int))
        if len(ranks) != len(members):
            problems.append(f"cluster '{cluster}': every host needs an integer aml_node_rank")
        elif ranks != list(range(len(members))):
            problems.append(f"cluster '{cluster}': aml_node_rank must run 0..{len(members) - 1} "
                            f"without gaps or repeats, found {ranks}")
        ips = [m.get("aml_private_ip") for m in members]
        dupes = sorted({ip for ip in ips if ip and ips.count(ip) > 1})
        if any(not ip for ip in ips):
            problems.append(f"cluster '{cluster}': every host needs aml_private_ip")
        elif dupes:
            problems.append(f"cluster '{cluster}': private IPs {', '.join(dupes)} appear on "
                            "more than one host")
        bad_state = sorted(str(m["inventory_hostname"]) for m in members
                           if m.get("aml_node_state", "idle") not in USABLE_STATES)
        if bad_state:
            problems.append(f"cluster '{cluster}': nodes {', '.join(bad_state)} are not usable "
                            "(state not idle/running): leave them out with the plugin's node_filter "
                            "or wait until they are idle")
        if beeond_enabled:
            low = members[0].get("aml_cluster_min_nodes")
            high = members[0].get("aml_cluster_max_nodes")
            if low is None or high is None:
                # Fail closed: a cluster that might autoscale would lose BeeOND on a scale-down.
                problems.append(f"cluster '{cluster}': its min/max node counts are unknown, so nothing "
                                "shows that it cannot scale down under BeeOND: set min_nodes and "
                                "max_nodes in its *.azureml_compute.yml file (the SDK sources read "
                                "them from the cluster), or set beeond_enabled: false")
            elif low != high:
                problems.append(f"cluster '{cluster}' autoscales (min {low}, max {high}); BeeOND "
                                "needs min_nodes == max_nodes: fix the cluster size or set "
                                "beeond_enabled: false")
    return problems
