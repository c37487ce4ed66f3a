"""Workload tests run with the workload venv (torch): .venv-workload/bin/python -m pytest tests/workload.

Every test must end every process it started, stopped ones included: the autouse fixture
``no_leftover_processes`` fails a test that leaves one (and ends it). The pytest process is made
a child subreaper, so a grandchild whose parent died (a DataLoader worker of a killed rank) is
handed to it, not to init, and is seen.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKLOAD = Path(__file__).resolve().parents[2] / "workload"
if str(WORKLOAD) not in sys.path:
    sys.path.insert(0, str(WORKLOAD))

from amlhpc.data.cosmoflow_data import generate  # noqa: E402  (through workload/amlhpc)

TINY_MODEL = ["--cube", "16", "--conv-layers", "2", "--conv-size", "4", "--fc1-size", "16", "--fc2-size", "8",
              "--dropout", "0", "--warmup-epochs", "0", "--base-batch-size", "4", "--lr", "0.01",
              "--workers", "1", "--log-every", "1", "--resume", "none", "--target-mae", "0"]

# How long a test waits for a process that should end by itself before calling it hung. Only a
# hang reaches it: the runs here take seconds, and a 2-core machine loaded by other jobs
# stretches them by at most a few times.
HANG_S = 600


def tiny(**changes: str | None) -> list[str]:
    """TINY_MODEL with some values changed, ``None`` leaving the option out (its default):
    ``tiny(dropout="0.25", target_mae=None)``."""
    args = list(TINY_MODEL)
    for flag, value in changes.items():
        at = args.index("--" + flag.replace("_", "-"))
        if value is None:
            del args[at:at + 2]
        else:
            args[at + 1] = value
    return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """16^3 cubes: 64 training and 32 validation samples, plain files."""
    root = tmp_path_factory.mktemp("cosmo16")
    generate(str(root), train_universes=2, val_universes=1, cube=16, subvolumes=32, gzip=False, seed=1)
    return root


@pytest.fixture()
def master_port(monkeypatch) -> int:
    port = free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"):
        monkeypatch.delenv(var, raising=False)
    return port


# --- processes: started in their own group, always ended ----------------------------------

def end_group(proc: subprocess.Popen) -> None:
    """End ``proc``'s process group (it was started with ``start_new_session=True``), whether or
    not its leader is still there: SIGCONT first, so a stopped member ends too, then SIGKILL;
    then reap the leader."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
    proc.wait()


def run_in_group(cmd: list[str], *, timeout: float = HANG_S, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True)`` in a process group of its own that
    is ended afterwards, on a timeout too (``subprocess.run`` would end only ``cmd``, and leave
    its children: torchrun's ranks, their DataLoader workers)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        end_group(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


# --- no leftovers --------------------------------------------------------------------------

PR_SET_CHILD_SUBREAPER = 36
# Started once per session by Python itself and ending with it, not by a test.
SESSION_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:  # pragma: no cover - Linux >= 3.4 has it
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[2])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def children() -> set[int]:
    """Live (not zombie) children of this process, session helpers left out."""
    pids: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as f:
                pids.update(int(p) for p in f.read().split())
        except OSError:
            continue
    out = set()
    for pid in pids:
        stat = _stat(pid)
        if stat is not None and stat[0] not in "ZX" and not any(h in _cmdline(pid) for h in SESSION_HELPERS):
            out.add(pid)
    return out


def _end(pids: set[int]) -> None:
    own_group = os.getpgrp()
    for pid in pids:
        stat = _stat(pid)
        if stat is None:
            continue
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                if stat[1] != own_group:
                    os.killpg(stat[1], sig)
                else:
                    os.kill(pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 30
    while pids and time.monotonic() < deadline:
        for pid in list(pids):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    pids.discard(pid)
            except ChildProcessError:
                pids.discard(pid)
        time.sleep(0.05)


@pytest.fixture(scope="session", autouse=True)
def _subreaper() -> None:
    _become_subreaper()


@pytest.fixture(autouse=True)
def no_leftover_processes(_subreaper):
    """Fails the test that leaves a process behind: a child of this process (or an orphaned
    descendant, handed to it as subreaper) that was not there before the test and is still
    there once the test is over. Processes that are ending get 30 s (a loaded machine); a
    stopped one will not end by itself and is reported at once. Leftovers are ended."""
    before = children()
    yield
    left = children() - before
    if left:
        gc.collect()  # a loader in a reference cycle ends its DataLoader workers when collected
    deadline = time.monotonic() + 30
    while left and time.monotonic() < deadline and not all(_stat(p) and _stat(p)[0] in "Tt" for p in left):
        time.sleep(0.1)
        left = children() - before
    if left:
        described = "; ".join(f"pid {p} state {(_stat(p) or ('gone',))[0]}: {_cmdline(p)[:200]}" for p in sorted(left))
        _end(set(left))
        pytest.fail(f"the test left {len(left)} process(es) behind (now ended): {described}", pytrace=False)
