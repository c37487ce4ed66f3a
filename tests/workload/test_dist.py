from __future__ import annotations

import pytest

from cosmoflow.dist import (Collectives, CollectiveError, Layout, Watchdog, collective_failure, env_layout,
                            gpu_index, node_key, node_layout, node_problem, rendezvous)


def test_torchrun_environment():
    env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1"}
    assert env_layout(env) == Layout(5, 8, 1, 4, launcher="torchrun")


def test_openmpi_environment():
    env = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "OMPI_COMM_WORLD_NODE_RANK": "3"}
    assert env_layout(env) == Layout(3, 16, 3, 8, launcher="openmpi")


def test_intel_mpi_environment():
    env = {"PMI_RANK": "9", "PMI_SIZE": "16", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "8"}
    assert env_layout(env) == Layout(9, 16, 1, 8, launcher="pmi")


def test_no_launcher_is_one_process():
    assert env_layout({}) == Layout()


def test_missing_local_rank_is_refused():
    with pytest.raises(RuntimeError, match="LOCAL_RANK"):
        env_layout({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"})


def test_inconsistent_layout_is_refused():
    with pytest.raises(RuntimeError, match="inconsistent"):
        env_layout({"RANK": "4", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"})


@pytest.mark.parametrize(("env", "expected"), [
    ({"MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105"}, ("10.0.0.4", 6105)),
    ({"AZ_BATCH_MASTER_NODE": "10.0.0.7:6000"}, ("10.0.0.7", 6000)),
    ({"AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.8"}, ("10.0.0.8", 29500)),
    ({}, ("127.0.0.1", 29500)),
])
def test_rendezvous(env, expected):
    assert rendezvous(env) == expected


def test_node_rank_follows_hosts_not_rank_arithmetic():
    # Round-robin placement (mpirun --map-by node): rank // local_size would be wrong.
    ranks, nodes = node_layout(["n0", "n1", "n0", "n1"])
    assert (ranks, nodes) == ([0, 1, 0, 1], 2)
    assert node_layout(["b", "b", "a", "a", "c"]) == ([0, 0, 1, 1, 2], 3)


def test_each_local_rank_drives_its_own_gpu():
    assert [gpu_index(Layout(r, 16, r % 8, 8), 8) for r in (0, 7, 8, 15)] == [0, 7, 0, 7]


@pytest.mark.parametrize("local_rank", [0, 1])
def test_more_processes_than_gpus_on_a_node_is_refused_by_name(local_rank, monkeypatch):
    """Seen on a 1-GPU H100 machine: 2 torchrun processes got CUDA's 'invalid device ordinal'."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(RuntimeError, match=r"2 processes on this node but 1 GPU\(s\) visible "
                                           r"\(CUDA_VISIBLE_DEVICES=0\).*at most 1 process"):
        gpu_index(Layout(local_rank, 2, local_rank, 2), 1)


def test_torchrun_node_rank_makes_two_launchers_on_one_machine_two_nodes():
    """torchrun --nnodes 2 --node-rank K on one machine: GROUP_RANK tells the launchers apart."""
    keys = [node_key({"RANK": str(r), "WORLD_SIZE": "2", "GROUP_RANK": str(r)}, "vm1") for r in (0, 1)]
    assert keys == ["vm1/node 0", "vm1/node 1"]
    assert node_layout(keys) == ([0, 1], 2)
    # MPI launchers have no such index: the host is the node.
    assert node_key({"OMPI_COMM_WORLD_RANK": "1", "GROUP_RANK": "1"}, "vm1") == "vm1"


def test_ranks_that_disagree_with_the_launchers_local_layout_are_refused():
    assert node_problem(["a", "a", "b", "b"], [0, 1, 0, 1], [2, 2, 2, 2]) is None
    # Two launchers on one machine, each saying "1 process on this node", without node ranks:
    problem = node_problem(["vm1", "vm1"], [0, 0], [1, 1])
    assert problem is not None and problem.startswith("node vm1 runs ranks [0, 1] with local ranks [0, 0]")
    assert problem.endswith("(torchrun --nnodes N --node-rank K)")


@pytest.mark.parametrize(("error", "expected"), [
    ("[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete",
     "rank 1 of 4: the all-reduce of X waited more than 5 s for the other ranks; another rank stopped, "
     "hangs or died (its log says why), or raise --collective-timeout if the ranks are only slow"),
    ("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1931. This is typically ...",
     "rank 1 of 4: the all-reduce of X lost its connection to another rank, which stopped or died; read "
     "the other ranks' logs for the first error"),
    ("Expected all tensors to be on the same device", None),
])
def test_a_failed_collective_is_one_sentence_naming_rank_and_collective(error, expected):
    assert collective_failure(RuntimeError(error), "the all-reduce of X", 1, 4, 5.0) == expected


def test_collectives_turn_a_timeout_into_a_named_error_and_let_others_through():
    steps = Collectives(Layout(1, 4), 5.0)
    with pytest.raises(CollectiveError, match=r"^rank 1 of 4: the gradient all-reduce waited more than 5 s"):
        with steps("the gradient all-reduce"):
            raise RuntimeError("Timed out waiting 5000ms for recv operation to complete")
    with pytest.raises(RuntimeError, match="^shape mismatch$"):
        with steps("the gradient all-reduce"):
            raise RuntimeError("shape mismatch")


def test_the_watchdog_passes_batches_through_and_names_the_wait():
    watchdog = Watchdog(Layout(3, 8), 600.0)
    try:
        assert list(watchdog.batches(iter([1, 2, 3]), "training batch")) == [1, 2, 3]
        assert watchdog.message("training batch 2 from the DataLoader workers") == (
            "rank 3 of 8: waiting for training batch 2 from the DataLoader workers took more than 600 s; a worker "
            "hangs or the storage stopped answering, or raise --collective-timeout if reading is only slow")
    finally:
        watchdog.close()
