"""The azureml_compute inventory plugin, loaded the way Ansible loads it (inventory_loader /
InventoryManager), with Azure faked at the SDK boundary only (see tests/azureml_fakes.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.inventory.data import InventoryData
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, inventory_loader
from ansible.utils.display import Display
from packaging.version import Version

from ansible_cli import ansible_cli
from ansible_compat import CORE, squashed
from azureml_fakes import RG, SUB, WS, World, install_v1, install_v2, make_nodes

ROOT = Path(__file__).resolve().parents[4]
FIXTURE = ROOT / "tests" / "fixtures" / "azureml" / "list_nodes_gpu4.json"
SDKS = ["azureml-core", "azure-ai-ml"]

# What the ansible CLIs do first: ansible.builtin.* names (lookups, cache plugins) resolve.
init_plugin_loader()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("AZURE_CLIENT_ID", "AZURE_SECRET", "AZURE_CLIENT_SECRET", "AZURE_TENANT", "AZURE_TENANT_ID",
                 "AZURE_SUBSCRIPTION_ID", "IDENTITY_ENDPOINT", "MSI_ENDPOINT", "ANSIBLE_AZURE_AUTH_SOURCE"):
        monkeypatch.delenv(name, raising=False)


FAKE_KEYSCAN = r"""#!/bin/sh
# ssh-keyscan -T <s> -p <port> <address>: answers with the key in $FAKE_KEYSCAN_KEYS/<port>
# (default: a key named after the port), or fails like an unreachable node for "refuse".
port=$4 address=$5
key="AAAAC3key$port"
[ -f "$FAKE_KEYSCAN_KEYS/$port" ] && key=$(cat "$FAKE_KEYSCAN_KEYS/$port")
if [ "$key" = refuse ]; then echo "$address port $port: Connection refused" >&2; exit 1; fi
echo "# $address:$port SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u6"
host="[$address]:$port"
[ "$port" = 22 ] && host=$address  # as ssh-keyscan writes them
echo "$host ssh-ed25519 $key"
"""


@pytest.fixture(autouse=True)
def fake_keyscan(tmp_path, monkeypatch):
    """ssh-keyscan answering for the fixtures' made-up addresses (the real one: tests/integration),
    and a known_hosts file of the test's own."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    script = bindir / "ssh-keyscan"
    script.write_text(FAKE_KEYSCAN)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AMLHPC_KNOWN_HOSTS_FILE", str(tmp_path / "ssh" / "known_hosts"))
    # Nothing migrates from the checkout's own 2.2.0 place (ansible.cfg's known_hosts_migrate_from).
    monkeypatch.setenv("AMLHPC_KNOWN_HOSTS_MIGRATE_FROM", str(tmp_path / "old" / "known_hosts"))
    keys = tmp_path / "keys"
    keys.mkdir()
    monkeypatch.setenv("FAKE_KEYSCAN_KEYS", str(keys))
    return keys


@pytest.fixture()
def warnings(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(Display, "warning", lambda self, msg, *a, **k: seen.append(str(msg)))
    return seen


@pytest.fixture()
def world(monkeypatch):
    return World()


def fake(monkeypatch, world: World, source: str) -> None:
    (install_v1 if source == "azureml-core" else install_v2)(monkeypatch, world)


def write_config(tmp_path: Path, config: dict, name: str = "test.azureml_compute.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", **config}))
    return path


def sdk_config(source: str, **extra) -> dict:
    return {"source": source, "subscription_id": SUB, "resource_group": RG, "workspace_name": WS,
            "auth_source": "cli", **extra}


def load(path: Path, cache: bool = True) -> InventoryManager:
    """Through Ansible's own inventory loading."""
    return InventoryManager(loader=DataLoader(), sources=[str(path)], cache=cache)


def parse(path: Path, cache: bool = True) -> InventoryData:
    """Through inventory_loader directly, so parse errors reach the test."""
    plugin = inventory_loader.get("amlhpc.azureml.azureml_compute")
    assert plugin.verify_file(str(path))
    data = InventoryData()
    plugin.parse(data, DataLoader(), str(path), cache=cache)
    return data


def hv(inv: InventoryManager, host: str) -> dict:
    return inv.get_host(host).get_vars()


# ---------------------------------------------------------------------------------------
# Sources


def test_verify_file_takes_only_our_names(tmp_path):
    plugin = inventory_loader.get("amlhpc.azureml.azureml_compute")
    for name, ours in (("a.azureml_compute.yml", True), ("a.azureml_compute.yaml", True),
                       ("a.yml", False), ("azureml_compute.yml", False), ("a.aws_ec2.yml", False)):
        p = tmp_path / name
        p.write_text("plugin: azureml_compute\n")
        assert plugin.verify_file(str(p)) is ours, name


def test_nodes_file_source_gives_the_inventory_contract(tmp_path):
    path = write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(FIXTURE),
                                   "admin_user": "azureuser", "min_nodes": 4, "max_nodes": 4,
                                   "vm_size": "Standard_ND96asr_v4"})
    inv = load(path)
    assert [h.name for h in inv.groups["aml_nodes"].get_hosts()] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert [h.name for h in inv.groups["head"].get_hosts()] == ["gpu-0"]
    assert [h.name for h in inv.groups["workers"].get_hosts()] == ["gpu-1", "gpu-2", "gpu-3"]
    assert [h.name for h in inv.groups["cluster_gpu"].get_hosts()] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    raw = {n["port"]: n for n in json.loads(FIXTURE.read_text())}
    for rank in range(4):
        v = hv(inv, f"gpu-{rank}")
        node = raw[50000 + rank]  # rank follows the port, not the order of the file
        assert v["ansible_host"] == node["publicIpAddress"]
        assert v["ansible_port"] == 50000 + rank and isinstance(v["ansible_port"], int)
        assert v["ansible_user"] == "azureuser"
        assert v["aml_node_rank"] == rank
        assert v["aml_private_ip"] == node["privateIpAddress"]
        assert v["aml_node_id"] == node["nodeId"]
        assert v["aml_node_state"] == "idle" and v["aml_run_id"] == ""
        assert v["aml_cluster"] == "gpu"
        assert (v["aml_cluster_min_nodes"], v["aml_cluster_max_nodes"]) == (4, 4)
        assert v["aml_vm_size"] == "Standard_ND96asr_v4"


@pytest.mark.parametrize("source", SDKS)
def test_sdk_sources_read_nodes_and_cluster_properties(tmp_path, monkeypatch, world, source):
    world.add("gpu-a100", make_nodes(8, "gpu-a100"), vm_size="STANDARD_ND96ASR_V4", admin_user="hpcadmin")
    fake(monkeypatch, world, source)
    inv = load(write_config(tmp_path, sdk_config(source, clusters=["gpu-a100"])))
    names = [h.name for h in inv.groups["cluster_gpu_a100"].get_hosts()]
    assert names == [f"gpu-a100-{i}" for i in range(8)]
    expected = {n["port"]: n for n in make_nodes(8, "gpu-a100")}
    for i, name in enumerate(names):
        v = hv(inv, name)
        assert v["ansible_port"] == 50000 + i
        assert v["aml_private_ip"] == expected[50000 + i]["privateIpAddress"]
        assert v["aml_node_id"] == expected[50000 + i]["nodeId"]
        assert v["ansible_host"] == "20.84.17.201"
        assert v["ansible_user"] == "hpcadmin"
        assert v["aml_vm_size"] == "STANDARD_ND96ASR_V4"
        assert (v["aml_cluster_min_nodes"], v["aml_cluster_max_nodes"]) == (8, 8)


@pytest.mark.parametrize("source", SDKS)
def test_paged_list_nodes_is_read_to_the_end(tmp_path, monkeypatch, world, source):
    world.page_size = 3
    world.add("gpu", make_nodes(10))
    fake(monkeypatch, world, source)
    inv = load(write_config(tmp_path, sdk_config(source, clusters=["gpu"])))
    assert len(inv.groups["aml_nodes"].get_hosts()) == 10
    follow = "v1 GET listNodes nextLink" if source == "azureml-core" else "v2 GET listNodes nextLink"
    assert world.calls[follow] == 3  # 4 pages: the first, then three nextLinks


def test_v2_sdk_node_objects_lose_their_snake_case_fields(monkeypatch, world):
    """The azure-ai-ml 1.35.x bug, shown on the real SDK: a reader of the documented
    attributes gets None; the plugin's reader (record_from_object) gets the data. On 1.31
    (requirements.txt's oldest, tests/unit/constraints.txt) the attributes still hold it."""
    from amlhpc.azure.aml_nodes import record_from_object
    from azure.ai.ml import MLClient
    world.add("gpu", make_nodes(2))
    install_v2(monkeypatch, world)
    import azure.ai.ml
    client = azure.ai.ml.MLClient(object(), SUB, RG, WS)
    assert isinstance(client, MLClient)
    nodes = list(client.compute.list_nodes("gpu"))
    assert type(nodes[0]).__name__ == "AmlComputeNodeInfo"
    if Version(azure.ai.ml.__version__) >= Version("1.35"):
        assert nodes[0].private_ip_address is None and nodes[0].node_id is None  # the documented attributes
    else:
        assert nodes[0].private_ip_address in ("10.0.0.4", "10.0.0.5") and nodes[0].node_id.startswith("tvmps_")
    assert nodes[0].port in (50000, 50001)  # only port survives
    records = [record_from_object(n) for n in nodes]
    assert sorted(r["privateIpAddress"] for r in records) == ["10.0.0.4", "10.0.0.5"]
    assert all(r["nodeState"] == "idle" and r["nodeId"].startswith("tvmps_") for r in records)


def test_v2_reader_still_works_when_the_sdk_is_fixed():
    from amlhpc.azure.aml_nodes import record_from_object

    class Fixed:  # what a fixed AmlComputeNodeInfo looks like
        def __init__(self):
            self.node_id, self.private_ip_address, self.public_ip_address = "n1", "10.0.0.9", "1.2.3.4"
            self.port, self.node_state, self.run_id = 50009, "running", "run-1"

    assert record_from_object(Fixed()) == {"nodeId": "n1", "privateIpAddress": "10.0.0.9",
                                           "publicIpAddress": "1.2.3.4", "port": 50009, "nodeState": "running",
                                           "runId": "run-1"}


def test_a_config_without_source_reads_the_nodes_through_azure_ai_ml(tmp_path, monkeypatch, world):
    """SDK v1 (azureml-core) is out of support since 2026-06-30: a fresh inventory file that
    names no source goes through azure-ai-ml's MLClient, and never through azureml-core's
    Workspace / AmlCompute (both SDKs are faked over one world; their calls are counted apart)."""
    world.add("gpu", make_nodes(3, "gpu"), admin_user="hpcadmin")
    install_v1(monkeypatch, world)
    install_v2(monkeypatch, world)
    config = sdk_config("azure-ai-ml", clusters=["gpu"])
    del config["source"]
    inv = load(write_config(tmp_path, config))
    assert world.calls["v2 MLClient"] == 1 and world.calls["v2 POST listNodes"] == 1
    assert [k for k, n in world.calls.items() if k.startswith("v1 ") and n] == []
    assert type(world.credentials[0]).__name__ == "AzureCliCredential"
    expected = {n["port"]: n for n in make_nodes(3, "gpu")}
    for rank in range(3):
        v = hv(inv, f"gpu-{rank}")
        # The public IP and NAT port of each node, as v2's listNodes payload gives them.
        assert (v["ansible_host"], v["ansible_port"]) == ("20.84.17.201", 50000 + rank)
        assert (v["aml_public_ip"], v["aml_public_port"]) == ("20.84.17.201", 50000 + rank)
        assert v["aml_node_id"] == expected[50000 + rank]["nodeId"] and v["ansible_user"] == "hpcadmin"


@pytest.mark.parametrize("source", SDKS)
def test_several_clusters_in_one_file(tmp_path, monkeypatch, world, source):
    world.add("gpu", make_nodes(3, "gpu"))
    world.add("cpu", make_nodes(2, "cpu"), vm_size="STANDARD_D4S_V3", min_nodes=0, max_nodes=2)
    fake(monkeypatch, world, source)
    inv = load(write_config(tmp_path, sdk_config(source, clusters=["gpu", {"name": "cpu"}])))
    assert sorted(h.name for h in inv.groups["head"].get_hosts()) == ["cpu-0", "gpu-0"]
    assert sorted(h.name for h in inv.groups["workers"].get_hosts()) == ["cpu-1", "gpu-1", "gpu-2"]
    assert len(inv.groups["aml_nodes"].get_hosts()) == 5
    assert hv(inv, "cpu-1")["aml_cluster_min_nodes"] == 0 and hv(inv, "cpu-1")["aml_vm_size"] == "STANDARD_D4S_V3"
    assert hv(inv, "gpu-2")["aml_cluster"] == "gpu"


def test_host_names_are_stable_across_runs_and_listing_order(tmp_path):
    nodes = make_nodes(6, shuffle=False)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(nodes))
    b.write_text(json.dumps(list(reversed(nodes))))
    seen = []
    for f in (a, b):
        inv = load(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(f)}))
        seen.append({h.name: hv(inv, h.name)["aml_node_id"] for h in inv.groups["aml_nodes"].get_hosts()})
    assert seen[0] == seen[1]
    inv = load(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(a),
                                       "hostnames": "node_id"}))
    assert sorted(h.name for h in inv.groups["aml_nodes"].get_hosts()) == sorted(f"gpu-{n['nodeId']}" for n in nodes)


def test_private_ip_mode(tmp_path):
    inv = load(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(FIXTURE),
                                       "use_private_ip": True}))
    v = hv(inv, "gpu-0")
    assert (v["ansible_host"], v["ansible_port"], v["aml_public_port"]) == ("10.0.0.4", 22, 50000)


# ---------------------------------------------------------------------------------------
# Node states and filters


def test_unusable_preempted_leaving_nodes_are_left_out_with_a_warning(tmp_path, warnings):
    nodes = make_nodes(6, states={1: "unusable", 3: "preempted", 4: "leaving", 5: "running"}, shuffle=False)
    f = tmp_path / "n.json"
    f.write_text(json.dumps(nodes))
    inv = load(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(f)}))
    kept = {hv(inv, h.name)["aml_node_id"]: h.name for h in inv.groups["aml_nodes"].get_hosts()}
    assert kept == {nodes[0]["nodeId"]: "gpu-0", nodes[2]["nodeId"]: "gpu-1", nodes[5]["nodeId"]: "gpu-2"}
    (warning,) = [w for w in warnings if "left out" in w]
    for i, state in ((1, "unusable"), (3, "preempted"), (4, "leaving")):
        assert f"{nodes[i]['nodeId']} ({state})" in warning
    assert "exclude_states: []" in warning
    inv = load(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(f),
                                       "exclude_states": []}))
    assert len(inv.groups["aml_nodes"].get_hosts()) == 6


def test_jmespath_node_filter(tmp_path):
    nodes = make_nodes(6, states={2: "running"}, shuffle=False)
    nodes[4]["runId"] = "cosmoflow_1700000000_abcd"
    f = tmp_path / "n.json"
    f.write_text(json.dumps(nodes))
    base = {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(f)}
    inv = load(write_config(tmp_path, {**base, "node_filter": "nodeState == 'idle' && runId == `null`"}))
    ids = [hv(inv, h.name)["aml_node_id"] for h in inv.groups["aml_nodes"].get_hosts()]
    assert ids == [nodes[i]["nodeId"] for i in (0, 1, 3, 5)]
    assert [hv(inv, f"gpu-{r}")["aml_node_rank"] for r in range(4)] == [0, 1, 2, 3]  # ranks close the gaps
    inv = load(write_config(tmp_path, {**base, "node_filter": "port >= `50003` && cluster == 'gpu'"}))
    assert [hv(inv, h.name)["ansible_port"] for h in inv.groups["aml_nodes"].get_hosts()] == [50003, 50004, 50005]


def test_bad_jmespath_is_one_sentence(tmp_path):
    path = write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(FIXTURE),
                                   "node_filter": "nodeState == "})
    with pytest.raises(AnsibleError, match="node_filter 'nodeState == ' is not a valid JMESPath expression"):
        parse(path)


# ---------------------------------------------------------------------------------------
# Constructed


def test_compose_groups_keyed_groups(tmp_path):
    path = write_config(tmp_path, {
        "source": "nodes_file", "cluster": "gpu", "nodes_file": str(FIXTURE), "vm_size": "Standard_ND96asr_v4",
        "compose": {"mpi_slot": "aml_node_rank * 8", "ansible_user": "'trainer'"},
        "groups": {"even_ranks": "aml_node_rank % 2 == 0"},
        "keyed_groups": [{"key": "aml_vm_size", "prefix": "vm"}, {"key": "aml_node_state", "prefix": "state"}],
    })
    inv = load(path)
    # ansible-core 2.18 templates to strings (jinja2_native is off); 2.19 and later keep the type.
    assert hv(inv, "gpu-3")["mpi_slot"] == (24 if CORE >= (2, 19) else "24")
    assert hv(inv, "gpu-3")["ansible_user"] == "trainer"
    assert sorted(h.name for h in inv.groups["even_ranks"].get_hosts()) == ["gpu-0", "gpu-2"]
    assert len(inv.groups["vm_Standard_ND96asr_v4"].get_hosts()) == 4
    assert len(inv.groups["state_idle"].get_hosts()) == 4


def test_strict_makes_a_bad_compose_fail(tmp_path):
    base = {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(FIXTURE),
            "compose": {"x": "no_such_var.attr"}}
    parse(write_config(tmp_path, base))  # not strict: skipped
    with pytest.raises(AnsibleError):
        parse(write_config(tmp_path, {**base, "strict": True}))


# ---------------------------------------------------------------------------------------
# Cache


@pytest.mark.parametrize("source", SDKS)
def test_cache_serves_the_second_run_without_sdk_calls(tmp_path, monkeypatch, world, source):
    world.add("gpu", make_nodes(4))
    fake(monkeypatch, world, source)
    path = write_config(tmp_path, sdk_config(source, clusters=["gpu"], cache=True,
                                             cache_plugin="ansible.builtin.jsonfile",
                                             cache_connection=str(tmp_path / "cache"), cache_timeout=600))
    parse(path)
    first = load(path)
    cold = sum(world.calls.values())
    assert cold > 0
    world.clusters["gpu"]["nodes"] = make_nodes(2)  # the cluster changes; the cache does not know
    second = load(path)
    assert sum(world.calls.values()) == cold
    assert [h.name for h in second.groups["aml_nodes"].get_hosts()] == \
        [h.name for h in first.groups["aml_nodes"].get_hosts()]
    assert hv(second, "gpu-3") == hv(first, "gpu-3")
    refreshed = load(path, cache=False)  # --flush-cache
    assert sum(world.calls.values()) > cold
    assert len(refreshed.groups["aml_nodes"].get_hosts()) == 2


# ---------------------------------------------------------------------------------------
# Auth


@pytest.mark.parametrize("source", SDKS)
def test_env_auth_builds_a_service_principal_from_azure_variables(tmp_path, monkeypatch, world, source):
    world.add("gpu", make_nodes(2))
    fake(monkeypatch, world, source)
    monkeypatch.setenv("AZURE_CLIENT_ID", "cid")
    monkeypatch.setenv("AZURE_SECRET", "s3cret")
    monkeypatch.setenv("AZURE_TENANT", "tid")
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUB)
    cfg = sdk_config(source, clusters=["gpu"], auth_source="env")
    del cfg["subscription_id"]
    load(write_config(tmp_path, cfg))
    (cred,) = world.credentials
    if source == "azureml-core":
        assert type(cred).__name__ == "ServicePrincipalAuthentication"
        assert (cred._service_principal_id, cred._tenant_id) == ("cid", "tid")
    else:
        assert type(cred).__name__ == "ClientSecretCredential"
        assert cred._client_id == "cid" and cred._tenant_id == "tid"


@pytest.mark.parametrize("source", SDKS)
def test_templated_secret_from_a_lookup(tmp_path, monkeypatch, world, source):
    world.add("gpu", make_nodes(2))
    fake(monkeypatch, world, source)
    monkeypatch.setenv("HPC_SP_SECRET", "from-lookup")
    load(write_config(tmp_path, sdk_config(
        source, clusters=["gpu"], auth_source="service_principal", client_id="cid", tenant="tid",
        secret="{{ lookup('ansible.builtin.env', 'HPC_SP_SECRET') }}")))
    (cred,) = world.credentials
    if source == "azureml-core":
        assert cred._service_principal_password == "from-lookup"
    else:
        assert cred._client_credential == "from-lookup"


@pytest.mark.parametrize("source", SDKS)
def test_default_azure_credential_by_default(tmp_path, monkeypatch, world, source):
    """Nothing set: auth_source auto ends in azure-identity's DefaultAzureCredential (its environment
    names, workload identity, managed identity, the Azure CLI login, ...); azureml-core gets its tokens."""
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.azure/credentials
    world.add("gpu", make_nodes(2))
    fake(monkeypatch, world, source)
    cfg = sdk_config(source, clusters=["gpu"])
    del cfg["auth_source"]
    load(write_config(tmp_path, cfg))
    (cred,) = world.credentials
    if source == "azureml-core":
        assert type(cred).__name__ == "TokenAuthentication"
        cred = cred._get_token_for_audience.credential
    assert type(cred).__name__ == "DefaultAzureCredential"


# ---------------------------------------------------------------------------------------
# Errors, one sentence each


def test_sdk_not_installed_names_the_package(tmp_path, monkeypatch):
    for mod in ("azure.ai.ml",):
        monkeypatch.setitem(sys.modules, mod, None)  # import fails
    path = write_config(tmp_path, sdk_config("azure-ai-ml", clusters=["gpu"]))
    with pytest.raises(AnsibleError, match=r"source 'azure-ai-ml' needs the Python package azure-ai-ml, .*"
                                           r"pip install azure-ai-ml==1\.35\.2"):
        parse(path)
    monkeypatch.setitem(sys.modules, "azureml.core", None)
    path = write_config(tmp_path, sdk_config("azureml-core", clusters=["gpu"]))
    with pytest.raises(AnsibleError, match=r"needs the Python package azureml-core"):
        parse(path)


@pytest.mark.parametrize("source", SDKS)
def test_workspace_not_found(tmp_path, monkeypatch, world, source):
    world.workspace = "another-ws"
    fake(monkeypatch, world, source)
    with pytest.raises(AnsibleError, match=f"workspace '{WS}' was not found in resource group '{RG}' of "
                                           f"subscription {SUB}: check workspace_name"):
        parse(write_config(tmp_path, sdk_config(source, clusters=["gpu"])))


@pytest.mark.parametrize("source", SDKS)
def test_a_cluster_not_created_yet_is_an_empty_inventory_until_cluster_yml_creates_it(
        tmp_path, monkeypatch, world, warnings, source):
    """Strict parsing (unparsed_is_failed) must not stop site.yml before cluster.yml can create
    the cluster; cluster.yml's meta: refresh_inventory then sees its nodes."""
    world.add("other", make_nodes(2, "other"))
    fake(monkeypatch, world, source)
    inv = load(write_config(tmp_path, sdk_config(source, clusters=["gpu"], cache=True,
                                                 cache_plugin="ansible.builtin.jsonfile",
                                                 cache_connection=str(tmp_path / "cache"), cache_timeout=600)))
    assert inv.groups["all"].get_hosts() == []
    assert warnings == [f"cluster 'gpu' was not found in workspace '{WS}': playbooks/cluster.yml creates it "
                        "(site.yml runs it first), or fix the cluster name"]
    world.create("gpu", "STANDARD_ND96ASR_V4", 2, 2, "azureuser", None, "Enabled")  # what cluster.yml does
    inv.refresh_inventory()  # meta: refresh_inventory
    assert sorted(h.name for h in inv.groups["aml_nodes"].get_hosts()) == ["gpu-0", "gpu-1"]
    # The empty answer was not cached: a later run with the cache sees the nodes too.
    assert len(load(inv._sources[0]).groups["aml_nodes"].get_hosts()) == 2


def test_cluster_yml_refreshes_the_inventory_after_creating_the_cluster():
    tasks = yaml.safe_load((ROOT / "playbooks" / "cluster.yml").read_text())[0]["post_tasks"]
    assert {"ansible.builtin.meta": "refresh_inventory"}.items() <= tasks[-1].items()


@pytest.mark.parametrize("source", SDKS)
def test_auth_failed_names_the_source_tried(tmp_path, monkeypatch, world, source):
    world.add("gpu", make_nodes(2))
    world.auth_error = "AADSTS7000215: Invalid client secret provided."
    fake(monkeypatch, world, source)
    monkeypatch.setenv("AZURE_CLIENT_ID", "cid")
    monkeypatch.setenv("AZURE_SECRET", "wrong")
    monkeypatch.setenv("AZURE_TENANT", "tid")
    with pytest.raises(AnsibleError, match="Azure authentication failed with auth_source env, chosen by "
                                           "auth_source auto: AADSTS7000215") as err:
        parse(write_config(tmp_path, sdk_config(source, clusters=["gpu"], auth_source="auto")))
    assert "wrong" not in str(err.value)


def test_service_principal_without_its_parts(tmp_path):
    path = write_config(tmp_path, sdk_config("azure-ai-ml", clusters=["gpu"], auth_source="service_principal",
                                             client_id="cid"))
    with pytest.raises(AnsibleError, match="auth_source service_principal needs tenant .or AZURE_TENANT., secret .or "
                                           "AZURE_SECRET. or x509_certificate_path"):
        parse(path)


@pytest.mark.parametrize("source", SDKS)
def test_cluster_without_nodes(tmp_path, monkeypatch, world, warnings, source):
    """A cluster scaled to 0 (after teardown) reads as empty with a warning, so that cluster.yml
    (in site.yml) can scale it up again; validate refuses a run left without nodes."""
    world.add("gpu", [], min_nodes=0, max_nodes=4)
    fake(monkeypatch, world, source)
    data = parse(write_config(tmp_path, sdk_config(source, clusters=["gpu"])))
    assert not data.hosts
    assert warnings == ["cluster 'gpu' has no nodes: with aml_cluster_manage true, playbooks/cluster.yml scales it up "
                        "(site.yml runs it first) and waits until its nodes are idle; otherwise scale it up in AzureML"]


def test_every_node_filtered_out(tmp_path):
    path = write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(FIXTURE),
                                   "node_filter": "nodeState == 'running'"})
    with pytest.raises(AnsibleError, match="none of its 4 node"):
        parse(path)


@pytest.mark.parametrize(("mutate", "sentence"), [
    (lambda n: n[2].pop("privateIpAddress"), "node 2 has no 'privateIpAddress'"),
    (lambda n: n[1].update(port="ssh"), "node 1: 'port' must be an integer 1-65535, not 'ssh'"),
    (lambda n: n[0].update(nodeState="sleeping"), "node 0: 'nodeState' 'sleeping' is not one of"),
    (lambda n: n[3].update(nodeId=n[0]["nodeId"]), "node 3 repeats nodeId"),
    (lambda n: n.__setitem__(1, "10.0.0.5"), "node 1 is a str, not an object"),
])
def test_malformed_nodes_file_names_the_field(tmp_path, mutate, sentence):
    nodes = json.loads(FIXTURE.read_text())
    mutate(nodes)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(nodes))
    with pytest.raises(AnsibleError, match=f"nodes file {f}: " + __import__("re").escape(sentence)):
        parse(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(f)}))


def test_nodes_file_missing_or_not_json(tmp_path):
    with pytest.raises(AnsibleError, match="nodes file .*nope.json does not exist"):
        parse(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": "nope.json"}))
    f = tmp_path / "x.json"
    f.write_text("{nodes: ")
    with pytest.raises(AnsibleError, match="is not valid JSON"):
        parse(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(f)}))


def test_relative_nodes_file_is_relative_to_the_config(tmp_path):
    (tmp_path / "nodes.json").write_text(FIXTURE.read_text())
    data = parse(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": "nodes.json"}))
    assert len(data.hosts) == 4


# ---------------------------------------------------------------------------------------
# Scale


@pytest.mark.parametrize("source", SDKS)
def test_512_node_cluster(tmp_path, monkeypatch, world, source):
    world.add("gpu", make_nodes(512))
    fake(monkeypatch, world, source)
    inv = load(write_config(tmp_path, sdk_config(source, clusters=["gpu"])))
    hosts = inv.groups["aml_nodes"].get_hosts()
    assert len(hosts) == 512 and len(inv.groups["workers"].get_hosts()) == 511
    ranks = sorted(hv(inv, h.name)["aml_node_rank"] for h in hosts)
    assert ranks == list(range(512))
    assert len({hv(inv, h.name)["aml_private_ip"] for h in hosts}) == 512
    assert hv(inv, "gpu-511")["ansible_port"] == 50511
    assert world.calls["v1 GET listNodes nextLink"] + world.calls["v2 GET listNodes nextLink"] == 5


# ---------------------------------------------------------------------------------------
# The real CLI with the project's ansible.cfg


def _unwrap(value):
    if isinstance(value, dict) and set(value) == {"__ansible_unsafe"}:
        return value["__ansible_unsafe"]
    return value


def test_ansible_inventory_cli_with_the_project_config(tmp_path):
    path = write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(FIXTURE),
                                   "admin_user": "azureuser", "min_nodes": 4, "max_nodes": 4},
                        name="x.azureml_compute.yml")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_INVENTORY_UNPARSED_FAILED="true")
    res = subprocess.run([ansible_cli("ansible-inventory"), "-i", str(path), "--list"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["head"]["hosts"] == ["gpu-0"]
    assert out["workers"]["hosts"] == ["gpu-1", "gpu-2", "gpu-3"]
    assert sorted(out["cluster_gpu"]["hosts"]) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    hv3 = {k: _unwrap(v) for k, v in out["_meta"]["hostvars"]["gpu-3"].items()}
    assert hv3["ansible_port"] == 50003 and hv3["aml_private_ip"] == "10.0.0.7" and hv3["aml_node_rank"] == 3
    # A broken file fails the command instead of warning.
    bad = write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": "missing.json"},
                       name="y.azureml_compute.yml")
    res = subprocess.run([ansible_cli("ansible-inventory"), "-i", str(bad), "--list"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0
    assert squashed("missing.json does not exist") in squashed(res.stderr)


def test_ansible_inventory_cli_with_a_project_config_of_the_users_own(tmp_path):
    """A user's own project (in an execution environment, say) whose ansible.cfg sets no fact
    cache: the default in-memory one, which holds none of the hosts whose facts the plugin
    drops on a first read."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {ROOT / '.cache' / 'collections'}\n")
    path = write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(FIXTURE),
                                   "admin_user": "azureuser", "min_nodes": 4, "max_nodes": 4},
                        name="x.azureml_compute.yml")
    env = dict(os.environ, ANSIBLE_CONFIG=str(project / "ansible.cfg"), ANSIBLE_INVENTORY_UNPARSED_FAILED="true")
    res = subprocess.run([ansible_cli("ansible-inventory"), "-i", str(path), "--list"],
                         cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert sorted(json.loads(res.stdout)["cluster_gpu"]["hosts"]) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


# ---------------------------------------------------------------------------------------
# The example files under inventory/examples


EXAMPLES = ROOT / "inventory" / "examples"


def test_example_saved_payload(tmp_path):
    """Copied beside its nodes.json, as the example says (tests/unit/plugins/inventory/test_saved_example.py
    runs it as an installed user does)."""
    import shutil
    shutil.copy(EXAMPLES / "saved.azureml_compute.yml", tmp_path / "saved.azureml_compute.yml")
    shutil.copy(FIXTURE, tmp_path / "nodes.json")
    inv = load(tmp_path / "saved.azureml_compute.yml")
    assert len(inv.groups["cluster_gpu"].get_hosts()) == 4
    assert hv(inv, "gpu-0")["aml_vm_size"] == "Standard_ND96asr_v4"


def test_example_v1_with_env_auth(monkeypatch, world):
    world.add("gpu-a100", make_nodes(4, "gpu-a100"))
    install_v1(monkeypatch, world)
    for k, v in {"AZURE_CLIENT_ID": "c", "AZURE_SECRET": "s", "AZURE_TENANT": "t", "AZURE_SUBSCRIPTION_ID": SUB}.items():
        monkeypatch.setenv(k, v)
    inv = load(EXAMPLES / "v1-env.azureml_compute.yml")
    assert len(inv.groups["vm_STANDARD_ND96ASR_V4"].get_hosts()) == 4
    assert type(world.credentials[0]).__name__ == "ServicePrincipalAuthentication"


def test_example_v2_with_cli_auth_and_cache(tmp_path, monkeypatch, world):
    monkeypatch.chdir(tmp_path)  # the example caches under .cache/inventory
    busy = make_nodes(3, "gpu-a100")
    busy[0]["runId"] = "cosmoflow_1"
    world.add("gpu-a100", busy)
    world.add("cpu-prep", make_nodes(2, "cpu-prep"))
    install_v2(monkeypatch, world)
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUB)
    inv = load(EXAMPLES / "v2-cli.azureml_compute.yml", cache=False)
    assert len(inv.groups["cluster_gpu_a100"].get_hosts()) == 2  # the node with a job is filtered out
    assert len(inv.groups["cluster_cpu_prep"].get_hosts()) == 2
    assert type(world.credentials[0]).__name__ == "AzureCliCredential"
    assert (tmp_path / ".cache" / "inventory").is_dir()
    args = hv(inv, "gpu-a100-0")["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in args and args.endswith("-o ServerAliveInterval=30")


def test_ansible_doc_renders_the_plugin_and_the_module():
    doc = ansible_cli("ansible-doc")
    for argv, words in ((["-t", "inventory", "amlhpc.azureml.azureml_compute"],
                         ["node_filter", "auth_source", "keyed_groups", "cache_timeout", "EXAMPLES"]),
                        (["amlhpc.azureml.aml_compute_cluster"], ["scaled_to_zero", "beeond_enabled", "RETURN VALUES"])):
        res = subprocess.run([doc, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")), check=False)
        assert res.returncode == 0, res.stderr
        for word in words:
            assert word in res.stdout, (argv, word)


@pytest.mark.parametrize("source", SDKS)
def test_vault_encrypted_secret(tmp_path, monkeypatch, world, source):
    from ansible.parsing.vault import VaultLib, VaultSecret
    world.add("gpu", make_nodes(2))
    fake(monkeypatch, world, source)
    secret = VaultSecret(b"vault-pw")
    blob = VaultLib([("default", secret)]).encrypt("from-vault").decode()
    text = yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", **sdk_config(
        source, clusters=["gpu"], auth_source="service_principal", client_id="cid", tenant="tid")})
    text += "secret: !vault |\n" + "".join(f"  {line}\n" for line in blob.splitlines())
    path = tmp_path / "v.azureml_compute.yml"
    path.write_text(text)
    assert "from-vault" not in path.read_text()
    # What the CLIs do with --vault-password-file: from 2.19 on, VaultSecretsContext.initialize
    # (once per process); 2.18 gives the secrets to the DataLoader only, as below.
    if CORE >= (2, 19):
        from ansible.parsing.vault import VaultSecretsContext
        monkeypatch.setattr(VaultSecretsContext, "_current", VaultSecretsContext([("default", secret)]))
    loader = DataLoader()
    loader.set_vault_secrets([("default", secret)])
    parse_with = inventory_loader.get("amlhpc.azureml.azureml_compute")
    parse_with.parse(InventoryData(), loader, str(path))
    (cred,) = world.credentials
    got = cred._service_principal_password if source == "azureml-core" else cred._client_credential
    assert got == "from-vault"


# ---------------------------------------------------------------------------------------
# The controller's known_hosts and the fact cache, tied to node ids


def _two_nodes(tmp_path: Path, second_id: str = "node-b", second_port: int = 50001) -> Path:
    f = tmp_path / "two.json"
    f.write_text(json.dumps([
        {"nodeId": "node-a", "privateIpAddress": "10.0.0.4", "publicIpAddress": "20.1.2.3", "port": 50000,
         "nodeState": "idle"},
        {"nodeId": second_id, "privateIpAddress": "10.0.0.5", "publicIpAddress": "20.1.2.3", "port": second_port,
         "nodeState": "idle"}]))
    return write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(f)})


def test_known_hosts_are_scanned_once_and_follow_node_ids(tmp_path, fake_keyscan, warnings, monkeypatch):
    known = tmp_path / "ssh" / "known_hosts"
    inv = load(_two_nodes(tmp_path))
    assert known.read_text() == ("[20.1.2.3]:50000 ssh-ed25519 AAAAC3key50000\n"
                                 "[20.1.2.3]:50001 ssh-ed25519 AAAAC3key50001\n")
    assert hv(inv, "gpu-1")["ansible_ssh_common_args"] == (f"-o UserKnownHostsFile={known} "
                                                           "-o GlobalKnownHostsFile=/dev/null "
                                                           "-o StrictHostKeyChecking=yes")
    assert hv(inv, "gpu-1")["aml_host_keys"] == ["ssh-ed25519 AAAAC3key50001"]
    # Trust on first use, said out loud: one warning names both new node ids.
    assert len(warnings) == 1 and "2 new node id(s) trusted on first use" in warnings[0], warnings
    warnings.clear()
    # The same node ids: nothing is scanned again, so a key that changed is not taken in (ssh
    # refuses it: a man in the middle looks like that).
    (fake_keyscan / "50000").write_text("AAAAmitm")
    load(_two_nodes(tmp_path))
    assert "AAAAmitm" not in known.read_text() and warnings == []
    # Compared on every read (known_hosts_verify: always), a warning names the node and the fix.
    monkeypatch.setenv("AMLHPC_KNOWN_HOSTS_VERIFY", "always")
    inv = load(_two_nodes(tmp_path))
    assert "AAAAmitm" not in known.read_text()
    assert len(warnings) == 1 and "node gpu-0 (node id node-a at [20.1.2.3]:50000) offers host key" in warnings[0]
    assert hv(inv, "gpu-0")["aml_host_key_refused"] == warnings[0]
    assert "aml_host_key_refused" not in hv(inv, "gpu-1")
    (fake_keyscan / "50000").unlink()
    monkeypatch.delenv("AMLHPC_KNOWN_HOSTS_VERIFY")
    warnings.clear()
    # AmlCompute replaced node 1 at the same port: its keys are replaced, with a warning naming it.
    (fake_keyscan / "50001").write_text("AAAAnew")
    load(_two_nodes(tmp_path, second_id="node-c"))
    assert known.read_text() == ("[20.1.2.3]:50000 ssh-ed25519 AAAAC3key50000\n"
                                 "[20.1.2.3]:50001 ssh-ed25519 AAAAnew\n")
    assert len(warnings) == 1, warnings
    assert "node gpu-1 at [20.1.2.3]:50001 was replaced by AmlCompute (node id node-b -> node-c)" in warnings[0]
    # Another node at another port: it is scanned; the entry of the port it no longer lists
    # stays pinned to node-c, which may come back there.
    load(_two_nodes(tmp_path, second_id="node-d", second_port=50007))
    assert known.read_text() == ("[20.1.2.3]:50000 ssh-ed25519 AAAAC3key50000\n"
                                 "[20.1.2.3]:50001 ssh-ed25519 AAAAnew\n"
                                 "[20.1.2.3]:50007 ssh-ed25519 AAAAC3key50007\n")


def test_a_node_that_does_not_answer_is_named_and_scanned_on_the_next_read(tmp_path, fake_keyscan, warnings):
    (fake_keyscan / "50001").write_text("refuse")
    load(_two_nodes(tmp_path))
    known = tmp_path / "ssh" / "known_hosts"
    assert "50001" not in known.read_text()
    assert len(warnings) == 2 and "could not read the SSH host keys of gpu-1 at [20.1.2.3]:50001" in warnings[0]
    assert "1 new node id(s) trusted on first use" in warnings[1] and "gpu-1" not in warnings[1]
    (fake_keyscan / "50001").unlink()
    load(_two_nodes(tmp_path))
    assert "[20.1.2.3]:50001 ssh-ed25519 AAAAC3key50001" in known.read_text()


def test_known_hosts_can_be_left_to_the_user(tmp_path, monkeypatch):
    monkeypatch.setenv("AMLHPC_KNOWN_HOSTS", "false")
    inv = load(_two_nodes(tmp_path))
    assert "ansible_ssh_common_args" not in hv(inv, "gpu-0")
    assert not (tmp_path / "ssh" / "known_hosts").exists()


def test_known_hosts_file_defaults_to_the_project_state_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("AMLHPC_KNOWN_HOSTS_FILE")
    plugin = inventory_loader.get("amlhpc.azureml.azureml_compute")
    path = _two_nodes(tmp_path)
    plugin.loader = DataLoader()
    plugin._read_config_data(str(path))
    plugin._basedir = str(tmp_path)
    assert plugin._known_hosts_file() == str(ROOT / "state" / "known_hosts")  # not .cache: make clean keeps it


# ---------------------------------------------------------------------------------------
# Ports as azureml-core's REST model types them (float)


def test_integral_float_ports_are_accepted_and_fractions_refused(tmp_path):
    nodes = json.loads(FIXTURE.read_text())
    for node in nodes:
        node["port"] = float(node["port"])  # what azureml-core's AmlComputeNodeInformation says
    f = tmp_path / "float.json"
    f.write_text(json.dumps(nodes))
    data = parse(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(f)}))
    ports = sorted(h.vars["ansible_port"] for h in data.hosts.values())
    # type() on purpose: a bool is an int to isinstance(), and not a port.
    assert ports == [50000, 50001, 50002, 50003] and all(type(p) is int for p in ports)  # pylint: disable=unidiomatic-typecheck
    nodes[1]["port"] = 50001.5
    f.write_text(json.dumps(nodes))
    with pytest.raises(AnsibleError, match=r"node 1: 'port' must be an integer 1-65535, not 50001\.5"):
        parse(write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(f)}))


def test_a_broken_inventory_fails_a_plain_run_with_its_error_once(tmp_path):
    """ansible-playbook -i x.azureml_compute.yml, no environment variable of ours: the run stops
    at the inventory, and only this plugin's sentence is shown (no other plugin attempts the file)."""
    nodes = json.loads(FIXTURE.read_text())
    nodes[2]["port"] = 50002.5
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    path = write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": "nodes.json"},
                        name="x.azureml_compute.yml")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_INVENTORY")}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    res = subprocess.run([ansible_cli("ansible-playbook"), "-i", str(path),
                          str(ROOT / "playbooks" / "validate.yml")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    plugin = "ansible_collections.amlhpc.azureml.plugins.inventory.azureml_compute"  # its load name
    if CORE >= (2, 19):
        # One failure, from this plugin (ansible-core renders a warning as a summary line plus its
        # "caused by" detail, so the sentence itself is printed in both parts of that one warning).
        assert out.count("Failed to parse inventory with") == 2, out
        assert out.count(f"Failed to parse inventory with '{plugin}' plugin") == 2, out
        others = ("'yaml' plugin", "'ini' plugin", "'auto' plugin", "'constructed' plugin")
    else:
        # 2.18: one warning line per plugin that failed, "Failed to parse <path> with <plugin> plugin".
        assert squashed(out).count("Failedtoparse") == 1, out
        assert squashed(out).count(squashed(f"with {plugin} plugin")) == 1, out
        others = ("with yaml plugin", "with ini plugin", "with auto plugin", "with constructed plugin")
    assert squashed("node 2: 'port' must be an integer 1-65535, not 50002.5") in squashed(out)
    for other in (*others, "PLAY ["):
        assert squashed(other) not in squashed(out), out


def test_cached_facts_follow_the_node_id_not_the_host_name(tmp_path):
    """gpu-1 is a host name (rank by port); when AmlCompute replaces the node behind it, the
    facts cached for gpu-1 (its kernel, which BeeOND's headers follow) must not be reused."""
    import platform
    nodes = sorted(json.loads(FIXTURE.read_text()), key=lambda n: n["port"])[:2]  # gpu-0, gpu-1
    f = tmp_path / "nodes.json"
    f.write_text(json.dumps(nodes))
    path = write_config(tmp_path, {"source": "nodes_file", "cluster": "gpu", "nodes_file": "nodes.json",
                                   "compose": {"ansible_connection": "'local'",
                                               "ansible_python_interpreter": repr(sys.executable)}},
                        name="f.azureml_compute.yml")
    play = tmp_path / "kernel.yml"
    play.write_text(yaml.safe_dump([{"name": "Show kernels", "hosts": "aml_nodes", "gather_facts": True,
                                     "tasks": [{"name": "Show the kernel", "ansible.builtin.debug": {
                                         "msg": "KERNEL {{ inventory_hostname }} {{ ansible_facts.kernel }}"}}]}]))
    facts = tmp_path / "facts"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="jsonfile",
               ANSIBLE_CACHE_PLUGIN_CONNECTION=str(facts), ANSIBLE_FORCE_COLOR="0")

    def kernels() -> dict[str, str]:
        res = subprocess.run([ansible_cli("ansible-playbook"), "-i", str(path), str(play)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
        assert res.returncode == 0, res.stdout + res.stderr
        return dict(re.findall(r"KERNEL (\S+) (\S+)\"", res.stdout))

    real = platform.release()
    assert kernels() == {"gpu-0": real, "gpu-1": real}
    for host in ("gpu-0", "gpu-1"):  # facts a predecessor left in the cache
        (entry,) = facts.glob(f"*{host}")  # ansible-core prefixes the key with its schema version
        entry.write_text(entry.read_text().replace(real, "5.4.0-predecessor"))
    assert kernels() == {"gpu-0": "5.4.0-predecessor", "gpu-1": "5.4.0-predecessor"}  # same nodes: cache used
    nodes[1]["nodeId"] = "tvmps_replacement_d"  # AmlCompute replaced the node at gpu-1's port
    f.write_text(json.dumps(nodes))
    assert kernels() == {"gpu-0": "5.4.0-predecessor", "gpu-1": real}


def test_known_hosts_keep_the_entries_of_nodes_left_out(tmp_path, warnings):
    """A node left out for its state, or missing from a read, keeps its entry (no new trust on
    first use when it comes back), in both addressing modes."""
    nodes = sorted(json.loads(FIXTURE.read_text()), key=lambda n: n["port"])
    f = tmp_path / "n.json"
    known = tmp_path / "ssh" / "known_hosts"
    for private, entry in ((False, "[20.84.17.201]:50003"), (True, "10.0.0.7")):
        known.unlink(missing_ok=True)
        base = {"source": "nodes_file", "cluster": "gpu", "nodes_file": str(f), "use_private_ip": private}
        f.write_text(json.dumps(nodes))
        load(write_config(tmp_path, base))
        assert f"{entry} ssh-ed25519" in known.read_text()
        f.write_text(json.dumps([{**n, "nodeState": "unusable"} if n["port"] == 50003 else n for n in nodes]))
        load(write_config(tmp_path, base))
        assert f"{entry} ssh-ed25519" in known.read_text(), private
        f.write_text(json.dumps(nodes[:3]))
        load(write_config(tmp_path, base))
        assert f"{entry} ssh-ed25519" in known.read_text(), private


# ---------------------------------------------------------------------------------------
# Pins: each node id's host keys in the plugin's own record, whatever known_hosts holds
# (issue 40 item 3: the reviewer's cases, each red on 2.1.0)


def _known_lines(known: Path, port: int) -> list[str]:
    return [line for line in known.read_text().splitlines() if f"]:{port} " in line]


def test_deleted_lines_then_a_changed_key_under_the_same_node_id_are_not_trusted(tmp_path, fake_keyscan, warnings):
    """Delete one node's lines from known_hosts, then change that node's key under the same
    node id: the pin restores the old key (ssh refuses the new one), and a warning names the
    node and the way to accept a node that was legitimately re-imaged."""
    known = tmp_path / "ssh" / "known_hosts"
    load(_two_nodes(tmp_path))
    pinned = _known_lines(known, 50001)
    known.write_text("\n".join(line for line in known.read_text().splitlines() if ":50001 " not in line) + "\n")
    (fake_keyscan / "50001").write_text("AAAAmitm")
    warnings.clear()
    inv = load(_two_nodes(tmp_path))
    assert _known_lines(known, 50001) == pinned
    assert "AAAAmitm" not in known.read_text()
    said = " ".join(warnings)
    assert "gpu-1" in said and "node-b" in said and "AMLHPC_KNOWN_HOSTS_REPIN" in said, warnings
    assert hv(inv, "gpu-1")["aml_host_key_refused"]


def test_an_emptied_known_hosts_is_restored_from_the_pins(tmp_path, fake_keyscan, warnings):
    known = tmp_path / "ssh" / "known_hosts"
    load(_two_nodes(tmp_path))
    before = known.read_text()
    (fake_keyscan / "50000").write_text("AAAAmitm")  # refused from the start ...
    load(_two_nodes(tmp_path))
    assert known.read_text() == before
    known.write_text("")  # ... and after the file was emptied, still
    load(_two_nodes(tmp_path))
    assert known.read_text() == before
    known.unlink()
    load(_two_nodes(tmp_path))
    assert known.read_text() == before


def test_a_new_node_id_is_trusted_on_first_use_with_a_warning(tmp_path, fake_keyscan, warnings):
    load(_two_nodes(tmp_path))
    assert any("new node" in w and "node-a" in w and "node-b" in w and "SHA256:" in w for w in warnings), warnings
    warnings.clear()
    load(_two_nodes(tmp_path))
    assert warnings == []
    load(_two_nodes(tmp_path, second_id="node-c"))
    assert any("node-c" in w and "first use" in w for w in warnings), warnings


def test_a_record_that_does_not_parse_stops_the_read_instead_of_trusting_anew(tmp_path, fake_keyscan):
    load(_two_nodes(tmp_path))
    record = tmp_path / "ssh" / "known_hosts.nodes.json"
    record.write_text(record.read_text()[:40])  # truncated by hand
    (fake_keyscan / "50001").write_text("AAAAmitm")
    with pytest.raises(AnsibleError, match=r"the host key pins in .*known_hosts\.nodes\.json cannot be read .*remove it "
                                           r"to trust every node anew on first use"):
        parse(_two_nodes(tmp_path))
    assert "AAAAmitm" not in (tmp_path / "ssh" / "known_hosts").read_text()


def test_a_record_of_2_1_0_is_taken_over_its_keys_becoming_the_pins(tmp_path, fake_keyscan, warnings):
    known = tmp_path / "ssh" / "known_hosts"
    known.parent.mkdir(parents=True)
    known.write_text("[20.1.2.3]:50000 ssh-ed25519 AAAAold0\n[20.1.2.3]:50001 ssh-ed25519 AAAAold1\n")
    (tmp_path / "ssh" / "known_hosts.nodes.json").write_text(json.dumps({"endpoints": {
        "[20.1.2.3]:50000": {"node_id": "node-a", "cluster": "gpu", "host": "gpu-0"},
        "[20.1.2.3]:50001": {"node_id": "node-b", "cluster": "gpu", "host": "gpu-1"}}, "hosts": {}}))
    inv = load(_two_nodes(tmp_path))
    assert hv(inv, "gpu-1")["aml_host_keys"] == ["ssh-ed25519 AAAAold1"] and warnings == []
    assert known.read_text() == "[20.1.2.3]:50000 ssh-ed25519 AAAAold0\n[20.1.2.3]:50001 ssh-ed25519 AAAAold1\n"
