from __future__ import annotations

import pytest

from cosmoflow.dist import Layout, env_layout, gpu_index, node_layout, rendezvous


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
