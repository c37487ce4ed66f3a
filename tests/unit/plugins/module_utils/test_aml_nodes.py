"""Pure logic of the azureml_compute plugin and the cluster lifecycle (amlhpc.azure.aml_nodes)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amlhpc.azure.aml_nodes import (
    AmlNode,
    AmlNodesError,
    ClusterInfo,
    ClusterSpec,
    group_name,
    host_name,
    load_nodes_file,
    nodes_from_records,
    nodes_ready,
    plan_cluster,
    plan_hosts,
    plan_scale_to_zero,
    plan_summary,
    rank_order,
    records_from_payload,
    resolve_auth,
    spec_problems,
    split_by_state,
)

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFAKE amlhpc@controller"


def rec(i: int, state: str = "idle", **extra) -> dict:
    return {"nodeId": f"n{i}", "privateIpAddress": f"10.0.0.{4 + i}", "publicIpAddress": "20.1.2.3",
            "port": 50000 + i, "nodeState": state, "runId": None, **extra}


def test_v1_v2_and_file_records_normalise_the_same():
    v1 = rec(0)

    class BuggyV2:  # azure-ai-ml 1.35.x: snake_case None, data under camelCase keys
        def __init__(self):
            self.node_id = self.private_ip_address = self.public_ip_address = self.node_state = None
            self.run_id = None
            self.port = 50000
            self.__dict__.update({k: v for k, v in rec(0).items() if k != "port"})

    class SnakeV2:
        node_id, private_ip_address, public_ip_address = "n0", "10.0.0.4", "20.1.2.3"
        port, node_state, run_id = 50000, "idle", None

    snake_dict = {"node_id": "n0", "private_ip_address": "10.0.0.4", "public_ip_address": "20.1.2.3",
                  "port": 50000, "node_state": "idle", "run_id": None}
    got = [nodes_from_records([r], "gpu", "x")[0] for r in (v1, BuggyV2(), SnakeV2(), snake_dict)]
    assert all(g == got[0] for g in got)
    assert got[0] == AmlNode("gpu", "n0", "10.0.0.4", "20.1.2.3", 50000, "idle", "")


def test_port_as_digit_string_and_state_case():
    (node,) = nodes_from_records([rec(1, port="50001", nodeState="Idle")], "gpu", "x")
    assert node.port == 50001 and node.state == "idle"


def test_rest_page_and_list_payloads(tmp_path):
    page = {"nodes": [rec(0), rec(1)], "nextLink": None}
    assert records_from_payload(page, "f") == page["nodes"]
    assert records_from_payload([rec(0)], "f") == [rec(0)]
    with pytest.raises(AmlNodesError, match="without a 'nodes' list"):
        records_from_payload({"value": []}, "f")
    with pytest.raises(AmlNodesError, match="must hold a JSON list"):
        records_from_payload("x", "f")
    p = tmp_path / "n.json"
    p.write_text(json.dumps(page))
    assert len(load_nodes_file(str(p))) == 2


@given(st.permutations(list(range(12))))
def test_rank_order_does_not_depend_on_listing_order(order):
    nodes = nodes_from_records([rec(i) for i in order], "gpu", "x")
    assert [n.port for n in rank_order(nodes)] == [50000 + i for i in range(12)]


def test_rank_order_ties_broken_by_ip_numerically():
    nodes = nodes_from_records([rec(0, port=22, privateIpAddress="10.0.0.10"),
                                rec(1, port=22, privateIpAddress="10.0.0.9")], "gpu", "x")
    assert [n.private_ip for n in rank_order(nodes)] == ["10.0.0.9", "10.0.0.10"]


def test_split_by_state():
    nodes = nodes_from_records([rec(0), rec(1, "unusable"), rec(2, "running"), rec(3, "preempted")], "gpu", "x")
    kept, dropped = split_by_state(nodes, ["unusable", "leaving", "preempted"])
    assert [n.node_id for n in kept] == ["n0", "n2"] and [n.node_id for n in dropped] == ["n1", "n3"]


def test_plan_hosts_groups_and_vars():
    nodes = nodes_from_records([rec(2), rec(0), rec(1)], "gpu-a100", "x")
    info = ClusterInfo("gpu-a100", vm_size="Standard_ND96asr_v4", min_nodes=3, max_nodes=3, admin_user="azureuser")
    planned = plan_hosts(nodes, info)
    assert [p.name for p in planned] == ["gpu-a100-0", "gpu-a100-1", "gpu-a100-2"]
    assert planned[0].groups == ["aml_nodes", "cluster_gpu_a100", "head"]
    assert planned[2].groups == ["aml_nodes", "cluster_gpu_a100", "workers"]
    assert planned[1].vars["ansible_port"] == 50001 and planned[1].vars["aml_node_rank"] == 1
    assert planned[1].vars["ansible_user"] == "azureuser"
    unknown = plan_hosts(nodes, ClusterInfo("gpu-a100"))
    assert "aml_vm_size" not in unknown[0].vars and "ansible_user" not in unknown[0].vars


def test_no_public_ip_names_the_fix():
    nodes = nodes_from_records([rec(0, publicIpAddress=None)], "gpu", "x")
    with pytest.raises(AmlNodesError, match="use_private_ip: true"):
        plan_hosts(nodes, ClusterInfo("gpu"))
    (host,) = plan_hosts(nodes, ClusterInfo("gpu"), use_private_ip=True)
    assert (host.vars["ansible_host"], host.vars["ansible_port"]) == ("10.0.0.4", 22)


def test_names():
    assert group_name("gpu-a100.x") == "cluster_gpu_a100_x"
    node = AmlNode("gpu", "tvmps_ab/c_d", "10.0.0.4", None, 50000, "idle")
    assert host_name(node, 7) == "gpu-7"
    assert host_name(node, 7, "node_id") == "gpu-tvmps_ab_c_d"


# Auth -----------------------------------------------------------------------------------

SP_ENV = {"AZURE_CLIENT_ID": "c", "AZURE_SECRET": "s", "AZURE_TENANT": "t"}


def test_auto_prefers_options_then_env_then_default_azure_credential(tmp_path):
    """The full order, credential file included, is test_azure_auth.py's; DefaultAzureCredential
    finds a managed identity or the CLI login itself."""
    opts = {"client_id": "oc", "secret": "os", "tenant": "ot"}
    assert resolve_auth("auto", opts, SP_ENV, home=str(tmp_path)).source == "service_principal"
    assert resolve_auth("auto", {}, SP_ENV, home=str(tmp_path)).source == "env"
    assert resolve_auth("auto", {}, {"AZURE_CLIENT_SECRET": "s", "AZURE_CLIENT_ID": "c",
                                     "AZURE_TENANT_ID": "t"}, home=str(tmp_path)).source == "env"
    assert resolve_auth("auto", {}, {"IDENTITY_ENDPOINT": "http://169.254.169.254"},
                        home=str(tmp_path)).source == "default"
    assert resolve_auth("auto", {}, {}, home=str(tmp_path)).source == "default"


def test_secret_never_in_repr():
    plan = resolve_auth("env", {}, SP_ENV)
    assert plan.secret == "s" and "'s'" not in repr(plan) and "secret" not in repr(plan)


def test_env_source_names_missing_variables():
    with pytest.raises(AmlNodesError, match=r"auth_source env needs AZURE_TENANT or AZURE_TENANT_ID, AZURE_SECRET or "
                                            r"AZURE_CLIENT_SECRET \(or a certificate, .*\), which are not set"):
        resolve_auth("env", {}, {"AZURE_CLIENT_ID": "c"})
    with pytest.raises(AmlNodesError, match="auth_source must be one of"):
        resolve_auth("password", {}, {})


# Lifecycle ------------------------------------------------------------------------------


def spec(**kw) -> ClusterSpec:
    base = dict(name="gpu", vm_size="Standard_ND96asr_v4", min_nodes=4, max_nodes=4, admin_user="azureuser",
                ssh_public_key=KEY, beeond_enabled=True)
    return ClusterSpec(**{**base, **kw})


def info(**kw) -> ClusterInfo:
    base = dict(name="gpu", vm_size="STANDARD_ND96ASR_V4", min_nodes=4, max_nodes=4, admin_user="azureuser",
                ssh_public_key=KEY, remote_login_port_public_access="Enabled")
    return ClusterInfo(**{**base, **kw})


def test_autoscaling_refused_with_beeond_only():
    (problem,) = spec_problems(spec(min_nodes=0))
    assert problem.startswith("cluster 'gpu' autoscales (min 0, max 4); BeeOND needs min_nodes == max_nodes")
    assert spec_problems(spec(min_nodes=0, beeond_enabled=False)) == []
    assert "OpenSSH public key" in spec_problems(spec(ssh_public_key="AAAA"))[0]
    assert "max_nodes >= 1" in spec_problems(spec(min_nodes=0, max_nodes=0, beeond_enabled=False))[0]


def test_plan_create_update_none():
    assert plan_cluster(spec(), None).action == "create"
    assert plan_cluster(spec(), info()).action == "none"  # VM size compared without case
    plan = plan_cluster(spec(min_nodes=8, max_nodes=8), info())
    assert plan.action == "update" and plan.changes == {"min_nodes": (4, 8), "max_nodes": (4, 8)}


@pytest.mark.parametrize(("current", "words"), [
    (info(vm_size="Standard_NC24ads_A100_v4"), "vm_size Standard_NC24ads_A100_v4"),
    (info(admin_user="root2"), "admin user root2"),
    (info(ssh_public_key="ssh-rsa BBBB other"), "another admin SSH public key"),
    (info(remote_login_port_public_access="Disabled"), "remote login port public access Disabled"),
])
def test_unchangeable_differences_are_refused(current, words):
    with pytest.raises(AmlNodesError, match=f"cluster 'gpu' exists with {words}.*cannot change in place"):
        plan_cluster(spec(), current)


def test_identity_is_added_to_those_there_and_compared_without_case():
    rid = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/reader"
    other = rid.replace("reader", "acr-pull")
    plan = plan_cluster(spec(identity_resource_id=rid), info(identity_type="UserAssigned", identity_ids=(other,)))
    assert plan.changes == {"identity": ([other], [other, rid])}
    assert plan_cluster(spec(identity_resource_id=rid.replace("resourceGroups", "resourcegroups")),
                        info(identity_type="UserAssigned", identity_ids=(rid,))).action == "none"
    # azureml-core would replace a system-assigned identity; azure-ai-ml keeps it.
    system = info(identity_type="SystemAssigned")
    assert plan_cluster(spec(identity_resource_id=rid), system, sdk="azure-ai-ml").changes == {"identity": ([], [rid])}
    with pytest.raises(AmlNodesError, match="has a system-assigned identity, which azureml-core cannot keep"):
        plan_cluster(spec(identity_resource_id=rid), system, sdk="azureml-core")


def test_idle_time_and_vm_priority():
    assert plan_cluster(spec(idle_seconds_before_scaledown=600), info(idle_seconds=1800.0)).changes == {
        "idle_seconds": (1800, 600)}
    assert plan_cluster(spec(), info(idle_seconds=120)).action == "none"  # not set: kept
    assert plan_cluster(spec(), info(vm_priority="Dedicated")).action == "none"
    assert plan_cluster(spec(vm_priority="lowpriority"), info(vm_priority="low_priority")).action == "none"
    with pytest.raises(AmlNodesError, match="exists with vm_priority lowpriority \\(wanted dedicated\\)"):
        plan_cluster(spec(), info(vm_priority="LowPriority"))


def test_plan_summary_says_what_changes():
    assert plan_summary(plan_cluster(spec(), None)) == "create"
    assert plan_summary(plan_cluster(spec(), info())) == "none"
    assert plan_summary(plan_cluster(spec(min_nodes=8, max_nodes=8, identity_resource_id="/x/id"), info())) == (
        "update (min_nodes 4 -> 8, max_nodes 4 -> 8, identity [] -> ['/x/id'])")
    assert plan_summary(plan_scale_to_zero(info(idle_seconds=1800), 120)) == (
        "update (min_nodes 4 -> 0, idle_seconds 1800 -> 120)")


def test_same_key_with_another_comment_is_the_same_key():
    assert plan_cluster(spec(), info(ssh_public_key=KEY.rsplit(" ", 1)[0] + " other@host")).action == "none"


def test_scale_to_zero():
    assert plan_scale_to_zero(None).action == "none"
    assert plan_scale_to_zero(info(min_nodes=0)).action == "none"
    assert plan_scale_to_zero(info()).changes == {"min_nodes": (4, 0)}
    assert plan_scale_to_zero(info(min_nodes=0, idle_seconds=1800), 120).changes == {"idle_seconds": (1800, 120)}
    assert plan_scale_to_zero(info(min_nodes=0, idle_seconds=120), 120).action == "none"


def test_nodes_ready():
    nodes = nodes_from_records([rec(0), rec(1, "preparing")], "gpu", "x")
    ok, why = nodes_ready(nodes, 2)
    assert not ok and why == "want 2 idle node(s), have 2 (idle 1, preparing 1)"
    ok, why = nodes_ready(nodes_from_records([rec(0), rec(1)], "gpu", "x"), 2)
    assert ok and why == "2 node(s) idle"
