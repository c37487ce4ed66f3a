"""Nodes of a cluster without node public IPs (enableNodePublicIp false, in a VNet subnet): the
service lists them with no publicIpAddress and no port; the inventory reaches them on their
private IPs with use_private_ip, and says so in one sentence without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, inventory_loader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amlhpc.azure.aml_nodes import nodes_from_records, rank_order
from azureml_fakes import make_nodes

init_plugin_loader()


def parse(tmp_path: Path, nodes: list, **options) -> InventoryData:
    (tmp_path / "nodes.json").write_text(json.dumps({"nodes": nodes}))
    path = tmp_path / "gpu.azureml_compute.yml"
    path.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file",
                                    "cluster": "gpu", "nodes_file": "nodes.json", "admin_user": "azureuser",
                                    "min_nodes": len(nodes), "max_nodes": len(nodes), "known_hosts": False,
                                    **options}))
    plugin = inventory_loader.get("amlhpc.azureml.azureml_compute")
    data = InventoryData()
    plugin.parse(data, DataLoader(), str(path), cache=False)
    return data


def test_nodes_without_public_ip_or_port_are_reached_on_their_private_ips(tmp_path):
    nodes = make_nodes(3, nat=False)
    assert {(n["publicIpAddress"], n["port"]) for n in nodes} == {(None, None)}
    data = parse(tmp_path, nodes, use_private_ip=True)
    got = {h: (v.vars["ansible_host"], v.vars["ansible_port"], v.vars["aml_node_rank"], v.vars["aml_public_port"])
           for h, v in data.hosts.items()}
    assert got == {"gpu-0": ("10.0.0.4", 22, 0, ""), "gpu-1": ("10.0.0.5", 22, 1, ""), "gpu-2": ("10.0.0.6", 22, 2, "")}


def test_without_use_private_ip_it_says_what_to_set(tmp_path):
    with pytest.raises(AnsibleError, match="has no publicIpAddress .a cluster without node public IPs.: set "
                                           "use_private_ip: true"):
        parse(tmp_path, make_nodes(2, nat=False))


def test_a_port_without_a_public_ip_or_a_bad_port_is_still_refused(tmp_path):
    nodes = make_nodes(2)
    nodes[0]["port"] = None  # a public IP but no port: not a shape the service returns
    with pytest.raises(AnsibleError, match="'port' must be an integer 1-65535, not None"):
        parse(tmp_path, nodes, use_private_ip=True)


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 40), st.randoms(use_true_random=False))
def test_private_nodes_rank_by_private_ip_whatever_the_listing_order(n, rnd):
    records = make_nodes(n, nat=False, shuffle=False)
    listed = list(records)
    rnd.shuffle(listed)
    ranked = [node.private_ip for node in rank_order(nodes_from_records(listed, "gpu", "test"))]
    assert ranked == [r["privateIpAddress"] for r in records]
