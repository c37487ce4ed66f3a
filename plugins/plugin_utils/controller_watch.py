# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""A task's worker ends with its controller, so that the node's stage ends too.

Each host-task runs in a worker process forked from ``ansible-playbook``. When
``ansible-playbook`` is killed (``kill -9``, an operator's laptop closed), its workers live
on, reparented, each still waiting on its connection: the ssh client stays up, and the module
on the node (with azcopy, a SAS in its argv) runs on, with nobody to read its result. While a
long module runs, :func:`ends_with_controller` watches the worker's parent from a thread; when
the parent is gone (the worker's parent pid changes), it sends SIGTERM to the worker's own
process group where the worker leads one (ansible-core 2.19 and later make every worker the
leader of its group: the worker, its ssh client, and on the local connection the module),
else to the worker's child processes, and ends the worker. The ssh session then closes, and
the module, which watches its connection (``module_utils/amlhpc/staging/azcopy_watch.py``), stops
azcopy and cleans up. Nothing is done while the controller lives.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

POLL_S = 0.5


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux ``/proc``; elsewhere none)."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(entry))
    return out


def end_worker() -> None:
    """SIGTERM to this worker's process group where it leads one, else to its children; then
    end the worker."""
    me = os.getpid()
    if os.getpgrp() == me:
        os.killpg(me, signal.SIGTERM)  # this process included
    for child in _children(me):
        try:
            os.kill(child, signal.SIGTERM)
        except OSError:
            pass
    os._exit(1)  # pylint: disable=protected-access


@contextmanager
def ends_with_controller(poll_s: float = POLL_S) -> Iterator[None]:
    """While the block runs, end this worker (see the module docstring) when its parent, the
    controller's main process, is gone."""
    parent = os.getppid()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(poll_s):
            if os.getppid() != parent:
                end_worker()
                return

    thread = threading.Thread(target=watch, name="amlhpc-controller-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(poll_s + 1)
