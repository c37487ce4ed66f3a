"""The start-up check that the ranks' file lists form a partition of the data set (issue 10, defect 1)."""

from __future__ import annotations

import threading

import pytest
from conftest import HANG_S
from cosmoflow.partition import check_partition, fixed_subset, partition_problem, subset_quota, uneven_note

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


def run_ranks(lists, nodes, scope, check=None):
    """check_partition (or ``check(names, node, local_rank, gather)``) on len(lists) threads
    with a real all-gather between them."""
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
        if check is None:
            results[rank] = check_partition("train", lists[rank], scope, nodes[rank], local[rank],
                                            gather_for(rank))
        else:
            results[rank] = check(lists[rank], nodes[rank], local[rank], gather_for(rank))

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=HANG_S)  # a hang guard: the check takes milliseconds
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


# Issue 36, item 4: node shards of unequal size are refused (the reference reads as many files
# on every node), and --n-train/--n-valid pick one fixed subset, the first files by name.

def subset(scope, limit):
    """fixed_subset as run_ranks' check."""
    return lambda names, node, _unused, gather: fixed_subset("train", names, scope, node, limit, 1, gather)


def test_unequal_node_shards_are_refused_naming_the_files_per_node():
    shards = [FILES[k::5] for k in range(5)]  # 3, 3, 2, 2, 2 files
    nodes = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    results = run_ranks([shards[n] for n in nodes], nodes, "node",
                        subset("node", 0))
    assert len({r[1] for r in results}) == 1
    files, problem = results[0]
    assert files == [] and problem == (
        "train: data scope node reads the same number of files on every node, but the shards differ "
        "(3 files on nodes 0, 1; 2 on nodes 2, 3, 4); stage shards of one size, or give --n-train a multiple "
        "of 5 up to 10.")


def test_equal_node_shards_are_read_whole():
    shards = node_shards(3)
    nodes = [0, 0, 1, 1, 2, 2]
    results = run_ranks([list(reversed(shards[n])) for n in nodes], nodes, "node",
                        subset("node", 0))
    assert [r[0] for r in results] == [shards[n] for n in nodes] and all(r[1] is None for r in results)


def test_n_train_takes_the_first_files_of_each_node_by_name():
    shards = [FILES[k::5] for k in range(5)]
    nodes = [0, 1, 2, 3, 4]
    results = run_ranks([shards[n] for n in nodes], nodes, "node",
                        subset("node", 10))
    assert results == [(shards[n][:2], None) for n in nodes]
    paths = ["/d/train/" + f for f in reversed(FILES)]
    (files, problem), = run_ranks([paths], [0], "global", subset("global", 4))
    assert files == ["/d/train/" + f for f in FILES[:4]] and problem is None


@pytest.mark.parametrize(("counts", "scope", "limit", "records", "expected"), [
    ({0: 12}, "global", 0, 1, (12, None)),
    ({0: 12}, "global", 8, 4, (2, None)),
    ({0: 12}, "global", 6, 4, (0, "train: --n-train 6 is not a whole number of 4-record files; "
                                  "give a multiple of 4.")),
    ({0: 12}, "global", 16, 1, (0, "train: --n-train 16 needs 16 files, but the data set holds 12; "
                                   "give --n-train at most 12.")),
    ({0: 4, 1: 4, 2: 3}, "node", 9, 1, (3, None)),
    ({0: 4, 1: 4, 2: 3}, "node", 10, 1, (0, "train: --n-train 10 is not a whole number of 1-record files "
                                            "on each of 3 nodes; give a multiple of 3.")),
    ({0: 4, 1: 4, 2: 3}, "node", 12, 1, (0, "train: --n-train 12 needs 4 files on each of 3 nodes, but the "
                                            "nodes hold 4 files on nodes 0, 1; 3 on node 2; "
                                            "give --n-train at most 9.")),
])
def test_subset_quota(counts, scope, limit, records, expected):
    assert subset_quota("train", counts, scope, limit, records) == expected


def test_the_validation_limit_is_named_by_its_flag():
    assert "--n-valid 5" in subset_quota("validation", {0: 2, 1: 2}, "node", 5)[1]


def test_uneven_shards_read_evenly_only_when_asked():
    """--uneven-shards even (the playbooks' choice where the health gate left a node out): every
    node reads as many files as the smallest shard, and one line says how many stay unread."""
    counts = {0: 22, 1: 21, 2: 21}
    assert subset_quota("train", counts, "node", 0)[0] == 0  # refused, the reference's rule
    assert subset_quota("train", counts, "node", 0, even=True) == (21, None)
    assert uneven_note("train", counts, 21) == (
        "train: the node shards differ (22 files on node 0; 21 on nodes 1, 2): every node reads its first 21 "
        "files by name, every epoch, and 1 file(s) stay unread (--uneven-shards even).")
    assert uneven_note("train", {0: 21, 1: 21}, 21) is None
    # An explicit limit is still checked as before.
    assert "needs 22 files" in subset_quota("train", counts, "node", 66, even=True)[1]
