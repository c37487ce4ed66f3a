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
After the process group is up, every process shares its node key (:func:`node_key`: the host
name, with torchrun's ``GROUP_RANK`` when torchrun sets it) and nodes are numbered by their lowest
global rank (:func:`node_layout`): right for any placement. With ``GROUP_RANK`` in the key, two
torchrun launchers on one machine (``--nnodes 2 --node-rank 0`` and ``--node-rank 1``) are two
nodes, as their local ranks and sizes say; a node whose ranks disagree with the launcher's local
ranks and sizes is refused by name (:func:`node_problem`).

Collectives time out instead of hanging (:class:`Collectives`): the start-up ones (rendezvous,
the staging barrier, the partition check) after ``startup_timeout_s``, those of the training
steps and the evaluation (a process group of their own) after ``--collective-timeout``. A
collective that waits longer, or loses its connection to a rank that died, stops this rank with
one sentence naming the rank and the collective (:func:`collective_failure`).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

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


def node_key(env: Mapping[str, str] | None = None, hostname: str | None = None) -> str:
    """What names this process's node: the host name, and torchrun's ``GROUP_RANK`` (the index of
    the launcher's node) when set, so that two torchrun launchers on one machine are two nodes."""
    env = os.environ if env is None else env
    host = socket.gethostname() if hostname is None else hostname
    group = env.get("GROUP_RANK") if "RANK" in env and "WORLD_SIZE" in env else None
    return f"{host}/node {group}" if group not in (None, "") else host


def node_layout(hostnames: Sequence[str]) -> tuple[list[int], int]:
    """Node index of every rank (nodes numbered by their lowest rank) and the number of nodes."""
    index: dict[str, int] = {}
    for host in hostnames:
        index.setdefault(host, len(index))
    return [index[h] for h in hostnames], len(index)


def node_problem(keys: Sequence[str], local_ranks: Sequence[int], local_sizes: Sequence[int]) -> str | None:
    """One sentence when the ranks sharing a node key are not what the launcher says of them
    (as many ranks as the local size, local ranks 0..size-1), else None."""
    members: dict[str, list[int]] = {}
    for rank, key in enumerate(keys):
        members.setdefault(key, []).append(rank)
    for key, ranks in members.items():
        sizes = sorted({local_sizes[r] for r in ranks})
        locals_ = sorted(local_ranks[r] for r in ranks)
        if sizes != [len(ranks)] or locals_ != list(range(len(ranks))):
            return (f"node {key} runs ranks {ranks} with local ranks {locals_} and local sizes {sizes}: the "
                    f"launcher's local ranks and sizes do not match the processes on that node; start one "
                    f"launcher per node, or give each launcher on a shared machine its own node rank "
                    f"(torchrun --nnodes N --node-rank K)")
    return None


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


def collective_failure(error: BaseException, what: str, rank: int, world_size: int, timeout_s: float,
                       flag: str = "--collective-timeout") -> str | None:
    """One sentence for a collective that waited past its timeout (set by ``flag``) or lost a rank;
    None for any other error (gloo says "Timed out waiting", NCCL and the store "timed out")."""
    text = str(error)
    where = f"rank {rank} of {world_size}: {what}"
    if "timed out" in text.lower() or "timeout" in text.lower():
        return (f"{where} waited more than {timeout_s:g} s for the other ranks; another rank stopped, hangs "
                f"or died (its log says why), or raise {flag} if the ranks are only slow")
    if any(sign in text for sign in ("Connection closed by peer", "Connection reset by peer", "Broken pipe")):
        return (f"{where} lost its connection to another rank, which stopped or died; read the other "
                f"ranks' logs for the first error")
    return None


def call_site(error: BaseException) -> str:
    """Where in this package ``error`` came from: ``function() (file.py line N)``."""
    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if os.path.dirname(os.path.abspath(f.filename)) == here]
    if not frames:
        return "a collective"
    frame = frames[-1]
    return f"a collective in {frame.name}() ({os.path.basename(frame.filename)} line {frame.lineno})"


class CollectiveError(RuntimeError):
    """A collective timed out or lost a rank (the message names this rank and the collective)."""


class Collectives:
    """Names the collectives of a phase, so that one that times out says which one it was.

    ``group`` is the process group the phase's collectives use (``None``: the default one);
    ``flag`` the option that sets their timeout."""

    def __init__(self, layout: Layout, timeout_s: float, group: dist.ProcessGroup | None = None,
                 flag: str = "--collective-timeout") -> None:
        self.layout, self.timeout_s, self.group, self.flag = layout, timeout_s, group, flag
        # The heartbeat (cosmoflow.heartbeat) is told which collective this rank waits in:
        # anything with enter(what) and leave().
        self.observer: Any = None

    @contextmanager
    def __call__(self, what: str) -> Iterator[None]:
        if self.observer is not None:
            self.observer.enter(what)
        try:
            yield
        except RuntimeError as exc:
            if isinstance(exc, CollectiveError):
                raise
            message = collective_failure(exc, what, self.layout.rank, self.layout.world_size, self.timeout_s,
                                         self.flag)
            if message is None:
                raise
            raise CollectiveError(message) from exc
        finally:
            if self.observer is not None:
                self.observer.leave()


class Watchdog:
    """Ends the process, with one sentence naming the rank and what it waited for, when a wait
    that no timeout of its own bounds takes longer than ``timeout_s``: a batch from DataLoader
    workers (a worker that hangs blocks the rank with no timeout: persistent workers acknowledge
    each new epoch, and a tensor is handed over through the worker). A daemon thread;
    :meth:`waiting` arms it around a block, :meth:`batches` around each batch."""

    def __init__(self, layout: Layout, timeout_s: float, flag: str = "--collective-timeout") -> None:
        self.layout, self.timeout_s, self.flag = layout, timeout_s, flag
        self._cond = threading.Condition()
        self._what: str | None = None
        self._deadline, self._closed = 0.0, False
        # The heartbeat (cosmoflow.heartbeat) counts each batch fetched as a step: anything with progress().
        self.observer: Any = None
        threading.Thread(target=self._watch, name="cosmoflow-watchdog", daemon=True).start()

    def close(self) -> None:
        """Stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def arm(self, what: str) -> None:
        with self._cond:
            self._what, self._deadline = what, time.monotonic() + self.timeout_s
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._what = None

    @contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Armed while the block runs."""
        self.arm(what)
        try:
            yield
        finally:
            self.disarm()

    def batches(self, loader: Iterable, what: str) -> Iterator:
        """``loader``'s batches, each fetched with the watchdog armed (and the iterator made with
        it armed: persistent workers acknowledge a new epoch before it starts)."""
        with self.waiting(f"the DataLoader workers to start the {what}es"):
            it = iter(loader)
        for index in range(1 << 62):
            with self.waiting(f"{what} {index + 1} from the DataLoader workers"):
                item = next(it, None)
            if item is None:
                return
            if self.observer is not None:
                self.observer.progress()
            yield item

    def message(self, what: str) -> str:
        return (f"rank {self.layout.rank} of {self.layout.world_size}: waiting for {what} took more than "
                f"{self.timeout_s:g} s; a worker hangs or the storage stopped answering, or raise {self.flag} "
                f"if reading is only slow")

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                if self._what is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                sys.stderr.write(self.message(self._what) + "\n")
                sys.stderr.flush()
                os._exit(1)  # the main thread is blocked in a read that nothing else would end


def init(backend: str | None = None, timeout_s: float = 1800.0,
         step_timeout_s: float | None = None) -> tuple[Layout, torch.device, Collectives, Collectives]:
    """Start the process group (NCCL on GPUs, gloo on CPU); return the full layout, the device, and
    the start-up and training :class:`Collectives`.

    The default group's collectives (rendezvous, staging barrier, start-up checks) time out after
    ``timeout_s``; the training steps' and the evaluation's run in a group of their own that times
    out after ``step_timeout_s`` (default: ``timeout_s``)."""
    layout = env_layout()
    use_cuda = torch.cuda.is_available()
    backend = backend or ("nccl" if use_cuda else "gloo")
    device = (torch.device("cuda", gpu_index(layout, torch.cuda.device_count())) if use_cuda and backend == "nccl"
              else torch.device("cpu"))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    addr, port = rendezvous()
    startup = Collectives(layout, timeout_s, flag="--startup-timeout")
    with startup(f"the rendezvous at {addr}:{port}"):
        dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=layout.rank,
                                world_size=layout.world_size, timeout=timedelta(seconds=timeout_s))
    members: list[tuple[str, int, int] | None] = [None] * layout.world_size
    with startup("the all-gather of the node names"):
        dist.all_gather_object(members, (node_key(), layout.local_rank, layout.local_world_size))
    known = [m for m in members if m is not None]
    keys = [str(m[0]) for m in known]
    problem = node_problem(keys, [m[1] for m in known], [m[2] for m in known])
    if problem:
        raise RuntimeError(problem)
    ranks, num_nodes = node_layout(keys)
    layout = Layout(layout.rank, layout.world_size, layout.local_rank, layout.local_world_size,
                    ranks[layout.rank], num_nodes, layout.launcher)
    step_timeout_s = timeout_s if step_timeout_s is None else step_timeout_s
    with startup("the creation of the training steps' process group"):
        group = dist.new_group(backend=backend, timeout=timedelta(seconds=step_timeout_s))
    return layout, device, startup, Collectives(layout, step_timeout_s, group)


def all_ok(ok: bool, device: torch.device) -> bool:
    """A barrier that also tells whether every process got there successfully."""
    flag = torch.tensor([0 if ok else 1], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.SUM)
    return int(flag.item()) == 0


def finish() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
