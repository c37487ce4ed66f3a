from __future__ import annotations

import pytest

from amlhpc.trust.ssh_trust import known_hosts_block, nodefile_lines, parse_keyscan


def node(name, rank, ip, cluster="gpu"):
    return {"inventory_hostname": name, "aml_cluster": cluster, "aml_node_rank": rank,
            "aml_private_ip": ip}


# Shaped like real `ssh-keyscan -t ed25519,ecdsa,rsa` output (OpenSSH 9.2); the comment
# lines go to stderr in real life but may be merged.
SCAN = """\
# 10.0.0.5:22 SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3
10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5
10.0.0.4 ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBA4
10.0.0.4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4
10.0.0.4 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC4
10.0.0.5 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC5
10.0.0.4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4
"""


def test_nodefile_follows_rank_not_inventory_order():
    nodes = [node("c", 2, "10.0.0.9"), node("a", 0, "10.0.0.4"), node("b", 1, "10.0.0.7")]
    assert nodefile_lines(nodes) == ["10.0.0.4", "10.0.0.7", "10.0.0.9"]


def test_nodefile_refuses_a_node_without_private_ip():
    with pytest.raises(ValueError, match="host b has no valid aml_private_ip"):
        nodefile_lines([node("a", 0, "10.0.0.4"), node("b", 1, "")])


def test_nodefile_refuses_a_hostname_instead_of_an_ip():
    with pytest.raises(ValueError, match="'node-1'"):
        nodefile_lines([node("a", 0, "node-1")])


def test_nodefile_refuses_two_clusters_and_repeated_ranks():
    with pytest.raises(ValueError, match="clusters cpu, gpu"):
        nodefile_lines([node("a", 0, "10.0.0.4"), node("b", 0, "10.0.1.4", cluster="cpu")])
    with pytest.raises(ValueError, match="repeats"):
        nodefile_lines([node("a", 0, "10.0.0.4"), node("b", 0, "10.0.0.5")])


def test_keyscan_drops_comments_duplicates_and_unasked_types():
    entries = parse_keyscan(SCAN, ["ed25519", "rsa"])
    assert ("10.0.0.4", "ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIB4") in entries
    assert all(e[1] != "ecdsa-sha2-nistp256" for e in entries)
    assert len(entries) == 4


def test_ecdsa_of_any_curve_counts_as_ecdsa():
    out = "10.0.0.4 ecdsa-sha2-nistp384 AAAAE2VjZHNh\n"
    assert parse_keyscan(out, ["ecdsa"]) == [("10.0.0.4", "ecdsa-sha2-nistp384", "AAAAE2VjZHNh")]


def test_known_hosts_block_is_sorted_and_stable():
    block = known_hosts_block(SCAN, ["10.0.0.4", "10.0.0.5"])
    assert block["missing"] == []
    assert block["lines"] == [
        "10.0.0.4 ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBA4",
        "10.0.0.4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4",
        "10.0.0.4 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC4",
        "10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5",
        "10.0.0.5 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC5",
    ]
    shuffled = "\n".join(reversed(SCAN.splitlines()))
    assert known_hosts_block(shuffled, ["10.0.0.4", "10.0.0.5"]) == block


def test_known_hosts_block_names_the_silent_node_and_ignores_strangers():
    block = known_hosts_block(SCAN + "10.9.9.9 ssh-rsa AAAAstranger\n", ["10.0.0.4", "10.0.0.6"])
    assert block["missing"] == ["10.0.0.6"]
    assert not any(line.startswith("10.9.9.9") or line.startswith("10.0.0.5") for line in block["lines"])


def test_cluster_plan_names_each_clusters_head_by_rank():
    from amlhpc.trust.ssh_trust import cluster_plan
    plan = cluster_plan([node("b1", 1, "10.0.1.5", "cpu"), node("a2", 2, "10.0.0.6"), node("a1", 1, "10.0.0.5"),
                         node("b0", 0, "10.0.1.4", "cpu")])
    assert plan == {"cpu": {"cluster": "cpu", "head": "b0", "ips": ["10.0.1.4", "10.0.1.5"], "hosts": ["b0", "b1"],
                            "known_hosts_file": "", "endpoints": ["", ""], "node_ids": ["", ""], "pins": [[], []]},
                    "gpu": {"cluster": "gpu", "head": "a1", "ips": ["10.0.0.5", "10.0.0.6"], "hosts": ["a1", "a2"],
                            "known_hosts_file": "", "endpoints": ["", ""], "node_ids": ["", ""], "pins": [[], []]}}
    with pytest.raises(ValueError, match="repeats"):
        cluster_plan([node("a", 0, "10.0.0.4"), node("b", 0, "10.0.0.5")])


def test_authorized_keys_line_is_added_once_and_replaced_in_place():
    from amlhpc.trust.ssh_trust import authorized_keys_text
    line = "ssh-rsa AAAAB3key amlhpc-head@gpu"
    other = "ssh-ed25519 AAAAC3other admin@laptop"
    assert authorized_keys_text("", line) == line + "\n"
    assert authorized_keys_text(other + "\n", line) == f"{other}\n{line}\n"
    assert authorized_keys_text(f"{other}\n{line}\n", line) == f"{other}\n{line}\n"
    # Same key with other options or comment: replaced where it was; a second copy goes.
    old = f'from="10.0.0.0/8" ssh-rsa AAAAB3key old-comment\n{other}\nssh-rsa AAAAB3key dup\n'
    assert authorized_keys_text(old, line) == f"{line}\n{other}\n"
    with pytest.raises(ValueError):
        authorized_keys_text("", "not a key")


def test_managed_block_is_written_like_blockinfile():
    from amlhpc.trust.ssh_trust import managed_block_text
    marker = "amlhpc ssh_trust: cluster gpu"
    keys = ["10.0.0.4 ssh-ed25519 AAAA4", "10.0.0.5 ssh-ed25519 AAAA5"]
    first = managed_block_text("other-host ssh-rsa AAAAx\n", marker, keys)
    assert first == ("other-host ssh-rsa AAAAx\n# BEGIN amlhpc ssh_trust: cluster gpu\n"
                     "10.0.0.4 ssh-ed25519 AAAA4\n10.0.0.5 ssh-ed25519 AAAA5\n# END amlhpc ssh_trust: cluster gpu\n")
    assert managed_block_text(first, marker, keys) == first
    replaced = managed_block_text(first + "tail ssh-rsa AAAAy\n", marker, keys[:1])
    assert replaced == ("other-host ssh-rsa AAAAx\n# BEGIN amlhpc ssh_trust: cluster gpu\n"
                        "10.0.0.4 ssh-ed25519 AAAA4\n# END amlhpc ssh_trust: cluster gpu\ntail ssh-rsa AAAAy\n")
    assert managed_block_text(first, marker, []) == "other-host ssh-rsa AAAAx\n"


def test_an_earlier_head_s_key_under_the_same_comment_is_replaced():
    """A replaced head (or a new head after a rank shift) has a new key: the earlier heads'
    keys of the cluster, known by the role's comment, stop being trusted; other keys stay."""
    from amlhpc.trust.ssh_trust import authorized_keys_text
    line = 'from="10.0.0.0/8" ssh-ed25519 AAAAC3new amlhpc-head@gpu'
    other = "ssh-ed25519 AAAAC3other admin@laptop"
    other_cluster = "ssh-ed25519 AAAAC3cpu amlhpc-head@cpu"
    old = f"ssh-ed25519 AAAAC3old amlhpc-head@gpu\n{other}\n{other_cluster}\nssh-rsa AAAAB3older amlhpc-head@gpu\n"
    assert authorized_keys_text(old, line, replaces="amlhpc-head@gpu") == f"{line}\n{other}\n{other_cluster}\n"
    # Without replaces (the module's default) earlier keys stay, as before.
    assert authorized_keys_text(old, line) == old + line + "\n"
    # A comment of several words is one comment.
    assert authorized_keys_text("ssh-ed25519 AAAAC3old head of gpu\n", "ssh-ed25519 AAAAC3new head of gpu",
                                replaces="head of gpu") == "ssh-ed25519 AAAAC3new head of gpu\n"


# The inventory plugin's known_hosts on the controller, as it writes it: one ssh-keyscan per
# NAT endpoint, [address]:port, every key type the node's sshd offers.
CONTROLLER_KNOWN_HOSTS = """\
[20.1.2.3]:50001 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4
[20.1.2.3]:50001 ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBA4
[20.1.2.3]:50001 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC4
[20.1.2.3]:50000 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC5
[20.1.2.3]:50000 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5
[20.1.2.3]:50002 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6
|1|F1E1KeoE/eEWhi10WpGv4OdiO6Y=|3988QV0VE8wmZL7suNrYQLITLCg= ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7
@cert-authority *.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB8
# a comment
"""


def test_the_controllers_known_hosts_gives_the_block_a_scan_would():
    """The same lines, in the same order, as the head's scan of the same sshds gives."""
    from amlhpc.trust.ssh_trust import controller_host_keys
    ips = ["10.0.0.5", "10.0.0.4"]
    got = controller_host_keys(CONTROLLER_KNOWN_HOSTS, ["[20.1.2.3]:50000", "[20.1.2.3]:50001"], ips)
    scan = """\
10.0.0.4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4
10.0.0.4 ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBA4
10.0.0.4 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC4
10.0.0.5 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC5
10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5
"""
    assert got == known_hosts_block(scan, ips)
    assert got["lines"][0] == "10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5" and got["missing"] == []
    # Only the asked key types.
    assert controller_host_keys(CONTROLLER_KNOWN_HOSTS, ["[20.1.2.3]:50001"], ["10.0.0.4"], ["rsa"])["lines"] == [
        "10.0.0.4 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC4"]


def test_a_node_without_a_recorded_key_is_missing():
    from amlhpc.trust.ssh_trust import controller_host_keys
    ips = ["10.0.0.5", "10.0.0.6", "10.0.0.7"]
    # 50002 has only ed25519, asked for rsa; 50009 has nothing; hashed and marker lines give nothing.
    got = controller_host_keys(CONTROLLER_KNOWN_HOSTS, ["[20.1.2.3]:50000", "[20.1.2.3]:50002", "[20.1.2.3]:50009"],
                               ips, ["rsa"])
    assert got == {"lines": ["10.0.0.5 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC5"], "missing": ["10.0.0.6", "10.0.0.7"]}
    # A node whose endpoint is unknown (no ansible_host) and an empty file.
    assert controller_host_keys(CONTROLLER_KNOWN_HOSTS, [""], ["10.0.0.5"])["missing"] == ["10.0.0.5"]
    assert controller_host_keys("", ["[20.1.2.3]:50000"], ["10.0.0.5"])["missing"] == ["10.0.0.5"]


def test_endpoint_is_the_pattern_ssh_looks_up():
    from amlhpc.trust.ssh_trust import endpoint
    assert endpoint({"ansible_host": "20.1.2.3", "ansible_port": 50000}) == "[20.1.2.3]:50000"
    assert endpoint({"ansible_host": "20.1.2.3", "ansible_port": "50001"}) == "[20.1.2.3]:50001"
    assert endpoint({"ansible_host": "10.0.0.4"}) == "10.0.0.4"
    assert endpoint({"ansible_host": "10.0.0.4", "ansible_port": 22}) == "10.0.0.4"
    assert endpoint({"ansible_port": 50000}) == "" and endpoint({"ansible_host": "h", "ansible_port": "x"}) == ""


def test_cluster_plan_carries_the_controllers_known_hosts_and_endpoints():
    from amlhpc.trust.ssh_trust import cluster_plan
    nodes = [dict(node("a1", 1, "10.0.0.5"), ansible_host="20.1.2.3", ansible_port=50001,
                  aml_known_hosts_file="/p/.cache/known_hosts"),
             dict(node("a0", 0, "10.0.0.4"), ansible_host="20.1.2.3", ansible_port=50000,
                  aml_known_hosts_file="/p/.cache/known_hosts")]
    plan = cluster_plan(nodes)["gpu"]
    assert plan["known_hosts_file"] == "/p/.cache/known_hosts"
    assert plan["endpoints"] == ["[20.1.2.3]:50000", "[20.1.2.3]:50001"] and plan["ips"] == ["10.0.0.4", "10.0.0.5"]


# ---------------------------------------------------------------------------------------
# The nodes' pins (the inventory's aml_host_keys): same rules between the nodes as on the
# controller (issue 40 item 3)

PIN_A = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4", "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC4"]


def pinned_nodes():
    return [dict(node("a0", 0, "10.0.0.4"), aml_node_id="tvmps_a", aml_host_keys=PIN_A),
            dict(node("a1", 1, "10.0.0.5"), aml_node_id="tvmps_b", aml_host_keys=[]),
            dict(node("a2", 2, "10.0.0.6"), aml_node_id="tvmps_c")]


def test_the_block_comes_from_the_pins_by_node_id():
    from amlhpc.trust.ssh_trust import cluster_plan, pinned_host_keys
    plan = cluster_plan(pinned_nodes())["gpu"]
    assert plan["node_ids"] == ["tvmps_a", "tvmps_b", "tvmps_c"]
    got = pinned_host_keys(plan)
    assert got == {"lines": ["10.0.0.4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4",
                             "10.0.0.4 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC4"],
                   "missing": ["10.0.0.5", "10.0.0.6"]}


def test_a_scan_from_the_head_is_held_to_the_pins():
    """A pinned node's block lines are its pin, whatever the head's scan said; a scanned key of
    a pinned type that differs is refused in one sentence naming the node and the fix; a node
    without a pin is taken from the scan (trust on first use, named)."""
    from amlhpc.trust.ssh_trust import cluster_plan, scanned_host_keys
    plan = cluster_plan(pinned_nodes())["gpu"]
    scan = ("10.0.0.4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMITM\n10.0.0.4 ecdsa-sha2-nistp256 AAAAE2new\n"
            "10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5\n10.0.0.6 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6\n")
    got = scanned_host_keys(scan, plan)
    assert got["lines"] == ["10.0.0.4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4",
                            "10.0.0.4 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC4",
                            "10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5",
                            "10.0.0.6 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6"]
    assert got["missing"] == [] and got["first_use"] == ["a1 (10.0.0.5)", "a2 (10.0.0.6)"]
    (sentence,) = got["refused"]
    assert sentence.startswith("cluster 'gpu': node a0 (node id tvmps_a, 10.0.0.4) offers host key ssh-ed25519 SHA256:")
    assert "AMLHPC_KNOWN_HOSTS_REPIN=tvmps_a" in sentence
    same = scanned_host_keys("10.0.0.4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4\n", plan)
    assert same["refused"] == [] and same["missing"] == ["10.0.0.5", "10.0.0.6"]
