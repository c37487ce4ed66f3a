"""The ssh ControlPersist masters the inventory closes for endpoints that now stand for
another node (amlhpc.known_hosts.control_path, close_masters)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from ansible.plugins.connection.ssh import Connection

from amlhpc.known_hosts import Endpoint, close_masters, control_path

IP = "20.84.17.201"


def ep(port: int, user: str = "azureuser") -> Endpoint:
    return Endpoint(IP, port, f"id-{port}", f"gpu-{port - 50000}", "gpu", user)


@pytest.mark.parametrize(("port", "user"), [(50000, "azureuser"), (50017, "root"), (22, "")])
def test_the_path_is_the_one_ansible_core_s_ssh_connection_uses(port, user):
    # ansible-core: control_path unset -> _create_control_path(host, port, user), "%(directory)s" filled in.
    expected = Connection._create_control_path(IP, port, user) % {"directory": "/cp"}  # pylint: disable=protected-access
    assert control_path("/cp", ep(port, user)) == expected


def test_a_control_path_option_of_the_user_is_kept_with_ssh_tokens_for_ssh():
    assert control_path("/cp", ep(50001), "%(directory)s/%%h-%%p-%%r") == "/cp/%h-%p-%r"


def fake_ssh(tmp_path: Path, rc: int) -> tuple[Path, Path]:
    """An ssh that records its arguments and exits ``rc``."""
    log = tmp_path / "ssh.log"
    exe = tmp_path / "ssh"
    exe.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit {rc}\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe, log


def test_only_endpoints_with_a_master_socket_get_an_ssh_exit(tmp_path):
    exe, log = fake_ssh(tmp_path, 0)
    with_master, without = ep(50000), ep(50001)
    Path(control_path(str(tmp_path), with_master)).touch()
    closed = close_masters([with_master, without, with_master], str(tmp_path), ssh=str(exe))
    assert closed == [with_master]
    path = control_path(str(tmp_path), with_master)
    assert log.read_text().splitlines() == [f"-o ControlPath={path} -O exit -p 50000 -l azureuser {IP}"]


def test_a_master_that_does_not_answer_loses_its_socket(tmp_path):
    exe, _log = fake_ssh(tmp_path, 255)
    endpoint = ep(50003)
    path = Path(control_path(str(tmp_path), endpoint))
    path.touch()
    assert close_masters([endpoint], str(tmp_path), ssh=str(exe)) == [endpoint]
    assert not path.exists()


def test_with_ssh_tokens_in_the_path_ssh_is_asked_for_every_endpoint(tmp_path):
    exe, log = fake_ssh(tmp_path, 255)  # "Control socket connect(...): No such file or directory"
    assert close_masters([ep(50000), ep(50001)], str(tmp_path), "%(directory)s/%%C", ssh=str(exe)) == []
    assert sorted(log.read_text().splitlines()) == [
        f"-o ControlPath={tmp_path}/%C -O exit -p 50000 -l azureuser {IP}",
        f"-o ControlPath={tmp_path}/%C -O exit -p 50001 -l azureuser {IP}"]
    assert {p.name for p in tmp_path.iterdir()} == {"ssh", "ssh.log"}
