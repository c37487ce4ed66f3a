"""The start-up check that the ranks' file lists form a partition of the data set (issue 10, defect 1)."""

from __future__ import annotations

import threading

import pytest

from cosmoflow.partition import check_partition, partition_problem

FILES = [f"univ_{i:03d}.tfrecord" for i in range(12)]


def node_shards(n_nodes):
    return [FILES[k::n_nodes] for k in range(n_nodes)]


def test_global_scope_on_shared_storage_is_a_partition():
    assert partition_problem("train", [FILES] * 4, [0, 0, 1, 1], "global") is None


def test_global_scope_on_node_local_shards_names_the_missing_files():
    shards = node_shards(2)
    problem = partition_problem("train", [shards[0], shards[0], shards[1], shards[1]], [0, 0, 1, 1], "global")
    assert problem.startswith("train: data scope global needs every rank to see the same files")
    assert "rank 0 (node 0) lacks 6: univ_001.tfrecord, univ_003.tfrecord" in problem
    assert "rank 2 (node 1) lacks 6: univ_000.tfrecord" in problem
    assert "use --data-scope node" in problem and problem.count(".") >= 1


def test_node_scope_on_node_local_shards_is_a_partition():
    shards = node_shards(3)
    lists = [shards[n] for n in (0, 0, 1, 1, 2, 2)]
    assert partition_problem("train", lists, [0, 0, 1, 1, 2, 2], "node") is None


def test_node_scope_on_shared_storage_names_the_doubled_files():
    problem = partition_problem("validation", [FILES] * 4, [0, 0, 1, 1], "node")
    assert problem.startswith("validation: data scope node needs each file on one node only, but 12 file(s)")
    assert "univ_000.tfrecord, univ_001.tfrecord, univ_002.tfrecord, univ_003.tfrecord, univ_004.tfrecord " \
           "and 7 more" in problem
    assert "--data-scope global" in problem


def test_node_scope_ranks_of_one_node_must_agree():
    problem = partition_problem("train", [FILES[:6], FILES[:5]], [0, 0], "node")
    assert "rank 1 (node 0) lacks 1: univ_005.tfrecord" in problem


def run_ranks(lists, nodes, scope):
    """check_partition on len(lists) threads with a real all-gather between them."""
    world = len(lists)
    slots, barrier, results = [None] * world, threading.Barrier(world), [None] * world
    local = [sum(1 for r in range(rank) if nodes[r] == nodes[rank]) for rank in range(world)]

    def gather_for(rank):
        def gather(obj):
            slots[rank] = obj
            barrier.wait()
            out = list(slots)
            barrier.wait()
            return out
        return gather

    def body(rank):
        results[rank] = check_partition("train", lists[rank], scope, nodes[rank], local[rank], gather_for(rank))

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


@pytest.mark.parametrize(("scope", "storage", "ok"), [
    ("global", "shared", True), ("global", "local", False), ("node", "local", True), ("node", "shared", False)])
def test_collective_check_agrees_on_every_rank(scope, storage, ok):
    nodes = [0, 0, 1, 1]
    lists = [FILES] * 4 if storage == "shared" else [node_shards(2)[n] for n in nodes]
    results = run_ranks(lists, nodes, scope)
    assert len(set(results)) == 1
    assert (results[0] is None) == ok
    if not ok:
        assert results[0] == partition_problem("train", lists, nodes, scope)


def test_one_file_on_two_nodes_is_found_by_the_hashes():
    shards = node_shards(2)
    lists = [shards[0], shards[0] + [FILES[1]], shards[1], shards[1]]
    results = run_ranks(lists, [0, 0, 1, 1], "node")
    assert "rank 0 (node 0) lacks 1: univ_001.tfrecord" in results[0]
    lists = [shards[0] + [FILES[1]]] * 2 + [shards[1]] * 2
    results = run_ranks(lists, [0, 0, 1, 1], "node")
    assert "1 file(s) are on several nodes: univ_001.tfrecord (e.g. on nodes 0, 1)" in results[0]
