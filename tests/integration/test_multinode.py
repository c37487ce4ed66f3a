"""The whole run on several nodes, reached the way AmlCompute exposes them.

Docker containers running sshd stand in for the nodes: one address (127.0.0.1), a different
port per node, an admin user with sudo, private IPs on their own network. They are described
by a ``nodes_file`` in ``list_nodes()`` form, read by the azureml_compute inventory plugin,
and site.yml runs against them: SSH trust for real, the hardware roles skipping (no NVMe, no
GPU, BeeOND off), the data set uploaded gzip-encoded to Azurite and staged into every node
with the shard plan, the health checks, and the local training job on the controller. A
second run of the whole thing reports changed=0 on every node.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from containers import ContainerCluster, docker
from conftest import ACCOUNT_KEY, _spawn_azurite, free_port

ROOT = Path(__file__).resolve().parents[2]
NODES = 3
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def recap(output: str) -> dict[str, dict[str, int]]:
    """Per-host counters of the PLAY RECAP."""
    out = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        out[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counters)}
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = ContainerCluster(NODES, "amlhpc-e2e", tmp_path_factory.mktemp("e2e"))
    try:
        yield c.start()
    finally:
        c.stop()


@pytest.fixture(scope="module")
def gateway_azurite(cluster, tmp_path_factory):
    """Azurite on the node network's gateway address, so the nodes reach it."""
    gateway = docker("network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", cluster.network)
    workdir = tmp_path_factory.mktemp("azurite-e2e")
    port = free_port()
    proc = _spawn_azurite(port, workdir, host=gateway)
    yield f"http://{gateway}:{port}/devstoreaccount1"
    os.killpg(proc.pid, 15)
    proc.wait(10)


def test_site_on_container_cluster(cluster, gateway_azurite, tmp_path):
    inv_dir = tmp_path / "inventory"
    (inv_dir / "group_vars").mkdir(parents=True)
    nodes_file = cluster.write_nodes_file(tmp_path / "nodes.json")
    (inv_dir / "e2e.azureml_compute.yml").write_text(yaml.safe_dump({
        "plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file", "cluster": "e2e",
        "nodes_file": str(nodes_file), "admin_user": "azureuser",
        "min_nodes": NODES, "max_nodes": NODES}))
    scratch = tmp_path / "controller"
    extra = {
        "ansible_ssh_private_key_file": str(cluster.key),
        "ansible_ssh_common_args": f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={tmp_path / 'known_hosts'}",
        "aml_cluster_manage": False,
        "stage_account_url": gateway_azurite,
        "stage_container": "cosmoflow",
        "stage_dir": "/mnt/scratch/cosmoflow",
        "stage_azcopy_src": str(ROOT / ".tools" / "bin" / "azcopy"),
        "prepare_dataset_src": str(scratch / "cosmoflow-src"),
        "prepare_dataset_generate": True,
        "prepare_dataset_account_key": ACCOUNT_KEY,
        "prepare_dataset_create_container": True,
        "aml_job_backend": "local",
        "aml_job_data_dir": str(scratch / "cosmoflow-src"),
        "aml_job_output_dir": str(scratch / "outputs"),
        "aml_job_download_dir": str(scratch / "outputs"),
        "healthcheck_fs_path": "/tmp",
        "healthcheck_fs_files": 2,
        "healthcheck_fs_file_size_mb": 8,
        # With the no_log switch off, the modules themselves must still never show the SAS.
        "amlhpc_no_log": False,
    }
    # The SAS reaches the play as a lookup, never on a command line or in a file.
    (inv_dir / "group_vars" / "all.yml").write_text(yaml.safe_dump(extra) + (
        "stage_sas: \"{{ lookup('amlhpc.azureml.blob_sas', stage_account_url, container=stage_container, "
        "account_key=prepare_dataset_account_key) }}\"\n"))
    env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="true", ANSIBLE_FORCE_COLOR="0")

    def run() -> subprocess.CompletedProcess:
        return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv_dir / "e2e.azureml_compute.yml"), "site.yml"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500, check=False)

    first = run()
    (tmp_path / "first.log").write_text(first.stdout + first.stderr)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-2000:]
    hosts = [f"e2e-{i}" for i in range(NODES)]
    assert set(hosts) <= set(recap(first.stdout))

    # SSH trust for real: root on the head reaches every node by private IP, no prompt.
    head = min(range(NODES), key=lambda i: cluster.nodes[i].port)
    for node in cluster.nodes:
        res = cluster.exec(head, "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                           f"root@{node.private_ip}", "hostname")
        assert res.returncode == 0 and res.stdout.strip() == node.name, res.stderr
    nodefile = cluster.exec(head, "cat", "/etc/amlhpc/nodefile").stdout.split()
    ranked = sorted(cluster.nodes, key=lambda n: n.port)
    assert nodefile == [n.private_ip for n in ranked]

    # Staging: every file of the data set on exactly one node, decompressed, byte-identical.
    src = scratch / "cosmoflow-src"
    expected = {str(p.relative_to(src)).removesuffix(".gz"): p for p in src.rglob("*.tfrecord*")}
    assert len(expected) > 0
    seen: dict[str, str] = {}
    for i, node in enumerate(cluster.nodes):
        listing = cluster.exec(i, "bash", "-c", "cd /mnt/scratch/cosmoflow && find . -name '*.tfrecord*' "
                               "-not -path './.*' -printf '%P\\n' | sort").stdout.split()
        for name in listing:
            assert name.endswith(".tfrecord"), f"{node.name}: {name} kept its .gz suffix"
            assert name not in seen, f"{name} staged on both {seen[name]} and {node.name}"
            seen[name] = node.name
        sums = cluster.exec(i, "bash", "-c", "cd /mnt/scratch/cosmoflow && sha256sum " + " ".join(listing)).stdout
        for line in sums.splitlines():
            digest, name = line.split()
            raw = expected[name].read_bytes()
            raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
            assert hashlib.sha256(raw).hexdigest() == digest, f"{node.name}: {name} differs from the source"
    assert sorted(seen) == sorted(expected)
    assert len(set(seen.values())) == NODES, "every node got a shard"

    # The run ends with its report; the SAS never shows.
    assert "training loss per epoch" in first.stdout
    assert "sig=" not in first.stdout + first.stderr

    second = run()
    (tmp_path / "second.log").write_text(second.stdout + second.stderr)
    assert second.returncode == 0, second.stdout[-6000:]
    counters = recap(second.stdout)
    changed = {h: counters[h]["changed"] for h in hosts}
    assert changed == {h: 0 for h in hosts}, json.dumps(changed)
