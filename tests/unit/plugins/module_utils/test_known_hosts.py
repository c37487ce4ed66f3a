"""The controller's known_hosts plan: which entries to scan, replace, keep and remove."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import subprocess

import pytest

from amlhpc.trust.host_keys import key_fingerprint
from amlhpc.trust.known_hosts import (
    Endpoint,
    endpoint_pattern,
    hosts_field_matches,
    keys_for,
    keys_for_pattern,
    migrate_pins,
    patterns_in,
    pinned_text,
    plan_pins,
    replaced_warning,
    ssh_common_args,
    stale_fact_hosts,
)

IP = "20.84.17.201"
# Real ed25519 public keys (made with ssh-keygen for these tests), so ssh-keygen parses the lines.
ED_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFXrJB9e+7rN6Jp4+f9jtlbxiyMh8ql0WBW4Pk9LwmyX"
ED_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGGyOgTqmr09jWxhnfNzMe2OlEsGS0xNBKOATRm8nqdN"


def ep(port: int, node_id: str, host: str | None = None, cluster: str = "gpu") -> Endpoint:
    return Endpoint(IP, port, node_id, host or f"{cluster}-{port - 50000}", cluster)


def rec(node_id: str, host: str, cluster: str = "gpu") -> dict:
    return {"node_id": node_id, "cluster": cluster, "host": host}


def pins(**by_id: list[str]) -> dict:
    return {"gpu": {node_id: {"keys": keys} for node_id, keys in by_id.items()}}


def test_patterns_follow_ssh():
    assert endpoint_pattern(IP, 50001) == f"[{IP}]:50001"
    assert endpoint_pattern("10.0.0.4", 22) == "10.0.0.4"


def test_first_read_scans_every_node_as_a_first_use():
    plan = plan_pins([ep(50000, "a"), ep(50001, "b")], {}, {}, "")
    assert [e.node_id for e in plan.first_use] == ["a", "b"]
    assert not plan.replaced and not plan.pinned and not plan.restored


def test_a_known_node_id_uses_its_pin_and_is_never_scanned_to_be_trusted():
    recorded = {f"[{IP}]:50000": rec("a", "gpu-0"), f"[{IP}]:50001": rec("b", "gpu-1")}
    text = f"[{IP}]:50000 {ED_A}\n[{IP}]:50001 {ED_B}\n"
    plan = plan_pins([ep(50000, "a"), ep(50001, "b")], recorded, pins(a=[ED_A], b=[ED_B]), text)
    assert plan.to_scan == [] and [e.node_id for e in plan.pinned] == ["a", "b"] and plan.restored == []
    # Its lines deleted, emptied, or changed by hand: put back from the pin, still not scanned.
    for edited in (f"[{IP}]:50000 {ED_A}\n", "", f"[{IP}]:50000 {ED_A}\n[{IP}]:50001 {ED_A}\n",
                   f"[{IP}]:50000 {ED_A}\n[{IP}]:50001 {ED_B[:30]}\n"):
        plan = plan_pins([ep(50000, "a"), ep(50001, "b")], recorded, pins(a=[ED_A], b=[ED_B]), edited)
        assert plan.to_scan == [] and "b" in [e.node_id for e in plan.restored], edited


def test_a_replaced_node_is_a_new_node_id_and_named():
    recorded = {f"[{IP}]:50000": rec("a", "gpu-0"), f"[{IP}]:50001": rec("b", "gpu-1")}
    plan = plan_pins([ep(50000, "a"), ep(50001, "b2")], recorded, pins(a=[ED_A], b=[ED_B]), "")
    assert [(e.node_id, old, host) for e, old, host in plan.replaced] == [("b2", "b", "gpu-1")]
    assert [e.node_id for e in plan.to_scan] == ["b2"]
    text = replaced_warning(plan.replaced[0][0], "b", "gpu-1", "/p/known_hosts", [ED_A])
    assert "node gpu-1 at [20.84.17.201]:50001 was replaced by AmlCompute (node id b -> b2)" in text
    assert "trusted on first use (ssh-ed25519 SHA256:" in text


def test_repin_scans_a_known_node_id_again():
    recorded = {f"[{IP}]:50001": rec("b", "gpu-1")}
    plan = plan_pins([ep(50001, "b")], recorded, pins(b=[ED_B]), "", repin=["b"])
    assert [e.node_id for e in plan.repin] == ["b"] and not plan.pinned


def test_lines_without_a_record_are_adopted_only_when_plain():
    text = f"[{IP}]:50000 {ED_A}\n* {ED_B}\n"
    plan = plan_pins([ep(50000, "a"), ep(50001, "b")], {}, {}, text)
    assert [(e.node_id, keys) for e, keys in plan.adopt] == [("a", [ED_A])]
    assert [e.node_id for e in plan.first_use] == ["b"]  # the wildcard line pins nothing


def test_a_record_from_before_pins_pins_what_the_file_holds():
    recorded = {f"[{IP}]:50000": rec("a", "gpu-0"), f"[{IP}]:50001": rec("b", "gpu-1")}
    got = migrate_pins(recorded, f"[{IP}]:50000 {ED_A}\n")
    assert got == {"gpu": {"a": {"keys": [ED_A], "first": f"[{IP}]:50000"}}}


def _hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_pinned_text_drops_every_line_ssh_would_match_and_keeps_the_others():
    pattern = f"[{IP}]:50001"
    text = "\n".join([
        "# mine", f"other.example {ED_A}", f"{pattern} {ED_A}", f"{_hashed(pattern)} {ED_A}",
        f"[{IP}]:5000? {ED_A}", f"@cert-authority [{IP}]:* {ED_A}", f"@revoked {pattern} {ED_A}",
        f"{pattern} ssh-ed25", f"!{pattern},[{IP}]:* {ED_A}", f"{_hashed('[10.9.9.9]:22')} {ED_A}"]) + "\n"
    out = pinned_text(text, {pattern: [ED_B]})
    assert out == "\n".join([
        "# mine", f"other.example {ED_A}", f"@revoked {pattern} {ED_A}", f"!{pattern},[{IP}]:* {ED_A}",
        f"{_hashed('[10.9.9.9]:22')} {ED_A}", f"{pattern} {ED_B}"]) + "\n"
    assert keys_for_pattern(out, pattern) == [ED_B]


def test_pinned_text_is_stable():
    managed = {f"[{IP}]:50001": [ED_B], f"[{IP}]:50000": [ED_A, ED_A]}
    once = pinned_text("", managed)
    assert once == f"[{IP}]:50000 {ED_A}\n[{IP}]:50001 {ED_B}\n" and pinned_text(once, managed) == once


@pytest.mark.parametrize("line_hosts", [
    f"[{IP}]:50001", f"[{IP}]:5000?", f"[{IP}]:*", "*", f"other,[{IP}]:50001", f"!{IP},[{IP}]:50001",
    f"!{IP}*,[{IP}]:*", f"[{IP}]:50002", IP, f"[{IP.upper()}]:50001", _hashed(f"[{IP}]:50001"),
    _hashed(f"[{IP}]:50002"), "[20.84.17.20]:50001", f"[{IP}]:500011", "??.84.17.201*"])
def test_host_matching_agrees_with_ssh_keygen(tmp_path, line_hosts):
    """ssh-keygen -F (OpenSSH's own matching of a known_hosts file) is the judge."""
    path = tmp_path / "kh"
    path.write_text(f"{line_hosts} {ED_A}\n")
    res = subprocess.run(["ssh-keygen", "-F", f"[{IP}]:50001", "-f", str(path)], capture_output=True, text=True,
                         check=False, env=dict(os.environ, LC_ALL="C"))
    assert hosts_field_matches(line_hosts, f"[{IP}]:50001") == (res.returncode == 0), res.stdout + res.stderr


def test_fingerprints_are_ssh_keygen_s(tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    public = (tmp_path / "k.pub").read_text().strip()
    res = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(tmp_path / "k.pub")], capture_output=True,
                         text=True, check=True)
    assert res.stdout.split()[1] == key_fingerprint(" ".join(public.split()[:2]))


def test_known_hosts_text():
    text = (f"# mine\nother.example ssh-ed25519 AAAAo\n[{IP}]:50000 ssh-ed25519 AAAA0\n"
            f"[{IP}]:50001 ssh-rsa AAAA1\n[{IP}]:50001 ssh-ed25519 AAAA1e\n")
    assert patterns_in(text) == {"other.example", f"[{IP}]:50000", f"[{IP}]:50001"}


def test_keyscan_output_is_filtered_to_the_endpoint():
    out = (f"# {IP}:50001 SSH-2.0-OpenSSH_9.2p1\n[{IP}]:50001 ssh-rsa AAAAr\n"
           f"[{IP}]:50001 ssh-ed25519 AAAAe\n[{IP}]:50009 ssh-ed25519 stranger\n")
    assert keys_for(out, f"[{IP}]:50001") == [f"[{IP}]:50001 ssh-ed25519 AAAAe", f"[{IP}]:50001 ssh-rsa AAAAr"]


def test_ssh_args_never_ask():
    assert ssh_common_args("/a b/known_hosts") == ("-o UserKnownHostsFile='/a b/known_hosts' "
                                                   "-o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes")


def test_facts_of_a_host_name_that_moved_are_stale():
    assert stale_fact_hosts({"gpu-0": "a", "gpu-1": "b2", "gpu-2": "c"},
                            {"gpu-0": "a", "gpu-1": "b"}) == ["gpu-1", "gpu-2"]


def test_the_pin_logic_does_no_io_and_the_io_lives_apart():
    """known_hosts.py plans pins, known_hosts text, sentences and control paths from data alone;
    running ssh-keyscan and ssh, and the locked record file, are known_hosts_io.py's (issue 47:
    the I/O apart from the pure logic)."""
    import ast
    from pathlib import Path

    import amlhpc.trust.known_hosts as pure
    from amlhpc.trust import known_hosts_io

    tree = ast.parse(Path(pure.__file__).read_text(encoding="utf-8"))
    nodes = list(ast.walk(tree))
    imported = {a.name.split(".")[0] for n in nodes if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in nodes if isinstance(n, ast.ImportFrom) and not n.level}
    assert imported & {"subprocess", "fcntl", "tempfile", "concurrent", "os"} == set()
    assert {"scan_keys", "close_master", "NodeRecord", "RecordError"} <= set(vars(known_hosts_io))
