from __future__ import annotations

from amlhpc.validate.inventory_checks import inventory_problems


def node(name, rank, ip, cluster="gpu", state="idle", **extra):
    return {"inventory_hostname": name, "aml_cluster": cluster, "aml_node_rank": rank,
            "aml_private_ip": ip, "aml_node_state": state, **extra}


def test_good_cluster_has_no_problems():
    nodes = [node(f"n{i}", i, f"10.0.0.{i + 4}") for i in range(4)]
    assert inventory_problems(nodes) == []


def test_empty_inventory_names_the_fix():
    (problem,) = inventory_problems([])
    assert "aml_nodes" in problem and "-i" in problem


def test_an_empty_azureml_compute_inventory_names_the_fix_that_applies():
    """-i is already a *.azureml_compute.yml file: the sentence names it instead of asking for
    one, and names cluster.yml as the fix only where aml_cluster_manage lets it act."""
    src = "/p/inventory/gpu.azureml_compute.yml"
    (off,) = inventory_problems([], sources=["/p/inventory/local", src], cluster_manage=False)
    assert off.startswith(f"the inventory {src} lists no usable node (its warnings above say which cluster and why): ")
    assert "aml_cluster_manage is false" in off and "scale the cluster up in AzureML" in off and "point -i" not in off
    (on,) = inventory_problems([], sources=[src], cluster_manage=True)
    assert "playbooks/cluster.yml creates or scales the cluster" in on and "aml_cluster_manage is false" not in on


def test_rank_gap_is_reported():
    nodes = [node("a", 0, "10.0.0.4"), node("b", 2, "10.0.0.5")]
    (problem,) = inventory_problems(nodes)
    assert "0..1" in problem and "[0, 2]" in problem


def test_duplicate_private_ip_is_reported():
    nodes = [node("a", 0, "10.0.0.4"), node("b", 1, "10.0.0.4")]
    (problem,) = inventory_problems(nodes)
    assert "10.0.0.4" in problem


def test_unusable_node_is_named():
    nodes = [node("a", 0, "10.0.0.4"), node("b", 1, "10.0.0.5", state="unusable")]
    (problem,) = inventory_problems(nodes)
    assert "b" in problem and "node_filter" in problem


def test_autoscaling_cluster_refused_only_with_beeond():
    nodes = [node(f"n{i}", i, f"10.0.0.{i}", aml_cluster_min_nodes=0, aml_cluster_max_nodes=4)
             for i in range(2)]
    assert inventory_problems(nodes) == []
    (problem,) = inventory_problems(nodes, beeond_enabled=True)
    assert "autoscales (min 0, max 4)" in problem and "min_nodes == max_nodes" in problem


def test_clusters_are_checked_separately():
    nodes = [node("a0", 0, "10.0.0.4", cluster="a"), node("b0", 0, "10.0.0.4", cluster="b")]
    assert inventory_problems(nodes) == []


def test_beeond_on_a_cluster_of_unknown_size_is_refused():
    nodes = [node(f"n{i}", i, f"10.0.0.{i}") for i in range(2)]
    assert inventory_problems(nodes) == []
    (problem,) = inventory_problems(nodes, beeond_enabled=True)
    assert problem.startswith("cluster 'gpu': its min/max node counts are unknown")
    assert "set min_nodes and max_nodes" in problem and "beeond_enabled: false" in problem
    half = [node(f"n{i}", i, f"10.0.0.{i}", aml_cluster_max_nodes=2) for i in range(2)]
    assert inventory_problems(half, beeond_enabled=True) == [problem]
