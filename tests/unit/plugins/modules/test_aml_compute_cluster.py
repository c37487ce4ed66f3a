"""aml_compute_cluster, run in-process with patch_module_args and Azure faked at the SDK boundary."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import ansible.module_utils
import pytest
from ansible_compat import patch_module_args

from azureml_fakes import (
    EVERY_PROPERTY,
    FAKE_KEY,
    RG,
    SUB,
    WS,
    World,
    install_v1,
    install_v2,
    make_nodes,
    with_every_property,
)

ROOT = Path(__file__).resolve().parents[4]
# What AnsiballZ does for a real run: the project's module_utils under ansible.module_utils.
if str(ROOT / "plugins" / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(ROOT / "plugins" / "module_utils"))

import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location("aml_compute_cluster", ROOT / "plugins/modules/aml_compute_cluster.py")
module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(module)

KEY = FAKE_KEY
SDKS = ["azureml-core", "azure-ai-ml"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("AZURE_CLIENT_ID", "AZURE_SECRET", "AZURE_TENANT", "AZURE_SUBSCRIPTION_ID", "IDENTITY_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture()
def world(monkeypatch):
    return World()


def args(sdk: str, **extra) -> dict:
    base = {"name": "gpu", "sdk": sdk, "subscription_id": SUB, "resource_group": RG, "workspace_name": WS,
            "auth_source": "cli", "vm_size": "Standard_ND96asr_v4", "max_nodes": 4, "admin_user": "azureuser",
            "ssh_public_key": KEY, "beeond_enabled": True, "wait": False, "poll_interval": 0}
    return {**base, **extra}


def run(capsys, params: dict) -> dict:
    with patch_module_args(params), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


def install(monkeypatch, world, sdk):
    (install_v1 if sdk == "azureml-core" else install_v2)(monkeypatch, world)


@pytest.mark.parametrize("sdk", SDKS)
def test_creates_a_fixed_size_cluster_then_changes_nothing(capsys, monkeypatch, world, sdk):
    install(monkeypatch, world, sdk)
    out = run(capsys, args(sdk, wait_timeout=1800))
    assert out["changed"] is True and out["action"] == "create", out
    props = world.clusters["gpu"]["compute"]["properties"]["properties"]
    assert props["scaleSettings"]["minNodeCount"] == props["scaleSettings"]["maxNodeCount"] == 4
    assert props["vmSize"].lower() == "standard_nd96asr_v4"
    assert props["userAccountCredentials"]["adminUserName"] == "azureuser"
    assert props["userAccountCredentials"]["adminUserSshPublicKey"] == KEY
    assert props["remoteLoginPortPublicAccess"] == "Enabled"
    again = run(capsys, args(sdk))
    assert again["changed"] is False and again["action"] == "none", again
    if sdk == "azureml-core":  # the SDK's own wait is bounded by wait_timeout
        assert world.waits == [30]


def test_without_sdk_the_cluster_is_made_through_azure_ai_ml(capsys, monkeypatch, world):
    """azureml-core (SDK v1) is out of support since 2026-06-30: a task that names no sdk goes
    through azure-ai-ml (both SDKs are faked over one world; their calls are counted apart)."""
    install_v1(monkeypatch, world)
    install_v2(monkeypatch, world)
    params = args("azure-ai-ml")
    del params["sdk"]
    out = run(capsys, params)
    assert out["changed"] is True and out["action"] == "create", out
    assert world.calls["v2 PUT compute"] == 1
    assert [k for k, n in world.calls.items() if k.startswith("v1 ") and n] == []
    assert world.clusters["gpu"]["compute"]["properties"]["properties"]["scaleSettings"]["maxNodeCount"] == 4


@pytest.mark.parametrize("sdk", SDKS)
def test_creates_the_cluster_with_a_user_assigned_identity(capsys, monkeypatch, world, sdk):
    install(monkeypatch, world, sdk)
    rid = (f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.ManagedIdentity/"
           "userAssignedIdentities/stage-reader")
    out = run(capsys, args(sdk, identity_resource_id=rid))
    assert out["changed"] is True and out["action"] == "create", out
    plain = run(capsys, args(sdk, name="plain"))
    assert plain["action"] == "create" and world.identities["plain"] is None
    identity = world.identities["gpu"]
    assert identity["type"].lower().replace("_", "") == "userassigned"
    assert [k.lower() for k in identity["userAssignedIdentities"]] == [rid.lower()]
    # The cluster Azure now reports has it: nothing to do on the next run.
    again = run(capsys, args(sdk, identity_resource_id=rid))
    assert again["changed"] is False and again["action"] == "none", again


def _rid(name: str, lower: bool = False) -> str:
    rg = "resourcegroups" if lower else "resourceGroups"  # ARM ids are case-insensitive; Azure mixes the case
    return f"/subscriptions/{SUB}/{rg}/{RG}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{name}"


def _user_identities(world, name: str = "gpu") -> list[str]:
    return sorted(k.lower() for k in ((world.identity_of(name) or {}).get("userAssignedIdentities") or {}))


@pytest.mark.parametrize("sdk", SDKS)
def test_adds_the_identity_to_a_cluster_made_without_it(capsys, monkeypatch, world, sdk):
    # The cluster was made before identity_resource_id was set (or by hand): staging with
    # stage_auth managed_identity would get no token on its nodes. Check mode says so first.
    world.add("gpu", make_nodes(4), vm_size="STANDARD_ND96ASR_V4")
    install(monkeypatch, world, sdk)
    rid = _rid("stage-reader")
    dry = run(capsys, args(sdk, identity_resource_id=rid, _ansible_check_mode=True, _ansible_diff=True))
    assert dry["changed"] is True and dry["action"] == "update", dry
    assert dry["changes"] == {"identity": [[], [rid]]} and dry["summary"] == f"update (identity [] -> ['{rid}'])"
    assert dry["diff"]["before"]["identity"] == [] and dry["diff"]["after"]["identity"] == [rid]
    assert world.identity_of("gpu") is None and not world.identity_updates
    out = run(capsys, args(sdk, identity_resource_id=rid))
    assert out["changed"] is True and out["changes"] == {"identity": [[], [rid]]}, out
    assert _user_identities(world) == [rid.lower()]
    assert out["cluster"]["identity"] == [rid] or [i.lower() for i in out["cluster"]["identity"]] == [rid.lower()]
    # The scale was not touched: the nodes stay.
    scale = world.clusters["gpu"]["compute"]["properties"]["properties"]["scaleSettings"]
    assert (scale["minNodeCount"], scale["maxNodeCount"]) == (4, 4)
    again = run(capsys, args(sdk, identity_resource_id=_rid("stage-reader", lower=True)))
    assert again["changed"] is False, again


@pytest.mark.parametrize("sdk", SDKS)
def test_adding_the_identity_keeps_the_user_assigned_ones_there(capsys, monkeypatch, world, sdk):
    other = _rid("acr-pull")
    world.add("gpu", make_nodes(4), vm_size="STANDARD_ND96ASR_V4",
              identity={"type": "UserAssigned", "userAssignedIdentities": {other: {}}})
    install(monkeypatch, world, sdk)
    rid = _rid("stage-reader")
    out = run(capsys, args(sdk, identity_resource_id=rid))
    assert out["changed"] is True and out["changes"] == {"identity": [[other], [other, rid]]}, out
    assert _user_identities(world) == sorted([other.lower(), rid.lower()])
    assert world.identity_of("gpu")["type"] == "UserAssigned"


def test_adding_the_identity_keeps_the_system_assigned_one_with_azure_ai_ml(capsys, monkeypatch, world):
    world.add("gpu", make_nodes(4), vm_size="STANDARD_ND96ASR_V4", identity={"type": "SystemAssigned"})
    install_v2(monkeypatch, world)
    rid = _rid("stage-reader")
    out = run(capsys, args("azure-ai-ml", identity_resource_id=rid))
    assert out["changed"] is True, out
    assert world.identity_of("gpu")["type"] == "SystemAssigned,UserAssigned"
    assert _user_identities(world) == [rid.lower()]


def test_azureml_core_refuses_to_drop_the_system_assigned_identity(capsys, monkeypatch, world):
    # azureml-core's add_identity PATCHes type UserAssigned, which would take the nodes'
    # system-assigned identity away (and what the workspace granted it): refused, in check
    # mode too, with the two ways that keep both.
    world.add("gpu", make_nodes(4), vm_size="STANDARD_ND96ASR_V4", identity={"type": "SystemAssigned"})
    install_v1(monkeypatch, world)
    rid = _rid("stage-reader")
    for extra in ({"_ansible_check_mode": True}, {}):
        out = run(capsys, args("azureml-core", identity_resource_id=rid, **extra))
        assert out["failed"], out
        assert ("cluster 'gpu' has a system-assigned identity, which azureml-core cannot keep while it adds "
                f"{rid}") in out["msg"]
        assert "sdk azure-ai-ml" in out["msg"] and "az ml compute update" in out["msg"]
    assert world.identity_of("gpu")["type"] == "SystemAssigned" and not world.identity_updates


@pytest.mark.parametrize("sdk", SDKS)
def test_changes_the_idle_time_of_an_existing_cluster(capsys, monkeypatch, world, sdk):
    world.add("gpu", make_nodes(4), vm_size="STANDARD_ND96ASR_V4")
    install(monkeypatch, world, sdk)
    out = run(capsys, args(sdk, idle_seconds_before_scaledown=600))
    assert out["changed"] is True and out["changes"] == {"idle_seconds": [1800, 600]}, out
    assert _idle_seconds(world) == 600
    scale = world.clusters["gpu"]["compute"]["properties"]["properties"]["scaleSettings"]
    assert (scale["minNodeCount"], scale["maxNodeCount"]) == (4, 4)
    assert run(capsys, args(sdk, idle_seconds_before_scaledown=600))["changed"] is False
    # Not set: the idle time the cluster has is kept.
    assert run(capsys, args(sdk))["changed"] is False and _idle_seconds(world) == 600


@pytest.mark.parametrize("sdk", SDKS)
def test_refuses_a_cluster_with_another_vm_priority(capsys, monkeypatch, world, sdk):
    world.add("gpu", make_nodes(4), vm_size="STANDARD_ND96ASR_V4", vm_priority="LowPriority")
    install(monkeypatch, world, sdk)
    out = run(capsys, args(sdk))
    assert out["failed"] and "exists with vm_priority lowpriority (wanted dedicated)" in out["msg"], out
    assert run(capsys, args(sdk, vm_priority="lowpriority"))["changed"] is False


@pytest.mark.parametrize("sdk", SDKS)
def test_check_mode_changes_nothing_and_diff_shows_the_scale(capsys, monkeypatch, world, sdk):
    world.add("gpu", make_nodes(2), min_nodes=0, max_nodes=4, vm_size="STANDARD_ND96ASR_V4")
    install(monkeypatch, world, sdk)
    out = run(capsys, args(sdk, _ansible_check_mode=True, _ansible_diff=True))
    assert out["changed"] is True and out["changes"] == {"min_nodes": [0, 4]}
    assert out["diff"]["before"]["min_nodes"] == 0 and out["diff"]["after"]["min_nodes"] == 4
    assert world.clusters["gpu"]["compute"]["properties"]["properties"]["scaleSettings"]["minNodeCount"] == 0
    assert not any("update" in k or "PUT" in k for k in world.calls)
    created = run(capsys, args(sdk, name="new", _ansible_check_mode=True))
    assert created["action"] == "create" and "new" not in world.clusters


@pytest.mark.parametrize("sdk", SDKS)
def test_scales_an_existing_cluster(capsys, monkeypatch, world, sdk):
    world.add("gpu", make_nodes(2), min_nodes=2, max_nodes=2, vm_size="STANDARD_ND96ASR_V4")
    install(monkeypatch, world, sdk)
    out = run(capsys, args(sdk))
    assert out["changed"] and out["changes"] == {"min_nodes": [2, 4], "max_nodes": [2, 4]}
    assert out["cluster"]["min_nodes"] == out["cluster"]["max_nodes"] == 4


def test_autoscaling_refused_while_beeond_is_on(capsys, monkeypatch, world):
    install_v1(monkeypatch, world)
    out = run(capsys, args("azureml-core", min_nodes=0))
    assert out["failed"] and "autoscales (min 0, max 4); BeeOND needs min_nodes == max_nodes" in out["msg"]
    assert "gpu" not in world.clusters
    ok = run(capsys, args("azureml-core", min_nodes=0, beeond_enabled=False))
    assert ok["changed"] and world.clusters["gpu"]["compute"]["properties"]["properties"]["scaleSettings"][
        "minNodeCount"] == 0


@pytest.mark.parametrize("sdk", SDKS)
def test_refuses_a_cluster_with_another_vm_size(capsys, monkeypatch, world, sdk):
    world.add("gpu", make_nodes(4), vm_size="STANDARD_NC24ADS_A100_V4")
    install(monkeypatch, world, sdk)
    out = run(capsys, args(sdk))
    assert out["failed"] and "exists with vm_size STANDARD_NC24ADS_A100_V4" in out["msg"]


@pytest.mark.parametrize("sdk", SDKS)
def test_scaled_to_zero_teardown(capsys, monkeypatch, world, sdk):
    world.add("gpu", make_nodes(4), vm_size="STANDARD_ND96ASR_V4")
    install(monkeypatch, world, sdk)
    out = run(capsys, {"name": "gpu", "sdk": sdk, "state": "scaled_to_zero", "subscription_id": SUB,
                       "resource_group": RG, "workspace_name": WS, "auth_source": "cli", "poll_interval": 0})
    assert out["changed"] and out["changes"]["min_nodes"] == [4, 0] and out["wait_status"] == "0 node(s) left"
    scale = world.clusters["gpu"]["compute"]["properties"]["properties"]["scaleSettings"]
    assert (scale["minNodeCount"], scale["maxNodeCount"]) == (0, 4)
    again = run(capsys, {"name": "gpu", "sdk": sdk, "state": "scaled_to_zero", "subscription_id": SUB,
                         "resource_group": RG, "workspace_name": WS, "auth_source": "cli", "wait": False})
    assert again["changed"] is False


def _idle_seconds(world) -> int:
    from azureml.core.compute.amlcompute import ScaleSettings  # the SDK's own ISO 8601 reading
    scale = world.clusters["gpu"]["compute"]["properties"]["properties"]["scaleSettings"]
    return ScaleSettings.deserialize(scale).idle_seconds_before_scaledown


@pytest.mark.parametrize("sdk", SDKS)
def test_teardown_sets_a_short_idle_time_and_waits_until_no_node_is_left(capsys, monkeypatch, world, sdk):
    world.add("gpu", make_nodes(4), vm_size="STANDARD_ND96ASR_V4")
    world.release_after_polls = 2  # AmlCompute releases the idle nodes a while after the update
    install(monkeypatch, world, sdk)
    assert _idle_seconds(world) == 1800
    base = {"name": "gpu", "sdk": sdk, "state": "scaled_to_zero", "subscription_id": SUB, "resource_group": RG,
            "workspace_name": WS, "auth_source": "cli", "poll_interval": 0}
    out = run(capsys, base)
    assert out["changed"] and out["changes"] == {"min_nodes": [4, 0], "idle_seconds": [1800, 120]}, out
    assert _idle_seconds(world) == 120 and out["wait_status"] == "0 node(s) left"
    assert world.calls["v1 list_nodes (POST listNodes)"] + world.calls["v2 POST listNodes"] >= 3
    assert run(capsys, {**base, "wait": False})["changed"] is False


@pytest.mark.parametrize("sdk", SDKS)
def test_teardown_without_waiting_says_when_the_nodes_will_be_gone(capsys, monkeypatch, world, sdk):
    world.add("gpu", make_nodes(3, states={2: "running"}), vm_size="STANDARD_ND96ASR_V4", min_nodes=0)
    world.release_after_polls = 5
    install(monkeypatch, world, sdk)
    out = run(capsys, {"name": "gpu", "sdk": sdk, "state": "scaled_to_zero", "subscription_id": SUB,
                       "resource_group": RG, "workspace_name": WS, "auth_source": "cli", "wait": False,
                       "idle_seconds_before_scaledown": 300})
    # min_nodes was 0 already: the idle time alone still made the teardown a change.
    assert out["changed"] and out["changes"] == {"idle_seconds": [1800, 300]}
    assert out["msg"] == ("3 node(s) left on cluster 'gpu': AmlCompute releases each after 300 s idle "
                          "(2 idle now: gone in about 5 min); 1 running a job go 300 s after it ends")


def _ssh_servers(n: int):
    """n TCP servers on 127.0.0.1 that greet like sshd."""
    socks, stop = [], threading.Event()
    for _unused in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        s.settimeout(0.2)
        socks.append(s)

    def serve(s):
        while not stop.is_set():
            try:
                conn, _unused = s.accept()
            except OSError:
                continue
            conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 fake\r\n")
            conn.close()
    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in socks]
    for t in threads:
        t.start()
    return socks, stop


@pytest.mark.parametrize("sdk", SDKS)
def test_wait_until_idle_and_answering_on_ssh(capsys, monkeypatch, world, sdk):
    socks, stop = _ssh_servers(2)
    try:
        nodes = make_nodes(2, public_ip="127.0.0.1")
        nodes.sort(key=lambda n: n["port"])
        for node, s in zip(nodes, socks):
            node["port"] = s.getsockname()[1]
        nodes[1]["nodeState"] = "preparing"
        world.add("gpu", nodes, min_nodes=2, max_nodes=2, vm_size="STANDARD_ND96ASR_V4")
        world.grow_on_scale = False
        install(monkeypatch, world, sdk)
        looks = {"n": 0}
        real_sleep = module.time.sleep

        def sleep(_s):  # the node becomes idle while the module waits
            looks["n"] += 1
            nodes[1]["nodeState"] = "idle"
            real_sleep(0)
        monkeypatch.setattr(module.time, "sleep", sleep)
        out = run(capsys, args(sdk, max_nodes=2, wait=True, wait_timeout=30))
        assert out["changed"] is False and out["wait_status"] == "2 node(s) idle", out
        assert looks["n"] == 1 and len(out["nodes"]) == 2
        # A node that does not answer on SSH keeps it waiting until the timeout.
        socks[0].close()
        out = run(capsys, args(sdk, max_nodes=2, wait=True, wait_timeout=0))
        assert out["failed"] and "idle but not answering on SSH" in out["msg"]
    finally:
        stop.set()
        for s in socks:
            s.close()


@pytest.mark.parametrize("sdk", SDKS)
def test_errors_are_one_sentence(capsys, monkeypatch, world, sdk):
    world.auth_error = "AADSTS700016: Application not found in the directory."
    install(monkeypatch, world, sdk)
    out = run(capsys, args(sdk))
    assert out["failed"] and out["msg"].startswith("Azure authentication failed with auth_source cli: AADSTS700016")
    world.auth_error = None
    world.workspace = "other"
    out = run(capsys, args(sdk))
    assert out["msg"].startswith(f"workspace '{WS}' was not found")


def test_secret_is_not_logged(capsys, monkeypatch, world):
    install_v2(monkeypatch, world)
    out = run(capsys, args("azure-ai-ml", auth_source="service_principal", client_id="c", tenant="t",
                           secret="very-secret-value"))
    assert "very-secret-value" not in json.dumps(out)
    assert out["changed"]


# --- low priority: the values the service takes, through each SDK's own serialisation --------

@pytest.mark.parametrize("sdk", SDKS)
def test_a_low_priority_cluster_is_asked_for_in_the_services_words(capsys, monkeypatch, world, sdk):
    """The REST enum is Dedicated | LowPriority: azure-ai-ml sends it from tier="low_priority"
    (its "lowpriority" would go out as "Lowpriority"); azureml-core from its own "lowpriority"."""
    install(monkeypatch, world, sdk)
    out = run(capsys, args(sdk, vm_priority="lowpriority"))
    assert out["changed"] is True and out["action"] == "create", out
    sent = world.sent["gpu"][-1]["vmPriority"]  # the request body, as the SDK serialised it
    assert sent == ("LowPriority" if sdk == "azure-ai-ml" else "lowpriority"), sent
    assert world.clusters["gpu"]["compute"]["properties"]["properties"]["vmPriority"] == "LowPriority"
    again = run(capsys, args(sdk, vm_priority="lowpriority"))
    assert again["changed"] is False and again["action"] == "none", again
    other = run(capsys, args(sdk, vm_priority="dedicated"))
    assert other["failed"] is True and "vm_priority lowpriority (wanted dedicated)" in other["msg"], other


def test_a_sovereign_cloud_is_reached_at_its_own_resource_manager(capsys, monkeypatch, world):
    """cloud_environment: azure-ai-ml talks to the cloud's resource manager and asks for tokens of
    its audience (the login authority is checked in test_azure_auth.py)."""
    install_v2(monkeypatch, world)
    out = run(capsys, args("azure-ai-ml", cloud_environment="AzureChinaCloud"))
    assert out["changed"] is True, out
    hosts = {k for k in world.calls if k.startswith("host ")}
    assert hosts == {"host management.chinacloudapi.cn"}, hosts
    assert {k for k in world.calls if k.startswith("scope ")} == {"scope https://management.chinacloudapi.cn/.default"}


# --- a cluster in a subnet, without node public IPs ------------------------------------------

SUBNET = (f"/subscriptions/{SUB}/resourceGroups/rg-net/providers/Microsoft.Network/virtualNetworks/vnet-hpc/"
          "subnets/nodes")
PRIVATE = {"subnet": SUBNET, "node_public_ip": False, "remote_login_port_public_access": "Disabled"}


@pytest.mark.parametrize("sdk", SDKS)
def test_a_cluster_in_a_subnet_without_node_public_ips(capsys, monkeypatch, world, sdk):
    """The request carries the subnet and enableNodePublicIp: false as each SDK serialises them;
    the cluster read back matches (a second run changes nothing); what cannot change in place is refused."""
    install(monkeypatch, world, sdk)
    out = run(capsys, args(sdk, **PRIVATE))
    assert out["changed"] is True and out["action"] == "create", out
    sent = world.sent["gpu"][-1]
    assert sent["subnet"] == {"id": SUBNET} and sent["enableNodePublicIp"] is False, sent
    assert sent["remoteLoginPortPublicAccess"] == "Disabled"
    # The nodes AmlCompute lists for it have no public IP and no NAT port.
    assert {(n["publicIpAddress"], n["port"]) for n in world.clusters["gpu"]["nodes"]} == {(None, None)}
    again = run(capsys, args(sdk, **PRIVATE))
    assert again["changed"] is False and again["action"] == "none", again
    # A scale keeps the cluster in its subnet without public IPs (azure-ai-ml PUTs the whole cluster).
    grown = run(capsys, args(sdk, **{**PRIVATE, "max_nodes": 5}))
    assert grown["changed"] is True and grown["action"] == "update", grown
    if sdk == "azure-ai-ml":
        sent = world.sent["gpu"][-1]
        assert sent["subnet"] == {"id": SUBNET} and sent["enableNodePublicIp"] is False, sent
    assert len(world.clusters["gpu"]["nodes"]) == 5
    assert {(n["publicIpAddress"], n["port"]) for n in world.clusters["gpu"]["nodes"]} == {(None, None)}
    other = run(capsys, args(sdk, **{**PRIVATE, "subnet": SUBNET.replace("/nodes", "/other")}))
    assert other["failed"] is True and "subnet" in other["msg"] and "in place" in other["msg"], other
    public = run(capsys, args(sdk))
    assert public["failed"] is True and "in place" in public["msg"] and "subnet" in public["msg"], public
    if sdk == "azure-ai-ml":  # azureml-core does not read enableNodePublicIp back
        assert "node_public_ip False (wanted True)" in public["msg"], public


def test_a_private_cluster_is_refused_without_what_it_needs(capsys, monkeypatch, world):
    install(monkeypatch, world, "azure-ai-ml")
    out = run(capsys, args("azure-ai-ml", node_public_ip=False, remote_login_port_public_access="Disabled"))
    assert out["failed"] is True and out["msg"].startswith("a cluster without node public IPs lives in a VNet"), out
    out = run(capsys, args("azure-ai-ml", subnet=SUBNET, node_public_ip=False))
    assert out["failed"] is True and "remote_login_port_public_access" in out["msg"], out
    assert "gpu" not in world.clusters


def _ssh_servers_on(ips: list[str]):
    """One sshd-like server per loopback address, all on one port (a cluster's private IPs, port 22)."""
    for _unused in range(20):
        socks, stop = [], threading.Event()
        try:
            for ip in ips:
                s = socket.socket()
                s.bind((ip, socks[0].getsockname()[1] if socks else 0))
                s.listen()
                s.settimeout(0.2)
                socks.append(s)
            break
        except OSError:  # the port was taken on another address: try another
            for s in socks:
                s.close()
    else:
        raise RuntimeError("no common free port")

    def serve(s):
        while not stop.is_set():
            try:
                conn, _unused = s.accept()
            except OSError:
                continue
            conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 fake\r\n")
            conn.close()
    for s in socks:
        threading.Thread(target=serve, args=(s,), daemon=True).start()
    return socks, stop


@pytest.mark.parametrize("sdk", SDKS)
def test_the_wait_asks_each_node_on_its_private_ip(capsys, monkeypatch, world, sdk):
    ips = ["127.0.0.2", "127.0.0.3"]
    socks, stop = _ssh_servers_on(ips)
    try:
        port = socks[0].getsockname()[1]
        nodes = make_nodes(2, public_ip=None, nat=False)
        for node, ip in zip(nodes, ips):
            node["privateIpAddress"] = ip
        world.add("gpu", nodes, min_nodes=2, max_nodes=2, subnet=SUBNET, node_public_ip=False,
                  public_access="Disabled")
        install(monkeypatch, world, sdk)
        out = run(capsys, args(sdk, max_nodes=2, wait=True, wait_timeout=30, use_private_ip=True, ssh_port=port,
                               **PRIVATE))
        assert out["changed"] is False and out["wait_status"] == "2 node(s) idle", out
        socks[1].close()
        out = run(capsys, args(sdk, max_nodes=2, wait=True, wait_timeout=0, use_private_ip=True, ssh_port=port,
                               **PRIVATE))
        assert out["failed"] and f"(127.0.0.3:{port})" in out["msg"] and "not answering on SSH" in out["msg"], out
        # Without use_private_ip there is nothing to reach them on: one sentence says so.
        out = run(capsys, args(sdk, max_nodes=2, wait=True, wait_timeout=0, **PRIVATE))
        assert out["failed"] and "use_private_ip" in out["msg"], out
    finally:
        stop.set()
        for s in socks:
            s.close()


@pytest.mark.parametrize("sdk", SDKS)
@pytest.mark.parametrize("option,value,segment", [
    ("subnet", "/subscriptions/hpc-sub/resourceGroups/rg-net/providers/Microsoft.Network/virtualNetworks/vnet/"
               "subnets/nodes", "'hpc-sub'"),
    ("identity_resource_id", f"/subscriptions/{SUB}/resourceGroups/rg./providers/Microsoft.ManagedIdentity/"
                             "userAssignedIdentities/reader", "'rg.'"),
    ("identity_resource_id", f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.ManagedIdentities/"
                             "userAssignedIdentities/reader", "'Microsoft.ManagedIdentities'"),
    ("subscription_id", "hpc-sub", "'hpc-sub'"),
    ("resource_group", "rg hpc!", "'rg hpc!'"),
])
def test_ids_azure_would_refuse_are_refused_before_any_call(capsys, monkeypatch, world, sdk, option, value, segment):
    """Issue 51, item 4: an id Azure would refuse (or an SDK would mangle) fails the task before
    any call, one sentence naming the option, the segment and the fix."""
    install(monkeypatch, world, sdk)
    extra = {option: value}
    if option == "subnet":
        extra.update(node_public_ip=False, remote_login_port_public_access="Disabled")
    out = run(capsys, args(sdk, **extra))
    assert out.get("failed") is True, out
    assert option in out["msg"] and segment in out["msg"] and "az " in out["msg"], out["msg"]
    assert sum(world.calls.values()) == 0, world.calls


def _kept(world, name: str) -> dict:
    """What EVERY_PROPERTY set, as the cluster's GET now answers it."""
    compute = world.clusters[name]["compute"]
    props = compute["properties"]
    return {"inner": {k: props["properties"].get(k) for k in EVERY_PROPERTY["inner"]},
            "outer": {k: props.get(k) for k in EVERY_PROPERTY["outer"]}, "tags": compute.get("tags")}


EVERY = {"subnet": EVERY_PROPERTY["inner"]["subnet"]["id"], "node_public_ip": False,
         "remote_login_port_public_access": "NotSpecified", "beeond_enabled": False}


@pytest.mark.parametrize("sdk", SDKS)
def test_a_scale_an_identity_and_a_teardown_keep_every_property_the_service_returned(
        capsys, monkeypatch, world, sdk):
    """Issue 51, item 2: an update sends only what changes (or the whole cluster as the service
    returned it): a custom image, node-level metrics, an isolated network, NotSpecified SSH
    access, a description, tags and a property today's REST models do not know all stay."""
    install(monkeypatch, world, sdk)
    # azureml-core cannot add an identity beside a system-assigned one (refused apart): user-assigned only there.
    kind = "SystemAssigned,UserAssigned" if sdk == "azure-ai-ml" else "UserAssigned"
    world.add("gpu", make_nodes(2, nat=False), identity={"type": kind, "userAssignedIdentities": {_rid("a"): {}}})
    with_every_property(world.clusters["gpu"]["compute"])
    want = json.loads(json.dumps(EVERY_PROPERTY))

    out = run(capsys, args(sdk, min_nodes=2, max_nodes=3, **EVERY))  # a scale
    assert out["changed"] is True and out["action"] == "update", out
    assert _kept(world, "gpu") == want
    out = run(capsys, args(sdk, min_nodes=2, max_nodes=3, identity_resource_id=_rid("b"), **EVERY))
    assert out["changed"] is True, out
    assert _kept(world, "gpu") == want
    identity = world.identity_of("gpu")
    assert identity["type"].replace(" ", "") == kind
    assert sorted(k.lower() for k in identity["userAssignedIdentities"]) == [_rid("a").lower(), _rid("b").lower()]
    out = run(capsys, args(sdk, state="scaled_to_zero", **EVERY))  # a teardown
    assert out["changed"] is True, out
    assert _kept(world, "gpu") == want
    scale = world.clusters["gpu"]["compute"]["properties"]["properties"]["scaleSettings"]
    assert scale["minNodeCount"] == 0 and scale["maxNodeCount"] == 3
    assert world.puts == {}, "an existing cluster is changed by PATCH, never PUT back whole"


@pytest.mark.parametrize("sdk", SDKS)
def test_not_specified_is_sent_as_not_specified(capsys, monkeypatch, world, sdk):
    """Issue 51, item 2: NotSpecified ("closed with a VNet, else open", chosen only at creation)
    goes out as NotSpecified, not as Disabled, through either SDK."""
    install(monkeypatch, world, sdk)
    out = run(capsys, args(sdk, remote_login_port_public_access="NotSpecified"))
    assert out["changed"] is True and out["action"] == "create", out
    assert world.sent["gpu"][0]["remoteLoginPortPublicAccess"] == "NotSpecified"
    assert world.clusters["gpu"]["compute"]["properties"]["properties"]["remoteLoginPortPublicAccess"] == "NotSpecified"
