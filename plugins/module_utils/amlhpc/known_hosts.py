# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The controller's known_hosts for AmlCompute nodes, tied to the nodes' ids.

AmlCompute puts every node of a cluster behind one public address, a NAT port per node
(50000, 50001, ...). When it replaces a node (after a failure, or an idle scale-down and a
scale-up) the new node gets a new host key, often at the same port. ``ssh`` then sees
"REMOTE HOST IDENTIFICATION HAS CHANGED" for ``[address]:port``, and a node never seen
before makes ``ssh`` ask, which hangs a run under ansible-runner.

The inventory plugin keeps a known_hosts file of its own with a record beside it that says
which node id each ``[address]:port`` entry belongs to. On every read of the cluster:

* an endpoint not known yet is scanned (``ssh-keyscan``) and recorded with its node id;
* an endpoint whose node id changed was re-provisioned by AmlCompute: the old keys are
  dropped, the new node's scanned, and a warning names the node;
* an endpoint with the same node id keeps its keys untouched, so a key that changes while
  the node id stays is refused by ``ssh`` (that is what a man in the middle looks like);
* an endpoint missing from a read keeps its keys and its node id: a listing that is empty or
  partial (a cluster scaled to 0, a transient answer) forgets no pinned key, so the same node
  id coming back with another key is refused all the same. Only another node id at the
  endpoint (AmlCompute's replacement, above) drops them.

The same record ties cached facts to node ids: a host name (``<cluster>-<rank>``) whose node
id changed had its cached facts gathered on another machine, so they are dropped.

The planning functions are pure; :func:`scan_keys` and :class:`NodeRecord` do the I/O.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

RECORD_SUFFIX = ".nodes.json"


@dataclass(frozen=True)
class Endpoint:
    """How the controller reaches one node, and which node that is."""

    address: str
    port: int
    node_id: str
    host: str
    cluster: str
    user: str = ""  # ansible_user: with address and port, which ssh ControlPersist master it has

    @property
    def pattern(self) -> str:
        return endpoint_pattern(self.address, self.port)


@dataclass
class KnownHostsPlan:
    """What to do to the known_hosts file for one read of the clusters."""

    scan: list[Endpoint] = field(default_factory=list)
    # (endpoint, node id recorded before, host name recorded before)
    replaced: list[tuple[Endpoint, str, str]] = field(default_factory=list)
    adopt: list[Endpoint] = field(default_factory=list)
    keep: list[Endpoint] = field(default_factory=list)

    @property
    def to_scan(self) -> list[Endpoint]:
        return self.scan + [e for e, _unused, _unused in self.replaced]


def endpoint_pattern(address: str, port: int) -> str:
    """The known_hosts host pattern ssh looks up: ``[address]:port``, or ``address`` on port 22."""
    return address if int(port) == 22 else f"[{address}]:{int(port)}"


def plan_known_hosts(endpoints: Iterable[Endpoint], recorded: Mapping[str, Mapping[str, Any]],
                     present: Iterable[str]) -> KnownHostsPlan:
    """Which known_hosts entries to scan, replace, adopt and keep. Entries of endpoints not in
    ``endpoints`` are left as they are (module docstring).

    ``endpoints``: the nodes the inventory will connect to. ``recorded``: pattern ->
    ``{"node_id", "cluster", "host"}`` from the last read. ``present``: the patterns that have
    lines in the known_hosts file.
    """
    present = set(present)
    plan = KnownHostsPlan()
    for endpoint in endpoints:
        pattern = endpoint.pattern
        record = recorded.get(pattern)
        if record is None:
            # Keys without a record (written by hand, or before this feature): trusted as they
            # are; ssh checks them.
            (plan.adopt if pattern in present else plan.scan).append(endpoint)
        elif record.get("node_id") != endpoint.node_id:
            plan.replaced.append((endpoint, str(record.get("node_id")), str(record.get("host") or endpoint.host)))
        elif pattern not in present:
            plan.scan.append(endpoint)  # the lines were deleted: read them again
        else:
            plan.keep.append(endpoint)
    return plan


def replaced_warning(endpoint: Endpoint, old_node_id: str, old_host: str, path: str) -> str:
    """The warning for a node AmlCompute replaced at the same endpoint."""
    was = "" if old_host == endpoint.host else f" (was {old_host})"
    return (f"cluster '{endpoint.cluster}': node {endpoint.host}{was} at {endpoint.pattern} was replaced by "
            f"AmlCompute (node id {old_node_id} -> {endpoint.node_id}): its host keys in {path} were replaced "
            "by the new node's")


def scan_failed_warning(endpoint: Endpoint, detail: str) -> str:
    detail = (detail.strip().splitlines() or ["no host key answered"])[-1][:200]
    return (f"cluster '{endpoint.cluster}': could not read the SSH host keys of {endpoint.host} at "
            f"{endpoint.pattern} ({detail}); ssh refuses the node until a later read of the inventory "
            "reaches it")


# ---------------------------------------------------------------------------------------
# known_hosts text


def _hosts_field(line: str) -> list[str]:
    line = line.strip()
    if not line or line.startswith("#"):
        return []
    first = line.split()[0]
    if first.startswith("@"):  # @cert-authority / @revoked markers
        parts = line.split()
        first = parts[1] if len(parts) > 1 else ""
    return first.split(",")


def patterns_in(text: str) -> set[str]:
    """The host patterns that have at least one key line in a known_hosts text."""
    out: set[str] = set()
    for line in text.splitlines():
        out.update(_hosts_field(line))
    return out


def keys_for(scan_output: str, pattern: str) -> list[str]:
    """The key lines of ``ssh-keyscan`` output that belong to ``pattern`` (sorted, unique)."""
    lines = set()
    for line in scan_output.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not line.startswith("#") and fields[0] == pattern:
            lines.add(" ".join(fields[:3]))
    return sorted(lines)


def rewrite_known_hosts(text: str, drop: Iterable[str], add: Iterable[str]) -> str:
    """``text`` without the lines naming a pattern in ``drop``, plus the lines ``add``."""
    drop = set(drop)
    kept = [line for line in text.splitlines() if not drop.intersection(_hosts_field(line))]
    kept.extend(add)
    return "".join(f"{line}\n" for line in kept)


def ssh_common_args(path: str) -> str:
    """The ssh options that make ssh check the nodes against ``path`` and never ask."""
    return f"-o UserKnownHostsFile={shlex.quote(path)} -o StrictHostKeyChecking=yes"


# ---------------------------------------------------------------------------------------
# Cached facts


def stale_fact_hosts(current: Mapping[str, str], recorded: Mapping[str, str]) -> list[str]:
    """Host names whose cached facts belong to another node (or to a node not recorded)."""
    return sorted(host for host, node_id in current.items() if recorded.get(host) != node_id)


# ---------------------------------------------------------------------------------------
# I/O


def scan_keys(endpoints: Iterable[Endpoint], timeout: int = 5, workers: int = 32,
              keyscan: str = "ssh-keyscan") -> dict[str, tuple[list[str], str]]:
    """``pattern -> (key lines, error text)`` from one ``ssh-keyscan`` per endpoint, in parallel."""
    endpoints = list(endpoints)

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


# ---------------------------------------------------------------------------------------
# ssh ControlPersist masters


def control_path(directory: str, endpoint: Endpoint, template: str | None = None) -> str:
    """The ControlPath ansible-core's ssh connection gives ``endpoint``'s host: ``template``
    (its ``control_path`` option, ``%(directory)s`` filled in, ssh's own ``%`` tokens left
    for ssh), else ``<directory>/`` and the first 10 hex digits of the SHA-1 of
    ``<address>-<port>-<user>`` (its ``_create_control_path``)."""
    if template:
        return template % {"directory": directory}
    digest = hashlib.sha1(f"{endpoint.address}-{endpoint.port}-{endpoint.user}".encode()).hexdigest()  # noqa: S324
    return f"{directory}/{digest[:10]}"


def close_masters(endpoints: Iterable[Endpoint], directory: str, template: str | None = None, ssh: str = "ssh",
                  timeout: int = 5, workers: int = 32) -> list[Endpoint]:
    """Stop the ssh ControlPersist master of each endpoint (``ssh -O exit``); the endpoints
    that had one. A master to a node that is gone stays open until its keepalives fail, and
    a new ssh to the same address and port would go through it: behind a load balancer's NAT
    rule, which drops that connection's packets without closing it, that is minutes. The
    socket of a master that does not answer is removed, so the next ssh starts a new one."""
    def one(endpoint: Endpoint) -> Endpoint | None:
        path = control_path(directory, endpoint, template)
        literal = "%" not in path
        if literal and not os.path.exists(path):
            return None
        argv = [ssh, "-o", f"ControlPath={path}", "-O", "exit", "-p", str(endpoint.port)]
        if endpoint.user:
            argv += ["-l", endpoint.user]
        try:
            # Controller side (the inventory plugin): there is no AnsibleModule.run_command here.
            res = subprocess.run(argv + [endpoint.address],  # pylint: disable=ansible-bad-function
                                 capture_output=True, text=True, timeout=timeout, check=False)
            stopped = res.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            stopped = False
        if not stopped and literal and os.path.exists(path):
            try:
                os.unlink(path)
                stopped = True
            except OSError:
                pass
        return endpoint if stopped else None

    endpoints = list({(e.pattern, e.user): e for e in endpoints}.values())
    if not endpoints:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(endpoints)))) as pool:
        return [e for e in pool.map(one, endpoints) if e is not None]


class NodeRecord:
    """The known_hosts file and its record (``<file>.nodes.json``), read and written under a lock."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.record_path = path + RECORD_SUFFIX
        self.endpoints: dict[str, dict[str, Any]] = {}
        self.hosts: dict[str, str] = {}
        self.text = ""

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
        try:
            with open(self.path, encoding="utf-8") as handle:
                self.text = handle.read()
        except FileNotFoundError:
            self.text = ""
        try:
            with open(self.record_path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (FileNotFoundError, ValueError):
            data = {}
        self.endpoints = dict(data.get("endpoints") or {})
        self.hosts = dict(data.get("hosts") or {})

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
        if text is not None and text != self.text:
            self._write(self.path, text)
            self.text = text
        self._write(self.record_path, json.dumps({"endpoints": self.endpoints, "hosts": self.hosts},
                                                 indent=1, sort_keys=True) + "\n")
