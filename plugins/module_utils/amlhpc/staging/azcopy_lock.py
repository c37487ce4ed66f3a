# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""One stage of a shard at a time in a folder, and what a dead stage left taken over.

The lock is ``<stage_dir>/.amlhpc-staged/<rank>.lock`` (per rank: on shared storage every node
stages into one folder), held with ``flock``, so the kernel drops it when its holder ends,
however it ends. The file records its holder: pid, the process's start time (so a pid used
again is not taken for it), host and boot id, and the temporary folder of its azcopy run
(job plans and logs: with a SAS, the token). A stage that finds the lock held waits a while
(the stage of an interrupted run ends itself once its controller is gone, see
``azcopy_watch``), then refuses naming the holder. One that gets the lock and finds the record
of a holder proven gone (same host and boot, and that pid no longer runs with that start
time) removes that holder's temporary folder. A lock file whose flock cannot be had, while its
recorded holder is proven gone (a lock a shared file system kept for a dead holder), is taken
over: replaced by a new file. Standard library only.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .azcopy_paths import MANIFEST_DIRNAME

WORKDIR_PREFIX = "amlhpc-azcopy-"
LOCK_WAIT_S = 60.0
"""How long a stage waits for the lock of its shard before it refuses: longer than the
controller watch needs to end the stage of an interrupted run (azcopy_watch)."""


class LockBusy(RuntimeError):
    """The lock is held; ``holder`` is its record."""

    def __init__(self, holder: Mapping[str, Any]) -> None:
        super().__init__("held")
        self.holder = dict(holder)


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str:
    """The process's start time since boot (clock ticks, ``/proc/<pid>/stat`` field 22), or ""."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except (OSError, ValueError):
        return ""
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else ""


def this_holder() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "start": process_start(pid), "host": socket.gethostname(), "boot": boot_id(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def holder_gone(holder: Mapping[str, Any]) -> bool:
    """True only where the record proves its process gone: recorded on this host in this boot
    (hostname and boot id), and its pid runs no more, or runs a process started at another time.
    A holder on another host, or a record without them, is never called gone."""
    try:
        pid = int(holder.get("pid", 0))
    except (TypeError, ValueError):
        return False
    if pid <= 0 or not holder.get("start") or not holder.get("boot"):
        return False
    if holder.get("host") != socket.gethostname() or holder.get("boot") != boot_id():
        return False
    return process_start(pid) != holder["start"]


def safe_workdir(path: object) -> bool:
    """A path a stage's temporary folder can have: ``<tempdir>/amlhpc-azcopy-*``, one level down."""
    if not isinstance(path, str) or not path:
        return False
    parent, base = os.path.split(os.path.normpath(path))
    return base.startswith(WORKDIR_PREFIX) and os.path.realpath(parent) == os.path.realpath(tempfile.gettempdir())


def _read(fd: int) -> dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 65536).decode() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


class Held:
    """The lock while held: :meth:`note` records more of the holder (its temporary folder)."""

    def __init__(self, fd: int, record: dict[str, Any], previous: dict[str, Any]) -> None:
        self.fd = fd
        self.record = record
        self.previous = previous  # the record found in the file, the holder before this one

    def note(self, **kw: Any) -> None:
        self.record.update(kw)
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.write(self.fd, json.dumps(self.record).encode())


def _try(path: str) -> tuple[int, dict[str, Any]]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _read(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise LockBusy(holder) from None
        raise
    return fd, _read(fd)


@contextmanager
def stage_lock(stage_dir: str, rank: int, *, wait: float = LOCK_WAIT_S,
               sleep: Callable[[float], None] = time.sleep) -> Iterator[Held]:
    """Hold the lock of ``rank``'s stage in ``stage_dir`` (see the module docstring); LockBusy
    after ``wait`` seconds. On taking it, a previous holder proven gone has its temporary folder
    removed."""
    path = os.path.join(stage_dir, MANIFEST_DIRNAME, f"{int(rank)}.lock")
    deadline = time.monotonic() + max(0.0, wait)
    stale: dict[str, Any] = {}
    while True:
        try:
            fd, previous = _try(path)
            break
        except LockBusy as busy:
            if holder_gone(busy.holder):
                sleep(1.0)  # a holder between its flock and writing its record looks like this for a moment
                try:
                    fd, previous = _try(path)
                    break
                except LockBusy as again:
                    if again.holder == busy.holder and holder_gone(again.holder):
                        os.replace(_fresh(path), path)  # taken over: the old file keeps its stale lock
                        stale = again.holder
                        continue
            if time.monotonic() >= deadline:
                raise
            sleep(1.0)
    record = this_holder()
    previous = previous or stale
    held = Held(fd, record, previous)
    try:
        held.note()
        if previous and previous.get("pid") != record["pid"] and holder_gone(previous) \
                and safe_workdir(previous.get("workdir")):
            shutil.rmtree(previous["workdir"], ignore_errors=True)
        yield held
    finally:
        os.close(fd)  # closing it drops the lock


def _fresh(path: str) -> str:
    fd, tmp = tempfile.mkstemp(prefix=".lock-", dir=os.path.dirname(path))
    os.close(fd)
    return tmp


def holder_refusal(node: str, stage_dir: str, rank: int, holder: Mapping[str, Any]) -> str:
    """One sentence for a stage folder another stage holds, naming that stage."""
    who = (f"pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('since')}" if holder.get("pid")
           else "a process that has not said which")
    lock = os.path.join(stage_dir, MANIFEST_DIRNAME, f"{int(rank)}.lock")
    return (f"{node}: another stage of this shard is running in {stage_dir} ({who}) and did not end within "
            f"{LOCK_WAIT_S:g} s: wait for it to end, or stop it (kill that pid; its azcopy ends with it), then "
            f"rerun, which resumes where it stopped. If that host is gone for good, remove {lock}.")
