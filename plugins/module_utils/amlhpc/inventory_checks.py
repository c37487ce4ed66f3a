# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Sanity checks of the inventory, run by the first play of site.yml.

Every problem is one sentence that names the fix.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from .autoscale import autoscale_refusal

# Node states in which a node can take part in a job (AmlCompute nodeState values).
USABLE_STATES = frozenset({"idle", "running", "preparing"})


def _nodes_by_cluster(nodes: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    clusters: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for node in nodes:
        clusters[str(node.get("aml_cluster", ""))].append(node)
    return dict(clusters)


def inventory_problems(nodes: Iterable[Mapping[str, Any]], beeond_enabled: bool = False) -> list[str]:
    """Return a sentence for each thing wrong with the cluster nodes of an inventory.

    ``nodes`` holds one mapping per host: its hostvars plus ``inventory_hostname``.
    """
    problems: list[str] = []
    nodes = list(nodes)
    if not nodes:
        return ["the inventory has no hosts in group 'aml_nodes': point -i at a "
                "*.azureml_compute.yml file or at inventory/local"]
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
            refusal = autoscale_refusal(cluster, members[0].get("aml_cluster_min_nodes"),
                                        members[0].get("aml_cluster_max_nodes"))
            if refusal:
                problems.append(refusal)
    return problems
