# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Sanity checks of the inventory, run by the first play of site.yml.

Every problem is one sentence that names the fix.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ..azure.autoscale import autoscale_refusal

# Node states in which a node can take part in a job (AmlCompute nodeState values).
USABLE_STATES = frozenset({"idle", "running", "preparing"})


def _nodes_by_cluster(nodes: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    clusters: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for node in nodes:
        clusters[str(node.get("aml_cluster", ""))].append(node)
    return dict(clusters)


PLUGIN_SUFFIXES = (".azureml_compute.yml", ".azureml_compute.yaml")


def no_nodes_problem(sources: Iterable[str] = (), cluster_manage: bool = False) -> str:
    """The sentence for an inventory without cluster nodes, naming the fix that applies: an
    azureml_compute source that lists none (a cluster scaled to 0 or not created, nodes left
    out) is scaled by playbooks/cluster.yml only where aml_cluster_manage is true."""
    ours = [str(s) for s in sources if str(s).endswith(PLUGIN_SUFFIXES)]
    if not ours:
        return ("the inventory has no hosts in group 'aml_nodes': point -i at a "
                "*.azureml_compute.yml file or at inventory/local")
    where = f"the inventory {', '.join(ours)} lists no usable node (its warnings above say which cluster and why)"
    if cluster_manage:
        return (f"{where}: playbooks/cluster.yml creates or scales the cluster (site.yml runs it first, tag "
                "cluster), so run it without skipping that tag, or check the plugin's clusters and node_filter")
    return (f"{where}: aml_cluster_manage is false, so nothing here scales it: scale the cluster up in AzureML, "
            "or set aml_cluster_manage: true to let playbooks/cluster.yml do it")


def inventory_problems(nodes: Iterable[Mapping[str, Any]], beeond_enabled: bool = False,
                       sources: Iterable[str] = (), cluster_manage: bool = False) -> list[str]:
    """Return a sentence for each thing wrong with the cluster nodes of an inventory.

    ``nodes`` holds one mapping per host: its hostvars plus ``inventory_hostname``.
    ``sources`` (the inventory sources, ``ansible_inventory_sources``) and ``cluster_manage``
    (``aml_cluster_manage``) choose the fix named when there are none.
    """
    problems: list[str] = []
    nodes = list(nodes)
    if not nodes:
        return [no_nodes_problem(sources, cluster_manage)]
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
