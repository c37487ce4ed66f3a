"""Kept ssh connections follow node ids: every host gets an ansible_control_path of its own
node id (amlhpc.trust.known_hosts.control_path), so a new node behind an old endpoint is reached
through a new ssh ControlPersist master, never through the one kept to the old VM."""

from __future__ import annotations

import json
from pathlib import Path
import yaml
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader

from amlhpc.trust.known_hosts import Endpoint, control_path

IP = "20.84.17.201"
init_plugin_loader()


def ep(port: int, node_id: str = "", user: str = "azureuser", cluster: str = "gpu") -> Endpoint:
    return Endpoint(IP, port, node_id or f"id-{port}", f"{cluster}-{port - 50000}", cluster, user)


def test_a_new_node_id_behind_the_same_endpoint_gets_another_control_path():
    old, new = ep(50001, "tvmps_a"), ep(50001, "tvmps_b")
    assert control_path(old) != control_path(new)
    assert control_path(old) == control_path(ep(50001, "tvmps_a"))  # stable while the node stays
    assert control_path(old, ["ssh-ed25519 AAAA1"]) != control_path(old, ["ssh-ed25519 AAAA2"])  # pinned again
    assert control_path(old) != control_path(ep(50001, "tvmps_a", user="root"))


def test_the_path_is_a_template_of_the_ssh_connection_s_own_folder_and_short():
    path = control_path(ep(50000))
    # ansible-core's ssh connection fills in %(directory)s (its control_path_dir); ssh's own
    # %-tokens are not used, and the socket path stays far below the 108-byte limit.
    assert path.startswith("%(directory)s/") and path.count("%") == 1
    assert len(path % {"directory": "/d"}) == len("/d/") + 12


def test_every_host_of_the_inventory_gets_its_node_s_control_path(tmp_path, monkeypatch):
    monkeypatch.setenv("AMLHPC_KNOWN_HOSTS", "false")
    monkeypatch.setenv("AMLHPC_KNOWN_HOSTS_FILE", str(tmp_path / "known_hosts"))  # the record of host names
    monkeypatch.setenv("AMLHPC_KNOWN_HOSTS_MIGRATE_FROM", str(tmp_path / "old" / "known_hosts"))
    nodes = tmp_path / "n.json"
    records = [{"nodeId": f"n{i}", "privateIpAddress": f"10.0.0.{4 + i}", "publicIpAddress": IP,
                "port": 50000 + i, "nodeState": "idle"} for i in range(2)]
    nodes.write_text(json.dumps(records))
    config = tmp_path / "c.azureml_compute.yml"
    config.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file",
                                      "cluster": "gpu", "nodes_file": str(nodes), "admin_user": "azureuser"}))
    paths = {h: InventoryManager(DataLoader(), [str(config)]).get_host(h).get_vars()["ansible_control_path"]
             for h in ("gpu-0", "gpu-1")}
    assert paths["gpu-0"] == control_path(Endpoint(IP, 50000, "n0", "gpu-0", "gpu", "azureuser"))
    assert len(set(paths.values())) == 2
    records[1]["nodeId"] = "n1-replacement"  # AmlCompute replaced the node behind gpu-1
    nodes.write_text(json.dumps(records))
    again = InventoryManager(DataLoader(), [str(config)]).get_host("gpu-1").get_vars()["ansible_control_path"]
    assert again != paths["gpu-1"]
    config.write_text(config.read_text() + "ssh_control_path: false\n")
    assert "ansible_control_path" not in InventoryManager(DataLoader(), [str(config)]).get_host("gpu-1").get_vars()


def test_the_plugin_uses_no_ansible_internals():
    """Issue 41 item 5: no plugin loaders, config internals or ansible.release from the plugin."""
    import ast

    source = (Path(__file__).resolve().parents[4] / "plugins" / "inventory" / "azureml_compute.py").read_text()
    names = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom) and n.module}
    names |= {a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names}
    assert not {"ansible.constants", "ansible.release", "ansible.plugins.loader"} & names, names
    assert not [n for n in names if n.startswith("ansible._internal")]
    for private in ("cache_loader", "connection_loader", "get_config_value", "from ansible import constants"):
        assert private not in source, private
