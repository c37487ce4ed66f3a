# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The controller dies, the node's stage ends: a watch on the module's connection.

The ``azcopy_stage`` module runs pipelined: on the local connection its standard output is a
pipe to Ansible's worker process, over ssh a pipe to sshd's session. When the controller is
killed, its worker ends (the ``azcopy_stage`` action ends it, see
``plugins/plugin_utils/controller_watch.py``), the ssh client with it, and sshd closes the
session's pipes: the module's standard output then has no reader, which ``poll`` reports as
``POLLERR``/``POLLHUP`` on it, without writing a byte. :class:`ConnectionWatch` polls for that
once a second and, when it comes, sets the stage's :class:`~azcopy_progress.Cancel` (the stage
stops azcopy's process group and returns); if the stage is elsewhere (surveying files), it
interrupts the main thread a moment later, so the stage's ``finally`` blocks remove azcopy's
temporary folder and drop the lock. Standard library only.
"""

from __future__ import annotations

import _thread
import os
import select
import stat
import threading
from collections.abc import Callable

from .azcopy_progress import Cancel

POLL_S = 1.0
GRACE_S = 3.0  # after the cancel, before the main thread is interrupted


def watchable(fd: int) -> bool:
    """Whether ``fd`` is a pipe or socket, whose reader can go away (not a file or a terminal)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def reader_gone(fd: int, timeout_s: float = 0.0) -> bool:
    """True when the other end of the pipe or socket ``fd`` writes to is closed."""
    poller = select.poll()
    poller.register(fd, select.POLLERR | select.POLLHUP)
    return any(ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _fd, ev in poller.poll(timeout_s * 1000))


class ConnectionWatch:
    """While running, watches ``fd`` (standard output); see the module docstring."""

    def __init__(self, cancel: Cancel, fd: int = 1, *, poll_s: float = POLL_S, grace_s: float = GRACE_S,
                 interrupt: Callable[[], None] = _thread.interrupt_main) -> None:
        self.cancel = cancel
        self.fd = fd
        self.poll_s = poll_s
        self.grace_s = grace_s
        self.interrupt = interrupt
        self.fired = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ConnectionWatch:
        if watchable(self.fd):
            self._thread = threading.Thread(target=self._run, name="amlhpc-connection-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(self.poll_s + 1)

    def _run(self) -> None:
        while not self._done.is_set():
            if reader_gone(self.fd, self.poll_s):
                self.fired = True
                self.cancel.set("the controller's connection closed (the controller was stopped or lost), so "
                                "azcopy was stopped")
                if not self._done.wait(self.grace_s):
                    self.interrupt()
                return
