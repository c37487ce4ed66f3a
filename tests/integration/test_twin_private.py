"""A private cluster on the AmlCompute twin: the nodes in a VNet subnet without public IPs
(``aml_cluster_subnet``, ``aml_cluster_node_public_ip: false``), reached on their private IPs
only, as a controller inside the VNet reaches them.

The twin runs in its private mode (``Twin(node_public_ip=False)``): no port is published, the
nodes answer only on their private IPs of the twin's Docker network, which the host reaches as
a controller inside the VNet would; AmlCompute (the stand-in, ``tests/twin/azureml.py``) lists
them with no public IP and no port. Through the user's example files:

* the cluster phase creates the cluster in the subnet (the request carries the subnet and
  ``enableNodePublicIp: false``, remote login Disabled), waits for each node's sshd on its
  private IP, and reads the inventory again;
* the inventory (``use_private_ip: true``) lists the nodes at their private IPs, port 22, host
  keys scanned there; a phase (``ssh_trust``: root on the head reaches every node by private IP)
  runs on them; a second cluster play changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import test_twin_cluster
from test_multinode import recap, twin_env
from test_twin_cluster import SP_ENV, containers, play, user_files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from azureml_fakes import SUB  # noqa: E402
from twin.cluster import Twin, free_base_port  # noqa: E402

# Without a hyphen: the roles that look a cluster's group up by name (ssh_trust, beeond, healthcheck)
# do not turn hyphens into underscores as the inventory's group names do (reported, not theirs here).
CLUSTER = "twpriv"
SUBNET = f"/subscriptions/{SUB}/resourceGroups/rg-net/providers/Microsoft.Network/virtualNetworks/vnet-hpc/subnets/nodes"


@pytest.fixture()
def twin(tmp_path):
    t = Twin(0, tmp_path / "twin", prefix="amlhpc-twin-pv", base_port=free_base_port(3), node_public_ip=False)
    try:
        yield t.start()
    finally:
        t.stop()


def _unwrap(value):
    return value["__ansible_unsafe"] if isinstance(value, dict) and set(value) == {"__ansible_unsafe"} else value


def compute(state: Path) -> dict:
    return json.loads(state.read_text())["computes"][CLUSTER]


def test_a_private_cluster_is_made_waited_for_listed_and_set_up_on_private_ips(twin, tmp_path, project, monkeypatch):
    monkeypatch.setattr(test_twin_cluster, "CLUSTER", CLUSTER)
    inv, state = user_files(twin, tmp_path, "azure-ai-ml")
    example = yaml.safe_load(inv.read_text())
    inv.write_text(yaml.safe_dump({**example, "use_private_ip": True}))
    settings = inv.parent / "group_vars" / "all" / "aml_cluster.yml"
    settings.write_text(yaml.safe_dump({**yaml.safe_load(settings.read_text()), "aml_cluster_subnet": SUBNET,
                                        "aml_cluster_node_public_ip": False, "ssh_trust_become": True}))
    cluster_yml = str(ROOT / "playbooks" / "cluster.yml")

    made = play(project, inv, state, cluster_yml, str(ROOT / "playbooks" / "ssh_trust.yml"))
    assert recap(made.stdout)["localhost"]["changed"] == 1, made.stdout[-4000:]
    assert f"cluster '{CLUSTER}': create; 2 node(s) idle" in made.stdout
    props = compute(state)["properties"]["properties"]
    assert props["subnet"] == {"id": SUBNET} and props["enableNodePublicIp"] is False, props
    assert props["remoteLoginPortPublicAccess"] == "Disabled"
    assert containers(twin) == 2
    # No port is published: the nodes answer on their private IPs only.
    for node in Twin.attach(tmp_path / "twin.json").nodes:
        assert not subprocess.run(["docker", "port", node.container], capture_output=True, text=True,
                                  check=False).stdout.strip()
    counts = recap(made.stdout)
    assert {h: (r["failed"], r["unreachable"]) for h, r in counts.items() if h != "localhost"} == {
        f"{CLUSTER}-0": (0, 0), f"{CLUSTER}-1": (0, 0)}, made.stdout[-4000:]

    # The inventory: private IPs, port 22, host keys pinned there.
    env = {**twin_env(state, project), **SP_ENV}
    listed = subprocess.run([str(ROOT / ".venv" / "bin" / "ansible-inventory"), "-i", str(inv), "--list"], cwd=project,
                            env=env, capture_output=True, text=True, timeout=300, check=False)
    assert listed.returncode == 0, listed.stderr[-3000:]
    hostvars = json.loads(listed.stdout)["_meta"]["hostvars"]
    twin = Twin.attach(tmp_path / "twin.json")  # as the cluster phase's scale left it (another process)
    ranked = twin.ranked()
    assert {h: (_unwrap(v["ansible_host"]), v["ansible_port"]) for h, v in hostvars.items()} == {
        f"{CLUSTER}-{i}": (n.private_ip, 22) for i, n in enumerate(ranked)}
    known = (tmp_path / "known_hosts").read_text()
    for node in ranked:
        assert f"{node.private_ip} {twin.host_key(node)}" in known, known

    # ssh_trust ran: root on the head reaches the other node by its private IP, host key checked.
    head, other = ranked
    hop = twin.exec(head, "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", other.private_ip,
                    "hostname")
    assert hop.returncode == 0 and hop.stdout.strip() == other.container, hop.stderr

    same = play(project, inv, state, cluster_yml)
    assert recap(same.stdout)["localhost"]["changed"] == 0, same.stdout[-4000:]
    assert f"cluster '{CLUSTER}': none; 2 node(s) idle" in same.stdout
