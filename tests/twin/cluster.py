"""The AmlCompute twin: a cluster of Docker containers that behaves like an AmlCompute cluster.

What it stands in for (and how)
-------------------------------
* **Nodes.** One container per node from the Debian image the tests build
  (``tests/images/build-bookworm.sh``), running sshd. AmlCompute's admin user (``azureuser``)
  is **not root**: it logs in with the controller's key and has passwordless sudo. ``/mnt`` and
  the scratch mount point (``/mnt/scratch``) belong to root, as on a real node.
* **Addresses.** One public address (127.0.0.1) with a NAT port per node (``base_port``,
  ``base_port + 1``, ...; 50000 by default, as AmlCompute numbers them); the nodes see each other
  on private IPs of their own Docker network (``<prefix>-net``). With ``node_public_ip=False``
  (a cluster in a VNet subnet without node public IPs) no port is published: the nodes answer
  only on their private IPs, which the host reaches over the Docker network as a controller
  inside the VNet would, and ``list_nodes`` gives them no public IP and no port.
* **The inventory's view.** :meth:`Twin.list_nodes` is what azureml-core's
  ``AmlCompute.list_nodes()`` returns (camelCase dicts); :meth:`Twin.write_nodes_file` saves it for
  the azureml_compute inventory plugin's ``nodes_file`` source.
* **Re-provisioning.** :meth:`Twin.replace_node` does what AmlCompute does after a node failure:
  a new machine (new node id, new SSH host key, new private IP, empty disks) behind the same NAT
  port or a new one. :meth:`Twin.scale` removes nodes from the end or adds new ones at the next
  free ports (an idle scale-down, a scale-up).
* **Disks.** Every node has its own empty Docker volume at ``/mnt`` (the local disk). With
  ``shared_scratch=True`` one more volume is mounted at the scratch path on every node: it stands
  in for the BeeGFS file system BeeOND would mount there (same files seen by every node; no
  BeeGFS servers, striping or RDMA). Without it the scratch path is node-local (on ``/mnt``).
* **Jobs.** :meth:`Twin.run_job` runs a job the way AzureML runs an MPI/PyTorch job, from the spec
  ``aml_job`` would send (``job_spec.v1_spec`` / ``v2_spec``): on every node a job container
  (same image; the workload venv and its interpreter bind-mounted read-only at their own paths)
  joins the node's network namespace, gets the spec's docker arguments (``-v /mnt/scratch:/data``
  mounts that node's scratch; a file such as ``/etc/nccl.conf`` is the node's file), the spec's
  environment variables and AzureML's rendezvous variables, and starts one launcher
  (``torch.distributed.run``) that meets the others on the head's private IP. Nothing of the job
  runs on the controller. The head's ``outputs/`` is the run's outputs. As AzureML ends a job one of
  whose processes failed, the nodes still running 30 s after one ended non-zero are stopped.

What it cannot show: GPUs, InfiniBand/RDMA, NVMe, kernel modules (BeeGFS itself), dmesg, the
AzureML service (image builds, run history, Key Vault), real network throughput.

API (stable; tests and bench/ use it)
-------------------------------------
``Twin(size, workdir, *, prefix="twin", base_port=50000, shared_scratch=False,
scratch_path="/mnt/scratch", admin_user="azureuser", image=None, node_public_ip=True,
listing_lag=None)``: ``listing_lag`` is how long AmlCompute's listing keeps a lost or hung node in
its old state (seconds; None marks it at once), as AmlCompute keeps a dead VM listed as
idle/running for minutes. The environment's setting, never the product's.

* ``start()`` / ``stop()`` (also a context manager); ``stop`` removes every container, volume
  and the network it made (all named ``<prefix>-...``, labelled ``amlhpc.twin=<prefix>``).
* ``nodes`` (list of :class:`TwinNode`, in slot order), ``ranked()`` (by port: the inventory's
  rank order, head first), ``head``, ``key`` (controller private key), ``public_address``,
  ``network``, ``gateway`` (the network's gateway address: where the nodes reach the controller).
* ``list_nodes()``, ``write_nodes_file(path)``; ``save_state(path)`` / ``Twin.attach(path)`` (drive the
  same twin from another process); ``free_base_port(count)`` (a free port range for ``base_port``).
* ``replace_node(slot, new_port=False)``, ``scale(size)``; ``lose_node(slot, state="preempted")`` (the VM
  taken away: its network first, then its processes; listed in that state once ``listing_lag`` is
  over, no job placed on it); ``come_back(slot)`` (the VM boots again: same node id, disks and host
  key, listed and usable); ``freeze(slot)``/``thaw(slot)`` (``docker pause`` of the node and its job
  containers; with a ``listing_lag`` the hung node is listed ``unusable`` once the lag is over, and
  listed usable again after ``thaw``).
* ``exec(node_or_slot, *cmd, user="root")`` (``docker exec``), ``ssh(node_or_slot, *cmd)`` (as the
  admin user through the NAT port, host key checked against ``known_hosts(path)``),
  ``host_key(node)`` (the node's ed25519 public host key line).
* ``run_job(spec, source_dir, *, python, name, outputs, timeout=900, audit_reads=False)`` ->
  :class:`JobRun` (``ok``, ``returncodes``, ``logs``, ``outputs``, ``reads``, ``readers``); ``spec``
  is a ``job_spec`` v1/v2 dict or azure-ai-ml's REST payload of a command job.
* ``tests/twin/azureml_standin/``: on ``PYTHONPATH`` with ``TWIN_AZUREML_STATE`` set, azure-ai-ml's
  ``MLClient`` becomes the twin's AzureML: ``aml_job`` (backend azure_ai_ml) submits to it unchanged
  and the job runs on the twin's nodes; the compute calls (get, create or update, list nodes) are
  answered from the state file and the twin's containers, and a scale scales the twin.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ADMIN_USER = "azureuser"
PUBLIC_ADDRESS = "127.0.0.1"
DEFAULT_BASE_PORT = 50000
SCRATCH_PATH = "/mnt/scratch"
MASTER_PORT = 29500
# The VM size the twin's inventory names, as an AmlCompute cluster always names one (the
# inventory plugin's SDK sources read it from the cluster's properties): a CPU size, with no
# GPU, no InfiniBand and no local NVMe disk, like the containers. No table of the roles knows
# it, so the health check sets no GPU thresholds, nvme_raid checks no disk count and nccl
# writes no topology file; and nccl does not ask the instance metadata for it.
VM_SIZE = "Standard_D2s_v3"

_BOOT = r"""
set -e
[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
ssh-keygen -A >/dev/null
id {user} >/dev/null 2>&1 || useradd -m -s /bin/bash {user}
echo '{user} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{user}
chmod 0440 /etc/sudoers.d/{user}
install -d -m 0700 -o {user} -g {user} /home/{user}/.ssh
echo "$CONTROLLER_KEY" > /home/{user}/.ssh/authorized_keys
chown {user}:{user} /home/{user}/.ssh/authorized_keys
chmod 0600 /home/{user}/.ssh/authorized_keys
chown root:root /mnt && chmod 0755 /mnt
install -d -m 0755 -o root -g root {scratch}
mkdir -p /run/sshd
exec /usr/sbin/sshd -D -e
"""

# Loaded by every Python process of a job when audit_reads is on (PYTHONPATH): records each
# data file opened, with the process's global rank. Observation only, like strace.
_AUDIT = r'''
import os, sys
_log = os.environ.get("TWIN_READ_LOG")
if _log:
    _fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _busy = []
    def _hook(event, args):
        if event != "open" or _busy or not args or not isinstance(args[0], str) or ".tfrecord" not in args[0]:
            return
        _busy.append(1)
        try:
            os.write(_fd, f"{os.environ.get('RANK', '?')} {os.getpid()} {args[0]}\n".encode())
        finally:
            _busy.pop()
    sys.addaudithook(_hook)
'''


def docker(*args: str, check: bool = True, timeout: float = 300) -> str:
    res = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])} ... failed: {res.stderr.strip()}")
    return res.stdout.strip()


def test_image() -> str:
    """The bookworm test image (built once, then reused; AMLHPC_TEST_IMAGE names one)."""
    return os.environ.get("AMLHPC_TEST_IMAGE") or subprocess.run(
        [str(ROOT / "tests" / "images" / "build-bookworm.sh")], capture_output=True, text=True,
        check=True, timeout=1200).stdout.strip().splitlines()[-1]


def new_node_id() -> str:
    """An AmlCompute-looking node id (``tvmps_<hex>_d``), new for every provisioned machine."""
    return f"tvmps_{uuid.uuid4().hex}{uuid.uuid4().hex[:24]}_d"


@dataclass
class TwinNode:
    slot: int
    node_id: str
    port: int
    private_ip: str
    container: str
    disk_volume: str
    # AmlCompute's nodeState: idle or running while usable; preempted, unusable or leaving once the
    # VM is gone (lose_node).
    state: str = "idle"
    # What AmlCompute's listing still says of a lost node, and since when it is lost (the twin's
    # listing_lag: the listing keeps the old state that long).
    listed_as: str | None = None
    lost_at: float | None = None

    @property
    def hostname(self) -> str:
        return self.container

    @property
    def usable(self) -> bool:
        """The truth (a job is placed on it), whatever the listing says."""
        return self.state in ("idle", "running")

    def mark_lost(self, state: str, at: float | None = None) -> None:
        """The node is gone (``state``); the listing may say its old state for a while."""
        if self.usable:
            self.listed_as, self.lost_at = self.state, time.time() if at is None else at
        self.state = state

    def mark_back(self) -> None:
        """The node answers again (a reboot): listed under the same node id, usable."""
        self.state, self.listed_as, self.lost_at = "idle", None, None

    def listed_state(self, now: float, lag: float | None) -> str:
        """AmlCompute's nodeState at ``now``: a lost node keeps its old state for ``lag`` seconds."""
        if lag and self.lost_at is not None and self.listed_as and now - self.lost_at < lag:
            return self.listed_as
        return self.state


@dataclass
class JobRun:
    """A finished twin job: per node (rank order) its launcher's exit code and log."""

    name: str
    returncodes: list[int]
    logs: list[str]
    outputs: Path
    reads: Counter = field(default_factory=Counter)   # data file path -> times opened (audit_reads)
    readers: dict[str, set[str]] = field(default_factory=dict)  # path -> ranks that opened it
    environments: list[dict[str, str]] = field(default_factory=list)  # each node's job environment
    files: list[dict[str, str | None]] = field(default_factory=list)   # probe_files as each job saw them

    @property
    def ok(self) -> bool:
        return bool(self.returncodes) and all(rc == 0 for rc in self.returncodes)


class Twin:
    """An AmlCompute cluster made of Docker containers (see the module docstring)."""

    def __init__(self, size: int, workdir: Path, *, prefix: str = "twin", base_port: int = DEFAULT_BASE_PORT,
                 shared_scratch: bool = False, scratch_path: str = SCRATCH_PATH, admin_user: str = ADMIN_USER,
                 image: str | None = None, node_public_ip: bool = True, listing_lag: float | None = None) -> None:
        self.size = size
        # How long AmlCompute's listing keeps a lost or hung node in its old state (None: it marks it
        # at once). The environment's, not the product's: the product must not depend on it.
        self.listing_lag = listing_lag
        self.node_public_ip = node_public_ip
        self.workdir = Path(workdir)
        self.prefix = namespaced(prefix)
        self.base_port = base_port
        self.shared_scratch = shared_scratch
        self.scratch_path = scratch_path.rstrip("/")
        self.admin_user = admin_user
        self._image = image  # looked up when a node starts (a twin of no node needs no Docker)
        self.nodes: list[TwinNode] = []
        self.public_address = PUBLIC_ADDRESS
        self._subnet = ""
        self._next_host = 10
        self._next_slot = 0

    # --- names -------------------------------------------------------------------------------
    @property
    def network(self) -> str:
        return f"{self.prefix}-net"

    @property
    def shared_volume(self) -> str:
        return f"{self.prefix}-beeond"

    @property
    def key(self) -> Path:
        return self.workdir / "id_controller"

    @property
    def gateway(self) -> str:
        return docker("network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", self.network)

    def ranked(self) -> list[TwinNode]:
        """Nodes in the inventory's rank order (by NAT port; by private IP without public IPs): the head first."""
        if not self.node_public_ip:
            return sorted(self.nodes, key=lambda n: tuple(int(x) for x in n.private_ip.split(".")))
        return sorted(self.nodes, key=lambda n: n.port)

    def endpoint(self, which: TwinNode | int) -> tuple[str, int]:
        """Where the controller reaches the node's sshd: the public address and NAT port, or the
        private IP and port 22 without node public IPs."""
        node = self._node(which)
        return (self.public_address, node.port) if self.node_public_ip else (node.private_ip, 22)

    @property
    def head(self) -> TwinNode:
        return self.ranked()[0]

    def _node(self, which: TwinNode | int) -> TwinNode:
        if isinstance(which, TwinNode):
            return which
        return next(n for n in self.nodes if n.slot == which)

    # --- life cycle --------------------------------------------------------------------------
    def __enter__(self) -> Twin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Twin:
        self.stop()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True)
        self._create_network()
        if self.shared_scratch:
            docker("volume", "create", "--label", f"amlhpc.twin={self.prefix}", self.shared_volume)
        ports = [self.base_port + i for i in range(self.size)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            self.nodes = list(pool.map(self._provision, range(self.size), ports,
                                       [self._allocate_ip() for _unused in ports]))
        self._next_slot = self.size
        self.wait_for_ssh(self.nodes)
        return self

    def stop(self) -> None:
        label = f"label=amlhpc.twin={self.prefix}"
        ids = docker("ps", "-aq", "--filter", label, check=False).split()
        if ids:
            docker("rm", "-f", "-v", *ids, check=False)
        vols = docker("volume", "ls", "-q", "--filter", label, check=False).split()
        if vols:
            docker("volume", "rm", "-f", *vols, check=False)
        docker("network", "rm", self.network, check=False)
        self.nodes = []

    def _create_network(self) -> None:
        # A subnet of our own (docker refuses --ip otherwise); derived from the prefix, moved on
        # when another network holds it.
        seed = int(hashlib.sha256(self.prefix.encode()).hexdigest(), 16)
        for attempt in range(64):
            a, b = 100 + (seed + attempt) % 100, (seed // 100 + attempt * 7) % 250
            subnet = f"10.{a}.{b}.0/24"
            res = subprocess.run(["docker", "network", "create", "--subnet", subnet, "--gateway", f"10.{a}.{b}.1",
                                  "--label",
                                  f"amlhpc.twin={self.prefix}", self.network], capture_output=True, text=True,
                                 timeout=60, check=False)
            if res.returncode == 0:
                self._subnet = subnet
                return
            if "overlap" not in res.stderr.lower():
                raise RuntimeError(f"docker network create {self.network}: {res.stderr.strip()}")
        raise RuntimeError("no free 10.x.y.0/24 subnet for the twin's network")

    def _allocate_ip(self) -> str:
        """A private IP never handed out before in this twin (a replaced node gets a new one)."""
        if self._next_host > 254:
            raise RuntimeError("the twin's /24 ran out of private IPs")
        ip = self._subnet.rsplit(".", 1)[0] + f".{self._next_host}"
        self._next_host += 1
        return ip

    def _provision(self, slot: int, port: int, ip: str) -> TwinNode:
        node_id = new_node_id()
        short = node_id[6:18]
        name = f"{self.prefix}-{slot}-{short}"
        disk = f"{self.prefix}-disk-{short}"
        label = f"amlhpc.twin={self.prefix}"
        docker("volume", "create", "--label", label, disk)
        pub = self.key.with_suffix(".pub").read_text().strip()
        mounts = ["-v", f"{disk}:/mnt"]
        if self.shared_scratch:
            mounts += ["-v", f"{self.shared_volume}:{self.scratch_path}"]
        boot = _BOOT.format(user=self.admin_user, scratch=shlex.quote(self.scratch_path))
        try:
            published = ["-p", f"{self.public_address}:{port}:22"] if self.node_public_ip else []
            docker("run", "-d", "--name", name, "--hostname", name, "--network", self.network, "--ip", ip,
                   *published, "-e", f"CONTROLLER_KEY={pub}", "--label", label,
                   *mounts, self.image, "bash", "-c", boot)
        except RuntimeError:
            docker("rm", "-f", "-v", name, check=False)
            docker("volume", "rm", "-f", disk, check=False)
            raise
        return TwinNode(slot=slot, node_id=node_id, port=port, private_ip=ip, container=name, disk_volume=disk)

    def wait_for_ssh(self, nodes: list[TwinNode], timeout: float = 120) -> None:
        """Until every node's sshd answers with its banner (on its NAT port, or its private IP)."""
        deadline = time.monotonic() + timeout
        pending = list(nodes)
        while pending and time.monotonic() < deadline:
            pending = [n for n in pending if not _ssh_banner(*self.endpoint(n))]
            if pending:
                time.sleep(0.5)
        if pending:
            raise RuntimeError(f"sshd did not answer on {', '.join(n.container for n in pending)}")

    def _remove(self, node: TwinNode) -> None:
        docker("rm", "-f", "-v", node.container, check=False)
        docker("volume", "rm", "-f", node.disk_volume, check=False)

    def _free_port(self, after: int | None = None) -> int:
        """The first port from ``after + 1`` (or ``base_port``) that no node holds and that is
        free on the public address."""
        used = {n.port for n in self.nodes}
        port = self.base_port if after is None else after + 1
        while port in used or not _bindable(self.public_address, port):
            port += 1
        return port

    def replace_node(self, which: TwinNode | int, new_port: bool = False) -> TwinNode:
        """AmlCompute re-provisions the node: new node id, host key, private IP and empty disks,
        behind the same NAT port (or the next free one with ``new_port``)."""
        old = self._node(which)
        self._remove(old)
        self.nodes.remove(old)
        port = old.port
        if new_port:
            port = self._free_port(after=max([n.port for n in self.nodes] + [old.port]))
        node = self._provision(old.slot, port, self._allocate_ip())
        self.nodes.append(node)
        self.nodes.sort(key=lambda n: n.slot)
        self.wait_for_ssh([node])
        return node

    def lose_node(self, which: TwinNode | int, state: str = "preempted") -> TwinNode:
        """AmlCompute takes the node's VM away (a low-priority node preempted, a VM that died): its
        network goes first (no connection of its processes is closed: the others hear nothing
        more), then everything on it stops, its job containers included; the listing shows it in
        ``state`` and no job is placed on it. ``replace_node`` gives the slot a new machine."""
        node = self._node(which)
        jobs = self._job_containers(node)
        docker("kill", node.container, check=False)
        for job in jobs:
            docker("kill", job, check=False)
        node.mark_lost(state)
        return node

    def come_back(self, which: TwinNode | int) -> TwinNode:
        """The lost node's VM boots again (its disks and host key kept): listed under the same
        node id, usable (``lose_node`` undone, as after a reboot)."""
        node = self._node(which)
        docker("start", node.container, check=False)
        node.mark_back()
        self.wait_for_ssh([node])
        return node

    def freeze(self, which: TwinNode | int, state: str = "unusable") -> None:
        """The node stops answering (``docker pause``: every process on it, its job's included, is
        frozen; its network stays up, so nothing it had open is closed). With a ``listing_lag``
        AmlCompute marks the hung VM ``state`` once the lag is over; without one the listing keeps
        it as it was (the frozen node is only seen by what talks to it)."""
        node = self._node(which)
        self._set_paused([node.container, *self._job_containers(node)], True)
        if self.listing_lag:
            node.mark_lost(state)

    def thaw(self, which: TwinNode | int) -> None:
        node = self._node(which)
        self._set_paused([node.container, *self._job_containers(node)], False)
        if node.lost_at is not None:
            node.mark_back()

    @staticmethod
    def _set_paused(containers: list[str], paused: bool, attempts: int = 10) -> None:
        """docker pause (or unpause) every container of ``containers``, checked: on a loaded machine
        the cgroup freezer can fail ("OCI runtime pause failed: unable to freeze"), which left a
        "frozen" node running its job. Tried again for a few seconds; a container it cannot set
        fails the test that asked, in one sentence, rather than a fault that never happened."""
        verb, want = ("pause", "true") if paused else ("unpause", "false")

        def unset() -> list[str]:  # a container gone or stopped has nothing to pause
            return [c for c in containers if docker("inspect", "-f", "{{.State.Paused}}", c, check=False) != want
                    and docker("inspect", "-f", "{{.State.Running}}", c, check=False) == "true"]

        for attempt in range(attempts):
            left = unset()
            if not left:
                return
            docker(verb, *left, check=False)
            time.sleep(0.5 * attempt)
        left = unset()
        if not left:
            return
        raise RuntimeError(f"docker could not {verb} {', '.join(left)} in {attempts} tries (the cgroup freezer "
                           f"refused; /tmp/amlhpc-dockerd.log says why)")

    def _job_containers(self, node: TwinNode) -> list[str]:
        """The job containers running on ``node`` (in its network namespace)."""
        ident = docker("inspect", "-f", "{{.Id}}", node.container, check=False)
        jobs = docker("ps", "-aq", "--filter", f"label=amlhpc.twin={self.prefix}", "--filter",
                      f"name={self.prefix}-job-", check=False).split()
        return [job for job in jobs if docker("inspect", "-f", "{{.HostConfig.NetworkMode}}", job, check=False)
                in (f"container:{node.container}", f"container:{ident}")]

    def scale(self, size: int) -> list[TwinNode]:
        """Scale down (the highest ports go) or up (new nodes at the next free ports)."""
        while len(self.nodes) > size:
            last = self.ranked()[-1]
            self._remove(last)
            self.nodes.remove(last)
        added = []
        while len(self.nodes) < size:
            node = self._provision(self._next_slot, self._free_port(), self._allocate_ip())
            self._next_slot += 1
            self.nodes.append(node)
            added.append(node)
        self.wait_for_ssh(added)
        self.size = size
        return self.nodes

    @property
    def image(self) -> str:
        """The nodes' image: the one given, else the test image (built once, then reused)."""
        if self._image is None:
            self._image = test_image()
        return self._image

    # --- state, for another process (the AzureML stand-in) to drive the same twin ---------------
    def save_state(self, path: Path) -> Path:
        state = {"size": self.size, "workdir": str(self.workdir), "prefix": self.prefix, "base_port": self.base_port,
                 "shared_scratch": self.shared_scratch, "scratch_path": self.scratch_path,
                 "admin_user": self.admin_user, "image": self._image, "subnet": self._subnet,
                 "node_public_ip": self.node_public_ip, "listing_lag": self.listing_lag,
                 "next_host": self._next_host, "next_slot": self._next_slot,
                 "nodes": [vars(n) for n in self.nodes]}
        Path(path).write_text(json.dumps(state, indent=2))
        return Path(path)

    @classmethod
    def attach(cls, path: Path) -> Twin:
        """The running twin whose state :meth:`save_state` wrote (nothing is started)."""
        state = json.loads(Path(path).read_text())
        twin = cls(state["size"], Path(state["workdir"]), prefix=state["prefix"], base_port=state["base_port"],
                   shared_scratch=state["shared_scratch"], scratch_path=state["scratch_path"],
                   admin_user=state["admin_user"], image=state["image"],
                   node_public_ip=state.get("node_public_ip", True), listing_lag=state.get("listing_lag"))
        twin._subnet, twin._next_host, twin._next_slot = state["subnet"], state["next_host"], state["next_slot"]
        twin.nodes = [TwinNode(**n) for n in state["nodes"]]
        return twin

    # --- the inventory's view ---------------------------------------------------------------
    def list_nodes(self, now: float | None = None) -> list[dict[str, Any]]:
        """What ``AmlCompute.list_nodes()`` returns (azureml-core: camelCase dicts) at ``now``: a lost
        node keeps its old state for ``listing_lag`` seconds, as AmlCompute keeps a dead VM listed."""
        public = self.node_public_ip
        now = time.time() if now is None else now
        return [{"nodeId": n.node_id, "port": n.port if public else None,
                 "publicIpAddress": self.public_address if public else None,
                 "privateIpAddress": n.private_ip, "nodeState": n.listed_state(now, self.listing_lag), "runId": None}
                for n in self.nodes]

    def write_nodes_file(self, path: Path) -> Path:
        Path(path).write_text(json.dumps(self.list_nodes(), indent=2))
        return Path(path)

    # --- access -----------------------------------------------------------------------------
    def exec(self, which: TwinNode | int, *cmd: str, user: str = "root",
             timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "exec", "-u", user, self._node(which).container, *cmd],
                              capture_output=True, text=True, timeout=timeout, check=False)

    def host_key(self, which: TwinNode | int) -> str:
        """The node's ed25519 host key (``ssh-ed25519 AAAA...``)."""
        out = self.exec(which, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()
        return " ".join(out[:2])

    def known_hosts(self, path: Path) -> Path:
        """A known_hosts file naming every node as ``[public address]:port`` (its private IP without
        node public IPs), for :meth:`ssh`."""
        def name(n: TwinNode) -> str:
            host, port = self.endpoint(n)
            return host if port == 22 else f"[{host}]:{port}"
        Path(path).write_text("".join(f"{name(n)} {self.host_key(n)}\n" for n in self.nodes))
        return Path(path)

    def ssh(self, which: TwinNode | int, *cmd: str, known_hosts: Path | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``cmd`` as the admin user through the node's NAT port, host key checked."""
        node = self._node(which)
        kh = known_hosts or self.known_hosts(self.workdir / "known_hosts")
        return subprocess.run(
            ["ssh", "-i", str(self.key), "-p", str(self.endpoint(node)[1]), "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={kh}", "-o", "ConnectTimeout=5",
             f"{self.admin_user}@{self.endpoint(node)[0]}", *cmd], capture_output=True, text=True, timeout=timeout, check=False)

    # --- jobs -------------------------------------------------------------------------------
    def run_job(self, spec: dict[str, Any], source_dir: Path, *, python: str, name: str, outputs: Path,
                timeout: float = 900, audit_reads: bool = False, env: dict[str, str] | None = None,
                probe_files: tuple[str, ...] = ("/etc/nccl.conf", "/etc/amlhpc/nccl.env")) -> JobRun:
        """Run an ``aml_job`` spec (azureml_core or azure_ai_ml shape) on the nodes.

        ``source_dir`` is the code AzureML would snapshot (symbolic links resolved), ``python``
        the workload venv's interpreter (mounted read-only into every job container at its own
        path), ``outputs`` where the head's ``outputs/`` is copied. ``env`` adds variables the
        AzureML runtime would set (never secrets in a spec). Each job container records its
        environment and the ``probe_files`` it sees (``JobRun.environments``, ``JobRun.files``)."""
        job = _job_shape(spec)
        # AzureML places a job on usable nodes only (not on one preempted, unusable or leaving).
        nodes = [n for n in self.ranked() if n.usable][: job["node_count"]]
        if len(nodes) < job["node_count"]:
            raise RuntimeError(f"job wants {job['node_count']} nodes; the twin has {len(self.nodes)}")
        head = nodes[0]
        jobdir = self.workdir / "jobs" / name
        if jobdir.exists():
            shutil.rmtree(jobdir)
        venv = Path(python).parent.parent
        mounts_ro = sorted({str(venv.resolve()), str(venv), _python_prefix(python)})
        base_env = {
            **job["env"],
            "MASTER_ADDR": head.private_ip, "MASTER_PORT": str(MASTER_PORT),
            "AZ_BATCH_MASTER_NODE": f"{head.private_ip}:{MASTER_PORT}",
            "AZ_BATCHAI_MPI_MASTER_NODE": head.private_ip,
            "AZUREML_RUN_ID": name, "AZUREML_NODE_COUNT": str(len(nodes)),
            "GLOO_SOCKET_IFNAME": "eth0",
            **(env or {}),
        }
        containers = []
        for rank, node in enumerate(nodes):
            wd = jobdir / f"node{rank}" / "wd"
            shutil.copytree(source_dir, wd, symlinks=False,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "outputs"))
            args = ["--name", f"{self.prefix}-job-{name}-{rank}", "--label", f"amlhpc.twin={self.prefix}",
                    "--network", f"container:{node.container}", "--shm-size", job["shm_size"],
                    "-w", "/job/wd", "-v", f"{wd}:/job/wd"]
            for path in mounts_ro:
                args += ["-v", f"{path}:{path}:ro"]
            args += self._translate_docker_args(node, job["docker_args"], jobdir / f"node{rank}" / "hostfiles")
            node_env = dict(base_env, AZUREML_NODE_RANK=str(rank))
            if audit_reads:
                audit = jobdir / "audit"
                audit.mkdir(parents=True, exist_ok=True)
                (audit / "sitecustomize.py").write_text(_AUDIT)
                args += ["-v", f"{audit}:/job/twin:ro"]
                node_env["PYTHONPATH"] = "/job/twin"
                node_env["TWIN_READ_LOG"] = "/job/wd/.twin-reads.log"
            for k, v in sorted(node_env.items()):
                args += ["-e", f"{k}={v}"]
            probe = ("env -0 > /job/wd/.twin-env; "
                     + "".join(f"cp {shlex.quote(f)} /job/wd/.twin-file-{i} 2>/dev/null; "
                               for i, f in enumerate(probe_files))
                     + 'exec "$@"')
            if os.path.basename(job["script"]) == "launch.py":
                # The per-node launcher (aml_job node_verdict): one process per node, as AzureML's MPI
                # distribution with one process per instance starts it; it starts torchrun itself.
                started = [python, job["script"], *job["args"]]
            else:
                started = [python, "-m", "torch.distributed.run", "--nnodes", str(len(nodes)), "--node_rank",
                           str(rank), "--nproc_per_node", str(job["procs"]), "--master_addr", head.private_ip,
                           "--master_port", str(MASTER_PORT), job["script"], *job["args"]]
            launcher = ["sh", "-c", probe, "twin-launcher", *started]
            containers.append(docker("run", "-d", *args, self.image, *launcher))
        returncodes = self._wait_job(containers, [n.container for n in nodes], timeout)
        logs = [subprocess.run(["docker", "logs", c], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=60, check=False).stdout for c in containers]
        docker("rm", "-f", *containers, check=False)
        if outputs.exists():
            shutil.rmtree(outputs)
        # AzureML uploads every node's outputs/ into the run's: the head's, then the others'
        # (a job whose rank 0 is not on the head writes its metrics elsewhere).
        for rank in range(len(nodes)):
            node_outputs = jobdir / f"node{rank}" / "wd" / "outputs"
            if node_outputs.exists():
                shutil.copytree(node_outputs, outputs, dirs_exist_ok=True)
        run = JobRun(name=name, returncodes=returncodes, logs=logs, outputs=outputs)
        for rank in range(len(nodes)):
            wd = jobdir / f"node{rank}" / "wd"
            envf = wd / ".twin-env"
            run.environments.append(dict(item.split("=", 1) for item in envf.read_text().split("\0") if "=" in item)
                                    if envf.exists() else {})
            run.files.append({f: ((wd / f".twin-file-{i}").read_text() if (wd / f".twin-file-{i}").exists() else None)
                              for i, f in enumerate(probe_files)})
        if audit_reads:
            for rank in range(len(nodes)):
                log = jobdir / f"node{rank}" / "wd" / ".twin-reads.log"
                for line in log.read_text().splitlines() if log.exists() else []:
                    who, _unused, path = line.split(" ", 2)
                    run.reads[path] += 1
                    run.readers.setdefault(path, set()).add(who)
        return run

    @staticmethod
    def _wait_job(containers: list[str], node_containers: list[str], timeout: float, grace: float = 30.0) -> list[int]:
        """Each node's exit code. As AzureML ends a distributed job when one of its processes
        fails, the containers still running ``grace`` seconds after one ended non-zero on a node
        that is still there are stopped (137); all of them at ``timeout`` (124). A node that is
        gone (lose_node) reports nothing: the job goes on until its other processes end."""
        codes: dict[int, int] = {}

        def failed_on_a_live_node(i: int) -> bool:
            up = docker("inspect", "-f", "{{.State.Running}}", node_containers[i], check=False)
            return codes[i] != 0 and up == "true"

        def wait(i: int, container: str) -> None:
            out = subprocess.run(["docker", "wait", container], capture_output=True, text=True, check=False)
            codes[i] = int(out.stdout.strip() or 1) if out.returncode == 0 else 1

        threads = [threading.Thread(target=wait, args=(i, c), daemon=True) for i, c in enumerate(containers)]
        for t in threads:
            t.start()
        deadline, ending = time.monotonic() + timeout, None
        while len(codes) < len(containers):
            now = time.monotonic()
            if ending is None and any(failed_on_a_live_node(i) for i in list(codes)):
                ending = now + grace
            if now >= deadline or (ending is not None and now >= ending):
                late = [c for i, c in enumerate(containers) if i not in codes]
                docker("kill", *late, check=False)
                for t in threads:
                    t.join(timeout=30)
                return [codes.get(i, 124 if now >= deadline else 137) for i in range(len(containers))]
            time.sleep(0.5)
        return [codes[i] for i in range(len(containers))]

    def _translate_docker_args(self, node: TwinNode, docker_args: list[str], hostfiles: Path) -> list[str]:
        """The spec's docker arguments for this node's job container: ``-v SRC:DST`` mounts the
        node's SRC (its scratch volume, its disk, or a copy of one of its files); the rest as is."""
        out: list[str] = []
        it = iter(docker_args)
        for arg in it:
            spec = None
            if arg in ("-v", "--volume"):
                spec = next(it)
            elif arg.startswith("--volume="):
                spec = arg.split("=", 1)[1]
            if spec is None:
                out.append(arg)
                continue
            src, dst, *mode = spec.split(":")
            out += ["-v", ":".join([self._node_path(node, src, hostfiles), dst, *mode])]
        return out

    def _node_path(self, node: TwinNode, src: str, hostfiles: Path) -> str:
        """Where the node's path ``src`` is on this machine, for a bind mount."""
        src = os.path.normpath(src)
        # docker run -v creates a missing source folder (as root): so does the node.
        self.exec(node, "sh", "-c", f"[ -e {shlex.quote(src)} ] || mkdir -p {shlex.quote(src)}")
        for volume, at in ([(self.shared_volume, self.scratch_path)] if self.shared_scratch else []) + [
                (node.disk_volume, "/mnt")]:
            if src == at or src.startswith(at + "/"):
                base = docker("volume", "inspect", "-f", "{{.Mountpoint}}", volume)
                return os.path.join(base, os.path.relpath(src, at)) if src != at else base
        # Any other path (a file under /etc, /opt...): a copy of the node's file or folder.
        dest = hostfiles / src.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        docker("cp", "-L", f"{node.container}:{src}", str(dest), check=False)
        if not dest.exists():  # a file the node does not have: docker run -v makes a folder in its place
            dest.mkdir(parents=True)
        return str(dest)


def namespaced(prefix: str) -> str:
    """``prefix`` under ``$AMLHPC_TWIN_NS`` when set: two checkouts testing at once on one
    Docker engine (parallel branches) then name different containers, networks and subnets."""
    ns = os.environ.get("AMLHPC_TWIN_NS", "")
    return prefix if not ns or prefix.startswith(f"{ns}-") else f"{ns}-{prefix}"


def free_base_port(count: int, start: int = DEFAULT_BASE_PORT, stop: int = 60000) -> int:
    """The first port from ``start`` with ``count`` free ports after it on 127.0.0.1 (step
    ``count``), so that twins of parallel users do not collide. Under ``$AMLHPC_TWIN_NS`` (or in
    a pytest-xdist worker, ``$PYTEST_XDIST_WORKER``: make test-integration runs two) the scan
    starts at an offset of its own in the range (and wraps), so parallel checkouts and workers
    rarely race for the same ports."""
    step = max(count, 1)
    bases = list(range(start, stop - count, step))
    ns = os.environ.get("AMLHPC_TWIN_NS", "") or os.environ.get("PYTEST_XDIST_WORKER", "")
    if ns and bases:
        k = int(hashlib.sha256(ns.encode()).hexdigest(), 16) % len(bases)
        bases = bases[k:] + bases[:k]
    for base in bases:
        if all(_bindable(PUBLIC_ADDRESS, port) for port in range(base, base + count)):
            return base
    raise RuntimeError(f"no {count} free ports between {start} and {stop}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _ssh_banner(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.settimeout(1)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def _python_prefix(python: str) -> str:
    """The installation a venv's interpreter belongs to (mounted read-only beside the venv)."""
    out = subprocess.run([python, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    return out


def _job_shape(spec: dict[str, Any]) -> dict[str, Any]:
    """Script, arguments, docker args, environment and layout from either SDK's spec."""
    if spec.get("backend") == "azureml_core":
        dist = spec["distribution"]
        return {"script": spec["script"], "args": list(spec["arguments"]),
                "docker_args": list(spec["docker"]["arguments"]), "shm_size": spec["docker"]["shm_size"],
                "env": dict(spec.get("environment_variables", {})), "node_count": int(dist["node_count"]),
                "procs": int(dist["process_count_per_node"])}
    if spec.get("backend") == "azure_ai_ml":
        command = shlex.split(spec["command"])
        if command[:1] != ["python"]:
            raise ValueError(f"the twin runs `python SCRIPT ARGS` commands, got {spec['command']!r}")
        res = spec["resources"]
        return {"script": command[1], "args": command[2:], "docker_args": shlex.split(res.get("docker_args", "")),
                "shm_size": res.get("shm_size", "2g"), "env": dict(spec.get("environment_variables", {})),
                "node_count": int(res["instance_count"]),
                "procs": int(spec["distribution"]["process_count_per_instance"])}
    if spec.get("jobType") == "Command":  # azure-ai-ml's REST payload (what the service receives)
        command = shlex.split(spec["command"])
        res, dist = spec.get("resources") or {}, spec.get("distribution") or {}
        return {"script": command[1], "args": command[2:], "docker_args": shlex.split(res.get("dockerArgs") or ""),
                "shm_size": res.get("shmSize") or "2g", "env": dict(spec.get("environmentVariables") or {}),
                "node_count": int(res.get("instanceCount") or 1),
                "procs": int(dist.get("processCountPerInstance") or 1)}
    raise ValueError(f"the twin runs azureml_core and azure_ai_ml specs, not {spec.get('backend')!r}")


if __name__ == "__main__":  # a quick look: python tests/twin/cluster.py [size]
    import tempfile
    with tempfile.TemporaryDirectory() as tmp, Twin(int(sys.argv[1]) if len(sys.argv) > 1 else 2, Path(tmp),
                                                    prefix="twin-demo", base_port=50900) as t:
        print(json.dumps(t.list_nodes(), indent=2))
