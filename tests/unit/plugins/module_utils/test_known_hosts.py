"""The controller's known_hosts plan: which entries to scan, replace, keep and remove."""

from __future__ import annotations

from amlhpc.known_hosts import (
    Endpoint,
    endpoint_pattern,
    keys_for,
    patterns_in,
    plan_known_hosts,
    replaced_warning,
    rewrite_known_hosts,
    ssh_common_args,
    stale_fact_hosts,
)

IP = "20.84.17.201"


def ep(port: int, node_id: str, host: str | None = None, cluster: str = "gpu") -> Endpoint:
    return Endpoint(IP, port, node_id, host or f"{cluster}-{port - 50000}", cluster)


def rec(node_id: str, host: str, cluster: str = "gpu") -> dict:
    return {"node_id": node_id, "cluster": cluster, "host": host}


def test_patterns_follow_ssh():
    assert endpoint_pattern(IP, 50001) == f"[{IP}]:50001"
    assert endpoint_pattern("10.0.0.4", 22) == "10.0.0.4"


def test_first_read_scans_every_node():
    plan = plan_known_hosts([ep(50000, "a"), ep(50001, "b")], {}, set())
    assert [e.node_id for e in plan.to_scan] == ["a", "b"]
    assert not plan.replaced and not plan.keep


def test_same_node_id_keeps_its_keys_and_is_not_scanned_again():
    recorded = {f"[{IP}]:50000": rec("a", "gpu-0"), f"[{IP}]:50001": rec("b", "gpu-1")}
    present = {f"[{IP}]:50000", f"[{IP}]:50001"}
    plan = plan_known_hosts([ep(50000, "a"), ep(50001, "b")], recorded, present)
    assert plan.to_scan == [] and [e.node_id for e in plan.keep] == ["a", "b"]


def test_a_replaced_node_is_rescanned_and_named():
    recorded = {f"[{IP}]:50000": rec("a", "gpu-0"), f"[{IP}]:50001": rec("b", "gpu-1")}
    present = set(recorded)
    plan = plan_known_hosts([ep(50000, "a"), ep(50001, "b2")], recorded, present)
    assert [(e.node_id, old, host) for e, old, host in plan.replaced] == [("b2", "b", "gpu-1")]
    assert [e.node_id for e in plan.to_scan] == ["b2"]
    text = replaced_warning(plan.replaced[0][0], "b", "gpu-1", "/p/known_hosts")
    assert "node gpu-1 at [20.84.17.201]:50001 was replaced by AmlCompute (node id b -> b2)" in text


def test_endpoints_missing_from_a_read_keep_their_keys_and_node_ids():
    """An empty or partial listing (a cluster scaled to 0, a transient answer) unpins nothing:
    the endpoints it does not list are neither scanned, replaced nor dropped."""
    recorded = {f"[{IP}]:50000": rec("a", "gpu-0"), f"[{IP}]:50001": rec("b", "gpu-1")}
    for listed in ([], [ep(50000, "a")]):
        plan = plan_known_hosts(listed, recorded, set(recorded))
        assert not plan.scan and not plan.replaced and not plan.adopt
        assert [e.node_id for e in plan.keep] == [e.node_id for e in listed]
    # ... and when node b comes back at its port, it is kept (ssh checks its pinned key), not scanned.
    plan = plan_known_hosts([ep(50000, "a"), ep(50001, "b")], recorded, set(recorded))
    assert [e.node_id for e in plan.keep] == ["a", "b"] and not plan.to_scan


def test_lines_without_a_record_are_adopted_and_deleted_lines_rescanned():
    plan = plan_known_hosts([ep(50000, "a"), ep(50001, "b")], {f"[{IP}]:50001": rec("b", "gpu-1")},
                            {f"[{IP}]:50000"})
    assert [e.node_id for e in plan.adopt] == ["a"]
    assert [e.node_id for e in plan.scan] == ["b"]


def test_known_hosts_text():
    text = (f"# mine\nother.example ssh-ed25519 AAAAo\n[{IP}]:50000 ssh-ed25519 AAAA0\n"
            f"[{IP}]:50001 ssh-rsa AAAA1\n[{IP}]:50001 ssh-ed25519 AAAA1e\n")
    assert patterns_in(text) == {"other.example", f"[{IP}]:50000", f"[{IP}]:50001"}
    out = rewrite_known_hosts(text, {f"[{IP}]:50001"}, [f"[{IP}]:50001 ssh-ed25519 NEW"])
    assert out == (f"# mine\nother.example ssh-ed25519 AAAAo\n[{IP}]:50000 ssh-ed25519 AAAA0\n"
                   f"[{IP}]:50001 ssh-ed25519 NEW\n")


def test_keyscan_output_is_filtered_to_the_endpoint():
    out = (f"# {IP}:50001 SSH-2.0-OpenSSH_9.2p1\n[{IP}]:50001 ssh-rsa AAAAr\n"
           f"[{IP}]:50001 ssh-ed25519 AAAAe\n[{IP}]:50009 ssh-ed25519 stranger\n")
    assert keys_for(out, f"[{IP}]:50001") == [f"[{IP}]:50001 ssh-ed25519 AAAAe", f"[{IP}]:50001 ssh-rsa AAAAr"]


def test_ssh_args_never_ask():
    assert ssh_common_args("/a b/known_hosts") == "-o UserKnownHostsFile='/a b/known_hosts' -o StrictHostKeyChecking=yes"


def test_facts_of_a_host_name_that_moved_are_stale():
    assert stale_fact_hosts({"gpu-0": "a", "gpu-1": "b2", "gpu-2": "c"},
                            {"gpu-0": "a", "gpu-1": "b"}) == ["gpu-1", "gpu-2"]
