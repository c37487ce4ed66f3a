# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Pure logic of the beeond role: command lines, results, and the checks around them.

BeeOND (BeeGFS on demand) builds a throw-away parallel file system out of the nodes'
local disks. It is started once, from the head node, over SSH/pdsh to every node in a
nodefile; ``beeond stop`` tears it down again. These functions build those command lines,
read what came back, and decide when BeeOND must not be started at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

# beeond's status file (``beeond start -i``; its default). ``beeond start`` appends one line
# ``<host>,<service>,<data path>,<log file>,<pid file>`` per service it started on a host
# (the client's line carries the mount point as its data path), and refuses to start, with
# exit 1 and "Status file ... already exists", while the file is there. It has no exit code
# of its own for "already running": that is read from the status file and the mounts.
DEFAULT_STATUS_FILE = "/tmp/beeond.tmp"
STATUS_FIELDS = ("host", "service", "data_path", "log_file", "pid_file")

# Server sections of beegfs-net output whose connections carry file system traffic. The
# management daemon always talks TCP, so a TCP connection to it is no fallback.
DATA_SECTIONS = ("meta_nodes", "storage_nodes")
ALL_SECTIONS = ("mgmt_nodes",) + DATA_SECTIONS


def build_start_argv(nodefile: str, data_dir: str, mount_point: str, metadata_servers: int = 1,
                     storage_servers: int | None = None, clear_data: bool = True,
                     pdsh: bool = True, port_shift: int | None = None, log_dir: str | None = None,
                     extra_args: Sequence[str] = (), executable: str = "beeond",
                     status_file: str = DEFAULT_STATUS_FILE) -> list[str]:
    """``beeond start -n <nodefile> -d <data dir> -c <mount point> [-m N] [-F] [-P] ...``."""
    for name, path in (("nodefile", nodefile), ("data_dir", data_dir), ("mount_point", mount_point)):
        if not str(path).startswith("/"):
            raise ValueError(f"beeond {name} must be an absolute path, got {path!r}")
    if mount_point.rstrip("/") == data_dir.rstrip("/"):
        raise ValueError("beeond mount_point and data_dir must differ: the data dir holds the "
                         "servers' chunks, the mount point is where clients see the file system")
    if int(metadata_servers) < 1:
        raise ValueError(f"beeond needs at least one metadata server, got {metadata_servers}")
    argv = [executable, "start", "-n", nodefile, "-d", data_dir, "-c", mount_point,
            "-m", str(int(metadata_servers))]
    if storage_servers is not None:
        if int(storage_servers) < 1:
            raise ValueError(f"beeond needs at least one storage server, got {storage_servers}")
        argv += ["-s", str(int(storage_servers))]
    if port_shift is not None:
        argv += ["-p", str(int(port_shift))]
    if log_dir:
        argv += ["-L", log_dir]
    if status_file != DEFAULT_STATUS_FILE:
        argv += ["-i", status_file]
    if clear_data:
        argv.append("-F")
    if pdsh:
        argv.append("-P")
    return argv + [str(a) for a in extra_args]


def build_stop_argv(nodefile: str, delete_data: bool = True, delete_logs: bool = True,
                    pdsh: bool = True, cleanup: bool = False,
                    executable: str = "beeond", status_file: str = DEFAULT_STATUS_FILE) -> list[str]:
    """``beeond stop -n <nodefile> [-i <status file>] [-L] [-d] [-P] [-c]``."""
    if not str(nodefile).startswith("/"):
        raise ValueError(f"beeond nodefile must be an absolute path, got {nodefile!r}")
    argv = [executable, "stop", "-n", nodefile]
    if status_file != DEFAULT_STATUS_FILE:
        argv += ["-i", status_file]
    if delete_logs:
        argv.append("-L")
    if delete_data:
        argv.append("-d")
    if pdsh:
        argv.append("-P")
    if cleanup:
        argv.append("-c")
    return argv


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join((text or "").strip().splitlines()[-lines:])


def parse_status_file(text: str) -> list[dict[str, str]]:
    """The entries of a beeond status file, one dict per line (fields ``STATUS_FIELDS``)."""
    entries = []
    for line in (text or "").splitlines():
        parts = line.strip().split(",")
        if len(parts) >= len(STATUS_FIELDS) and parts[0] and parts[1]:
            entries.append(dict(zip(STATUS_FIELDS, parts[:len(STATUS_FIELDS) - 1]
                                    + [",".join(parts[len(STATUS_FIELDS) - 1:])])))
    return entries


def start_decision(status_text: str | None, mounted: bool, mount_point: str,
                   status_file: str = DEFAULT_STATUS_FILE) -> dict[str, Any]:
    """Whether ``beeond start`` is needed, from this node's status file and its mounts.

    ``status_text`` is the status file's content (None when there is none), ``mounted``
    whether ``mount_point`` holds a BeeGFS mount. Returns ``{action, already_mounted, msg}``
    with action ``none`` (running: nothing to do), ``start``, or ``refuse`` (a session left
    half-way: beeond itself would refuse with "Status file ... already exists").
    """
    want = mount_point.rstrip("/") or "/"
    if mounted:
        entries = parse_status_file(status_text or "")
        clients = [e for e in entries if e["service"] == "beegfs-client"]
        if status_text is None:
            how = f"mounted, though no BeeOND status file {status_file} says so"
        elif any((e["data_path"].rstrip("/") or "/") == want for e in clients):
            how = f"running (status file {status_file} lists {len(entries)} service(s))"
        else:
            how = f"mounted (status file {status_file} lists no client at this mount point)"
        return {"action": "none", "already_mounted": True,
                "msg": f"BeeOND already {how}: BeeGFS at {mount_point}"}
    if status_text is None:
        return {"action": "start", "already_mounted": False, "msg": "BeeOND is not running"}
    entries = parse_status_file(status_text)
    services = sorted({e["service"] for e in entries})
    what = (f"lists {', '.join(services)} on {len({e['host'] for e in entries})} host(s)" if entries
            else "is empty (a start that stopped half-way)")
    return {"action": "refuse", "already_mounted": False,
            "msg": f"BeeOND status file {status_file} {what}, but {mount_point} holds no BeeGFS mount: "
                   "the previous session was not shut down properly and beeond start would refuse. "
                   "Run the teardown (playbooks/teardown.yml, tag beeond) or `beeond stop -n <nodefile> "
                   "-L -d -c` on the head, then run this again."}


def interpret_start(rc: int, stdout: str = "", stderr: str = "") -> dict[str, Any]:
    """What a ``beeond start`` exit means: ``{changed, failed, already_mounted, msg}``.

    beeond exits 0 when every service started and every client mounted, 1 on any error.
    """
    if rc == 0:
        return {"changed": True, "failed": False, "already_mounted": False,
                "msg": "BeeOND started"}
    detail = _tail(stderr) or _tail(stdout) or "no output"
    hint = ""
    if "already exists" in detail and "tatus" in detail:
        hint = (" A status file of an earlier session is left: run the teardown "
                "(beeond stop) first.")
    elif "unreachable via ssh" in detail or "pdsh" in detail:
        hint = " The head cannot reach every node over SSH: run the ssh_trust role first."
    return {"changed": False, "failed": True, "already_mounted": False,
            "msg": f"beeond start failed with exit {rc}: {detail}{hint}"}


def interpret_stop(rc: int, stdout: str = "", stderr: str = "") -> dict[str, Any]:
    """What a ``beeond stop`` exit means: ``{changed, failed, msg}``."""
    if rc == 0:
        return {"changed": True, "failed": False, "msg": "BeeOND stopped"}
    detail = _tail(stderr) or _tail(stdout) or "no output"
    return {"changed": False, "failed": True,
            "msg": f"beeond stop failed with exit {rc}: {detail}. Run `beeond stoplocal -d -L -c` "
                   "on the nodes that still hold the mount."}


def is_beegfs_mounted(proc_mounts: str, mount_point: str) -> bool:
    """Whether ``mount_point`` is a BeeGFS mount in ``/proc/mounts`` text."""
    want = mount_point.rstrip("/") or "/"
    for line in proc_mounts.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "beegfs":
            target = parts[1].replace("\\040", " ")
            if (target.rstrip("/") or "/") == want:
                return True
    return False


_NODE_RE = re.compile(r"^(?P<node>\S.*?)\s+\[ID:\s*(?P<id>\d+)\]\s*$")
_CONN_RE = re.compile(r"(?P<proto>[A-Za-z]+):\s*(?P<count>\d+)\s*\((?P<endpoint>[^)]*)\)")


def parse_beegfs_net(text: str) -> list[dict[str, Any]]:
    """Connections of ``beegfs-net`` output, one dict per server node and mount.

    beegfs-net prints, for each client mount, the sections ``mgmt_nodes``,
    ``meta_nodes`` and ``storage_nodes``; under each a line ``<node> [ID: <n>]`` and
    ``   Connections: RDMA: 1 (10.0.0.5:8003); TCP: 1 (10.0.0.5:8003);`` or
    ``   Connections: <none>``. Returns
    ``{"mount": i, "section", "node", "id", "connections": [{"protocol", "count", "endpoint"}]}``.
    """
    out: list[dict[str, Any]] = []
    mount = 0
    section = None
    current: dict[str, Any] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or set(line) == {"="}:
            continue
        if set(line) == {"#"} or line.startswith("####"):
            mount += 1
            section, current = None, None
            continue
        if line in ALL_SECTIONS:
            section, current = line, None
            continue
        if section is None:
            continue
        if line.startswith("Connections:"):
            if current is not None:
                for m in _CONN_RE.finditer(line[len("Connections:"):]):
                    current["connections"].append({"protocol": m["proto"].upper(),
                                                   "count": int(m["count"]),
                                                   "endpoint": m["endpoint"].strip()})
            continue
        m = _NODE_RE.match(line)
        if m:
            current = {"mount": mount, "section": section, "node": m["node"],
                       "id": int(m["id"]), "connections": []}
            out.append(current)
    return out


def tcp_fallbacks(text: str) -> list[str]:
    """Sentences naming each metadata/storage server this client reaches over TCP.

    On an InfiniBand cluster every connection to a metadata or storage server should be
    RDMA; a TCP one means the client fell back (no ibverbs in the module, IB port down,
    wrong interface). The management connection is TCP by design and is not counted.
    """
    problems = []
    for node in parse_beegfs_net(text):
        if node["section"] not in DATA_SECTIONS:
            continue
        for conn in node["connections"]:
            if conn["protocol"] != "RDMA" and conn["count"] > 0:
                kind = "metadata" if node["section"] == "meta_nodes" else "storage"
                problems.append(f"{kind} server {node['node']} [ID: {node['id']}] is reached over "
                                f"{conn['protocol']} ({conn['endpoint']}), not RDMA")
    return problems


def rdma_connections(text: str) -> int:
    """How many RDMA connections to metadata/storage servers beegfs-net shows."""
    return sum(c["count"] for n in parse_beegfs_net(text) if n["section"] in DATA_SECTIONS
               for c in n["connections"] if c["protocol"] == "RDMA")


def read_nodefile(text: str) -> list[str]:
    """The hosts of a nodefile: one per line, blank lines and ``#`` comments skipped."""
    return [line.split("#", 1)[0].strip() for line in text.splitlines()
            if line.split("#", 1)[0].strip()]


def nodefile_problems(text: str, expected: Iterable[str]) -> list[str]:
    """Sentences for each way the nodefile on the head differs from the inventory."""
    hosts = read_nodefile(text)
    expected = [str(e) for e in expected]
    if not hosts:
        return ["the nodefile is empty: run the ssh_trust role first (it writes the nodefile)"]
    problems = []
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if dupes:
        problems.append(f"the nodefile lists {', '.join(dupes)} more than once")
    if hosts != expected and not dupes:
        problems.append(f"the nodefile lists {', '.join(hosts)} but the cluster's nodes in rank "
                        f"order are {', '.join(expected)}: re-run the ssh_trust role")
    return problems
