"""The controller's known_hosts for AmlCompute nodes, with real sshd and real ssh-keyscan.

Two sshd containers stand in for the nodes (one address, a NAT port each). Host key checking
stays on (ansible.cfg); the azureml_compute plugin keeps the known_hosts file:

* first run: no prompt (stdin closed, nothing answers a question), every node reached;
* AmlCompute replaced a node (a new container, new host keys, the same port, a new node id):
  a warning names the node and the run reaches it;
* the host key changed while the node id did not (what a man in the middle looks like): ssh
  refuses the node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from containers import _BOOT, ADMIN_USER, ContainerCluster, docker

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = str(Path(sys.executable).parent / "ansible")


@pytest.fixture()
def cluster(tmp_path):
    c = ContainerCluster(2, "inv-kh", tmp_path / "cluster")
    try:
        yield c.start()
    finally:
        c.stop()


def replace_node(cluster: ContainerCluster, index: int) -> None:
    """A new machine behind the same NAT port: new container, new host keys."""
    node = cluster.nodes[index]
    docker("rm", "-f", node.name)
    pub = cluster.key.with_suffix(".pub").read_text().strip()
    docker("run", "-d", "--name", node.name, "--hostname", node.name, "--network", cluster.network,
           "-p", f"127.0.0.1:{node.port}:22", "-e", f"CONTROLLER_KEY={pub}", "--label", f"amlhpc.test={cluster.prefix}",
           cluster.image, "bash", "-c", _BOOT.format(user=ADMIN_USER))
    cluster.wait_for_ssh()


def write_inventory(tmp_path: Path, cluster: ContainerCluster, node_ids: list[str]) -> Path:
    payload = cluster.list_nodes_payload()
    for record, node_id in zip(payload, node_ids):
        record["nodeId"] = node_id
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "nodes.json").write_text(json.dumps(payload))
    # What a user writes: the plugin file and the key to log in with. Nothing about host keys.
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump({"ansible_ssh_private_key_file": str(cluster.key)}))
    config = inv / "kh.azureml_compute.yml"
    config.write_text(yaml.safe_dump({"plugin": "azureml_compute", "source": "nodes_file", "cluster": "kh",
                                      "nodes_file": "nodes.json", "admin_user": ADMIN_USER,
                                      "known_hosts_file": str(tmp_path / "controller_known_hosts")}))
    return config


def ping(tmp_path: Path, config: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / "cp"))
    # stdin closed: a host key prompt would fail the run (under ansible-runner it hangs).
    return subprocess.run([ANSIBLE, "-i", str(config), "aml_nodes", "-m", "ansible.builtin.ping"], cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)


def test_host_keys_follow_the_nodes_with_checking_on(tmp_path, cluster):
    ids = [n.node_id for n in cluster.nodes]
    known = tmp_path / "controller_known_hosts"

    first = ping(tmp_path, write_inventory(tmp_path, cluster, ids))
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count("SUCCESS") == 2
    assert "Are you sure you want to continue connecting" not in first.stdout + first.stderr
    for node in cluster.nodes:
        assert f"[127.0.0.1]:{node.port} ssh-ed25519 " in known.read_text()
    old_line = [line for line in known.read_text().splitlines() if f":{cluster.nodes[1].port} ssh-ed25519" in line]

    # AmlCompute replaced node 1: a new machine (new host keys) at the same port, a new node id.
    replace_node(cluster, 1)
    ids[1] = "tvmps_replacement_d"
    second = ping(tmp_path, write_inventory(tmp_path, cluster, ids))
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.count("SUCCESS") == 2
    assert (f"node kh-1 at [127.0.0.1]:{cluster.nodes[1].port} was replaced by AmlCompute "
            f"(node id {cluster.nodes[1].node_id} -> tvmps_replacement_d)") in " ".join((second.stderr + second.stdout).split())
    assert old_line[0] not in known.read_text()

    # The key changes again but the node id stays: that is not AmlCompute, ssh refuses the node.
    replace_node(cluster, 1)
    third = ping(tmp_path, write_inventory(tmp_path, cluster, ids))
    assert third.returncode != 0
    out = third.stdout + third.stderr
    assert "kh-0 | SUCCESS" in out and "kh-1 | UNREACHABLE" in out
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in out or "Host key verification failed" in out
