"""The health_pair module's probe: the link speed of the interface carrying the node's address
(issue 50 item 3), read from this machine's own interfaces."""

from __future__ import annotations

import json

import pytest
from ansible_compat import patch_module_args

import health_pair  # noqa: E402  (conftest puts plugins/modules on sys.path)


def probe(capsys, address: str) -> dict:
    with patch_module_args({"role": "probe", "self_address": address}), pytest.raises(SystemExit):
        health_pair.main()
    return json.loads(capsys.readouterr().out)


def test_the_probe_names_the_interface_of_its_address_and_its_link_speed(capsys):
    # Loopback has no link speed (reading /sys/class/net/lo/speed fails with EINVAL).
    out = probe(capsys, "127.0.0.1")
    assert out["interface"] == "lo" and out["link_speed_mbps"] is None
    # A name resolves first ("localhost" is 127.0.0.1 on any Linux machine).
    assert probe(capsys, "localhost")["interface"] == "lo"


def test_an_address_no_interface_holds_has_no_link(capsys):
    out = probe(capsys, "198.51.100.254")  # TEST-NET-2 (RFC 5737): no interface holds it
    assert out["interface"] == "" and out["link_speed_mbps"] is None
    assert out["found"]["iperf3"] in (True, False)  # the probe itself still answers


def test_the_speed_file_is_read_as_the_kernel_wrote_it(tmp_path):
    # The contents recorded in fixtures/pair_gate/sys_class_net_speed_devbox.json.
    for name, text in (("veth0", "10000\n"), ("eth0", "-1\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "speed").write_text(text)
    assert health_pair.link_speed("veth0", str(tmp_path)) == 10000.0
    assert health_pair.link_speed("eth0", str(tmp_path)) is None
    assert health_pair.link_speed("gone", str(tmp_path)) is None
