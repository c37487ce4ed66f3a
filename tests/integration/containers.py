"""Docker containers that stand in for AmlCompute nodes.

AmlCompute exposes its nodes on one public address with a different SSH port per node,
and the nodes see each other on private IPs. Here: containers on a private Docker network
(their private IPs), each with sshd published on 127.0.0.1:<port>, an admin user with
passwordless sudo and the controller's public key, and a ``list_nodes()``-shaped payload
that the azureml_compute inventory plugin reads from a ``nodes_file``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ADMIN_USER = "azureuser"

_BOOT = r"""
set -e
ssh-keygen -A >/dev/null
id {user} >/dev/null 2>&1 || useradd -m -s /bin/bash {user}
echo '{user} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{user}
chmod 0440 /etc/sudoers.d/{user}
install -d -m 0700 -o {user} -g {user} /home/{user}/.ssh
echo "$CONTROLLER_KEY" > /home/{user}/.ssh/authorized_keys
chown {user}:{user} /home/{user}/.ssh/authorized_keys
chmod 0600 /home/{user}/.ssh/authorized_keys
mkdir -p /run/sshd
exec /usr/sbin/sshd -D -e
"""


def docker(*args: str, check: bool = True) -> str:
    res = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed: {res.stderr.strip()}")
    return res.stdout.strip()


def test_image() -> str:
    return os.environ.get("AMLHPC_TEST_IMAGE") or subprocess.run(
        [str(ROOT / "tests" / "images" / "build-bookworm.sh")], capture_output=True, text=True,
        check=True, timeout=1200).stdout.strip().splitlines()[-1]


@dataclass
class Node:
    name: str
    port: int
    private_ip: str
    node_id: str


@dataclass
class ContainerCluster:
    """``size`` containers named ``<prefix>-<i>`` on network ``<prefix>-net``."""

    size: int
    prefix: str
    workdir: Path
    image: str = field(default_factory=test_image)
    nodes: list[Node] = field(default_factory=list)

    @property
    def network(self) -> str:
        return f"{self.prefix}-net"

    @property
    def key(self) -> Path:
        return self.workdir / "id_controller"

    def start(self) -> ContainerCluster:
        self.stop()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True)
        pub = self.key.with_suffix(".pub").read_text().strip()
        docker("network", "create", self.network)
        boot = _BOOT.format(user=ADMIN_USER)

        def run(i: int) -> Node:
            name = f"{self.prefix}-{i}"
            docker("run", "-d", "--name", name, "--hostname", name, "--network", self.network,
                   "-p", "127.0.0.1::22", "-e", f"CONTROLLER_KEY={pub}", "--label", f"amlhpc.test={self.prefix}",
                   self.image, "bash", "-c", boot)
            port = int(docker("port", name, "22/tcp").splitlines()[0].rsplit(":", 1)[1])
            ip = docker("inspect", "-f", f"{{{{(index .NetworkSettings.Networks \"{self.network}\").IPAddress}}}}", name)
            return Node(name=name, port=port, private_ip=ip, node_id=f"tvmps_{i:04d}_{self.prefix}_d")

        with ThreadPoolExecutor(max_workers=8) as pool:
            self.nodes = list(pool.map(run, range(self.size)))
        self.wait_for_ssh()
        return self

    def wait_for_ssh(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        pending = list(self.nodes)
        while pending and time.monotonic() < deadline:
            pending = [n for n in pending if subprocess.run(
                ["ssh", *self.ssh_options(), "-p", str(n.port), f"{ADMIN_USER}@127.0.0.1", "true"],
                capture_output=True, timeout=30, check=False).returncode != 0]
            if pending:
                time.sleep(1)
        if pending:
            raise RuntimeError(f"sshd did not answer on {', '.join(n.name for n in pending)}")

    def ssh_options(self) -> list[str]:
        return ["-i", str(self.key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                "-o", f"UserKnownHostsFile={self.workdir / 'known_hosts'}", "-o", "ConnectTimeout=5"]

    def list_nodes_payload(self) -> list[dict]:
        """What ``AmlCompute.list_nodes()`` returns (azureml-core: camelCase dicts)."""
        return [{"nodeId": n.node_id, "port": n.port, "publicIpAddress": "127.0.0.1",
                 "privateIpAddress": n.private_ip, "nodeState": "idle", "runId": None}
                for n in self.nodes]

    def write_nodes_file(self, path: Path) -> Path:
        path.write_text(json.dumps(self.list_nodes_payload(), indent=2))
        return path

    def exec(self, index: int, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "exec", self.nodes[index].name, *cmd], capture_output=True,
                              text=True, timeout=120, check=False)

    def stop(self) -> None:
        ids = docker("ps", "-aq", "--filter", f"label=amlhpc.test={self.prefix}", check=False).split()
        if ids:
            docker("rm", "-f", *ids, check=False)
        docker("network", "rm", self.network, check=False)
