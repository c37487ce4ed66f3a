"""The twin itself behaves like AmlCompute (tests/twin/cluster.py): what the other twin tests
and bench/ rely on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from twin.cluster import Twin, free_base_port  # noqa: E402


@pytest.fixture()
def twin(tmp_path):
    t = Twin(2, tmp_path, prefix="amlhpc-twin-self", base_port=free_base_port(4), shared_scratch=True)
    try:
        yield t.start()
    finally:
        t.stop()


def test_nodes_look_like_amlcompute_nodes(twin):
    payload = twin.list_nodes()
    assert [n["port"] for n in payload] == [twin.base_port, twin.base_port + 1]
    assert {n["publicIpAddress"] for n in payload} == {"127.0.0.1"}
    assert len({n["privateIpAddress"] for n in payload}) == 2 and all(n["nodeId"].startswith("tvmps_")
                                                                       for n in payload)
    # The admin user is not root, has passwordless sudo; /mnt and the scratch point are root's.
    res = twin.ssh(0, "id -un; sudo -n id -un; stat -c %U /mnt /mnt/scratch; touch /mnt/scratch/x")
    out = res.stdout.split()
    assert out[:4] == ["azureuser", "root", "root", "root"], res.stdout + res.stderr
    assert "Permission denied" in res.stderr
    # The nodes see each other on their private IPs.
    assert twin.exec(0, "bash", "-c", f"echo > /dev/tcp/{twin.nodes[1].private_ip}/22").returncode == 0


def test_shared_scratch_is_one_file_system(twin):
    assert twin.exec(0, "sh", "-c", "echo hello > /mnt/scratch/shared").returncode == 0
    assert twin.exec(1, "cat", "/mnt/scratch/shared").stdout == "hello\n"
    # The rest of /mnt stays node-local.
    twin.exec(0, "sh", "-c", "echo mine > /mnt/local")
    assert twin.exec(1, "test", "-e", "/mnt/local").returncode != 0


def test_replace_and_scale_like_amlcompute(twin):
    old = twin.nodes[1]
    key, ip = twin.host_key(old), old.private_ip
    twin.exec(old, "sh", "-c", "echo data > /mnt/resource")
    new = twin.replace_node(old.slot)
    assert new.port == old.port and new.node_id != old.node_id
    assert new.private_ip != ip and twin.host_key(new) != key
    assert twin.exec(new, "test", "-e", "/mnt/resource").returncode != 0, "a replaced node has empty disks"
    moved = twin.replace_node(new.slot, new_port=True)
    assert moved.port > twin.base_port + 1 and moved.node_id != new.node_id
    twin.scale(1)
    assert [n["port"] for n in twin.list_nodes()] == [twin.base_port]
    twin.scale(3)
    ports = sorted(n["port"] for n in twin.list_nodes())
    assert len(set(ports)) == 3 and ports[0] == twin.base_port
    assert all(twin.ssh(n, "true").returncode == 0 for n in twin.nodes)
