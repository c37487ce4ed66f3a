# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The I/O of the controller's known_hosts for AmlCompute nodes: one ``ssh-keyscan`` per node
(:func:`scan_keys`), closing the ssh master of a refused node (:func:`close_master`), and the
known_hosts file with its record of pins, read and written under a lock (:class:`NodeRecord`).

What to pin, what to write and what to say is decided in :mod:`.known_hosts`, from data alone.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from .known_hosts import RECORD_SUFFIX, Endpoint, keys_for, migrate_pins

RECORD_VERSION = 2


def close_master(path: str, address: str, timeout: int = 5, ssh: str = "ssh") -> bool:
    """Make the ssh ControlPersist master listening on ``path`` exit (``ssh -O exit``), so that
    a node refused for a changed host key is refused by ssh, not reached through the connection
    made to its old key while ControlPersist keeps it. True where a master was there."""
    if not os.path.exists(path):
        return False
    try:
        # Controller side (the inventory plugin): there is no AnsibleModule.run_command here.
        subprocess.run(  # pylint: disable=ansible-bad-function
            [ssh, "-o", f"ControlPath={path}", "-O", "exit", address], capture_output=True, timeout=timeout,
            check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:  # a master that did not answer: its socket goes, so the next ssh makes a new connection
        os.unlink(path)
    except FileNotFoundError:
        pass
    return True


def scan_keys(endpoints: Iterable[Endpoint], timeout: int = 5, workers: int = 32,
              keyscan: str = "ssh-keyscan") -> dict[str, tuple[list[str], str]]:
    """``pattern -> (key lines, error text)`` from one ``ssh-keyscan`` per endpoint, in parallel."""
    endpoints = list({e.pattern: e for e in endpoints}.values())

    def one(endpoint: Endpoint) -> tuple[str, tuple[list[str], str]]:
        try:
            # Controller side (the inventory plugin): there is no AnsibleModule.run_command here.
            res = subprocess.run(  # pylint: disable=ansible-bad-function
                [keyscan, "-T", str(timeout), "-p", str(endpoint.port), endpoint.address],
                capture_output=True, text=True, timeout=timeout * 3 + 5, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return endpoint.pattern, ([], str(exc))
        lines = keys_for(res.stdout, endpoint.pattern)
        return endpoint.pattern, (lines, "" if lines else (res.stderr or f"ssh-keyscan exit {res.returncode}"))

    if not endpoints:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(endpoints)))) as pool:
        return dict(pool.map(one, endpoints))


class RecordError(ValueError):
    """The pin record cannot be read: nothing is trusted anew behind the operator's back."""


class NodeRecord:
    """The known_hosts file and its record (``<file>.nodes.json``: endpoints, host names and
    pins), read and written under a lock."""

    def __init__(self, path: str, previous: str | None = None) -> None:
        self.path = path
        self.record_path = path + RECORD_SUFFIX
        # Where the pins were kept before (2.2.0: .cache/known_hosts): read once, where the
        # record at ``path`` does not exist yet, and moved there by the next save.
        self.previous = previous if previous and os.path.abspath(previous) != os.path.abspath(path) else None
        self.moved_from: str | None = None
        self.endpoints: dict[str, dict[str, Any]] = {}
        self.hosts: dict[str, str] = {}
        self.pins: dict[str, dict[str, Any]] = {}
        self.text = ""
        self.migrated = False

    @contextmanager
    def locked(self):
        os.makedirs(os.path.dirname(os.path.abspath(self.path)) or ".", exist_ok=True)
        with open(self.path + ".lock", "a", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._load()
                yield self
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> None:
        text_path, record_path = self.path, self.record_path
        if (self.previous and not os.path.exists(self.record_path)
                and os.path.exists(self.previous + RECORD_SUFFIX)):
            text_path, record_path = self.previous, self.previous + RECORD_SUFFIX
            self.moved_from = self.previous
        try:
            with open(text_path, encoding="utf-8") as handle:
                self.text = handle.read()
        except FileNotFoundError:
            self.text = ""
        try:
            with open(record_path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            data = {}
        except ValueError as exc:
            raise RecordError(
                f"the host key pins in {record_path} cannot be read ({exc}): put back the file from a backup, "
                "or remove it to trust every node anew on first use (each is then named in a warning)") from None
        if not isinstance(data, dict):
            raise RecordError(f"the host key pins in {record_path} are not a JSON object: put back the file "
                              "from a backup, or remove it to trust every node anew on first use")
        self.endpoints = dict(data.get("endpoints") or {})
        self.hosts = dict(data.get("hosts") or {})
        if "pins" in data:
            self.pins = {c: dict(v) for c, v in (data.get("pins") or {}).items()}
        else:
            self.pins = migrate_pins(self.endpoints, self.text)
            self.migrated = bool(self.pins)

    @staticmethod
    def _write(path: str, text: str) -> None:
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def save(self, text: str | None = None) -> None:
        if self.moved_from and text is None and not os.path.exists(self.path):
            text = self.text  # the known_hosts of the old place moves with its pins
        if text is not None and (text != self.text or not os.path.exists(self.path)):
            self._write(self.path, text)
            self.text = text
        self._write(self.record_path, json.dumps({"version": RECORD_VERSION, "endpoints": self.endpoints,
                                                  "hosts": self.hosts, "pins": self.pins},
                                                 indent=1, sort_keys=True) + "\n")
