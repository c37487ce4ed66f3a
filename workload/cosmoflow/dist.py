"""Process layout and ``torch.distributed`` set-up for torchrun, OpenMPI, MPICH/Intel MPI and AzureML.

Launchers announce a process's place differently:

=================  ===========================  ===========================================
launcher           rank / world size            local rank / local size
=================  ===========================  ===========================================
torchrun           RANK / WORLD_SIZE            LOCAL_RANK / LOCAL_WORLD_SIZE
OpenMPI (mpirun)   OMPI_COMM_WORLD_RANK / SIZE  OMPI_COMM_WORLD_LOCAL_RANK / LOCAL_SIZE
MPICH, Intel MPI   PMI_RANK / PMI_SIZE          MPI_LOCALRANKID / MPI_LOCALNRANKS
=================  ===========================  ===========================================

The rendezvous address is ``MASTER_ADDR``/``MASTER_PORT`` when set (torchrun, AzureML's PyTorch
distribution), otherwise AzureML's MPI variables ``AZ_BATCH_MASTER_NODE`` (``host:port``) or
``AZ_BATCHAI_MPI_MASTER_NODE`` (host), otherwise 127.0.0.1 (one node).

The node rank is NOT taken from the launcher: OpenMPI's ``OMPI_COMM_WORLD_NODE_RANK`` is a rank
among processes of a node, not a node index, and ``rank // local_size`` assumes block placement.
After the process group is up, every process shares its host name and nodes are numbered by
their lowest global rank (:func:`node_layout`): right for any placement.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

_VARIANTS = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)


@dataclass(frozen=True)
class Layout:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    launcher: str = "single"


def env_layout(env: Mapping[str, str] | None = None) -> Layout:
    """Rank, world size, local rank and local size from the launcher's environment."""
    env = os.environ if env is None else env
    for launcher, (r, w, lr, lw) in zip(("torchrun", "openmpi", "pmi"), _VARIANTS):
        if r in env and w in env:
            rank, world = int(env[r]), int(env[w])
            local_rank = int(env.get(lr, rank if world == 1 else -1))
            local_world = int(env.get(lw, 0)) or None
            if local_rank < 0:
                raise RuntimeError(f"{launcher} set {r}/{w} but not {lr}: cannot tell the local rank")
            if local_world is None:
                local_world = world if world == 1 else 0
                if not local_world:
                    raise RuntimeError(f"{launcher} set {r}/{w} but not {lw}: cannot tell the local size")
            if not (0 <= rank < world and 0 <= local_rank < local_world <= world):
                raise RuntimeError(f"inconsistent layout from {launcher}: rank {rank}/{world}, "
                                   f"local rank {local_rank}/{local_world}")
            return Layout(rank, world, local_rank, local_world, launcher=launcher)
    return Layout()


def rendezvous(env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """(address, port) of rank 0's store."""
    env = os.environ if env is None else env
    port = int(env.get("MASTER_PORT", "29500"))
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"], port
    if env.get("AZ_BATCH_MASTER_NODE"):
        host, _unused, p = env["AZ_BATCH_MASTER_NODE"].partition(":")
        return host, int(env.get("MASTER_PORT") or p or 29500)
    if env.get("AZ_BATCHAI_MPI_MASTER_NODE"):
        return env["AZ_BATCHAI_MPI_MASTER_NODE"], port
    return "127.0.0.1", port


def node_layout(hostnames: Sequence[str]) -> tuple[list[int], int]:
    """Node index of every rank (nodes numbered by their lowest rank) and the number of nodes."""
    index: dict[str, int] = {}
    for host in hostnames:
        index.setdefault(host, len(index))
    return [index[h] for h in hostnames], len(index)


def gpu_index(layout: Layout, gpus_visible: int) -> int:
    """The GPU this process drives: its local rank, when the node has a GPU for every local rank.

    NCCL needs one GPU per process; a node running more processes than it sees GPUs is refused
    here, by name, instead of failing later with CUDA's "invalid device ordinal".
    """
    if layout.local_world_size > gpus_visible or layout.local_rank >= gpus_visible:
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={seen})" if seen is not None else ""
        raise RuntimeError(
            f"{layout.local_world_size} processes on this node but {gpus_visible} GPU(s) visible{where}: "
            f"NCCL needs one GPU per process, so run at most {gpus_visible} process(es) per node "
            f"(aml_job process_count_per_node / torchrun --nproc_per_node), or train on CPU with --backend gloo")
    return layout.local_rank


def init(backend: str | None = None, timeout_s: float = 1800.0) -> tuple[Layout, torch.device]:
    """Start the process group (NCCL on GPUs, gloo on CPU) and return the full layout."""
    layout = env_layout()
    use_cuda = torch.cuda.is_available()
    backend = backend or ("nccl" if use_cuda else "gloo")
    device = (torch.device("cuda", gpu_index(layout, torch.cuda.device_count())) if use_cuda and backend == "nccl"
              else torch.device("cpu"))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    addr, port = rendezvous()
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=layout.rank,
                            world_size=layout.world_size, timeout=timedelta(seconds=timeout_s))
    hosts: list[str | None] = [None] * layout.world_size
    dist.all_gather_object(hosts, socket.gethostname())
    ranks, num_nodes = node_layout([str(h) for h in hosts])
    layout = Layout(layout.rank, layout.world_size, layout.local_rank, layout.local_world_size,
                    ranks[layout.rank], num_nodes, layout.launcher)
    return layout, device


def all_ok(ok: bool, device: torch.device) -> bool:
    """A barrier that also tells whether every process got there successfully."""
    flag = torch.tensor([0 if ok else 1], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.SUM)
    return int(flag.item()) == 0


def finish() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
