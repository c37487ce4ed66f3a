"""A node's ssh control socket: refused before the run where the kernel would refuse it.

The property binds real unix sockets: the check says a control path is too long exactly where this
kernel refuses to bind ssh's temporary socket (``<path>.<16 characters>``, OpenSSH's mux.c) for it.
That Ansible's ssh connection builds the path the check computes is in
tests/unit/plugins/inventory/test_host_key_checking_off.py (real Ansible, the inventory plugin's path).
"""

from __future__ import annotations

import os
import socket
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from amlhpc.trust.control_socket import SSH_TEMP_SUFFIX, UNIX_PATH_MAX, control_socket_path, control_socket_problem

NODE = {"ansible_host": "10.0.0.4", "ansible_port": 50001, "ansible_user": "azureuser"}
TEMPLATES = [None, "%(directory)s/0123456789ab", "%(directory)s/%%C", "%(directory)s/ansible-ssh-%%h-%%p-%%r"]


def _binds(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.bind(path)
        except OSError:
            return False
    os.unlink(path)
    return True


def test_the_kernel_takes_107_bytes_and_no_more():
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        base = os.path.join(d, "")
        assert _binds(base + "s" * (UNIX_PATH_MAX - len(base)))
        assert not _binds(base + "s" * (UNIX_PATH_MAX + 1 - len(base)))


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(min_value=0, max_value=110), template=st.sampled_from(TEMPLATES))
def test_refused_exactly_where_the_kernel_refuses_ssh_s_socket(depth, template):
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        folder = os.path.join(d, "c" * max(1, depth))
        os.makedirs(folder)
        config = {"control_path_dir": folder, "control_path": template}
        path = control_socket_path(NODE, config, host="n-0")
        binds = _binds(path + "." + "x" * (SSH_TEMP_SUFFIX - 1))
        problem = control_socket_problem("n-0", NODE, config)
        assert (problem == "") == binds, (path, problem)
        if problem:
            assert problem.startswith("host n-0: ssh's control socket would be ") and "ANSIBLE_SSH_CONTROL_PATH_DIR" in problem


def test_a_relative_folder_is_the_controller_s_working_folder_s():
    config = {"control_path_dir": ".cache/cp", "control_path": "%(directory)s/0123456789ab"}
    assert control_socket_path(NODE, config, cwd="/srv/project") == "/srv/project/.cache/cp/0123456789ab"
    deep = "/srv/" + "p" * 80
    assert "a unix socket takes" in control_socket_problem("n-0", NODE, config, cwd=deep)
    assert control_socket_problem("n-0", NODE, config, cwd="/srv/project") == ""


def test_nodes_not_reached_over_ssh_or_without_a_master_have_no_socket():
    config = {"control_path_dir": "/srv/" + "p" * 120}
    assert control_socket_problem("n-0", {**NODE, "ansible_connection": "local"}, config) == ""
    assert control_socket_problem("n-0", NODE, {**config, "ssh_args": "-o ControlMaster=no"}) == ""
    assert control_socket_problem("n-0", NODE, config) != ""


def test_a_control_path_the_ssh_connection_does_not_make_is_not_measured():
    """Ansible adds its ControlPath only where ControlPersist is on ssh's command line and no
    ControlPath is (the ssh connection's _persistence_controls)."""
    config = {"control_path_dir": "/srv/" + "p" * 120}
    assert control_socket_problem("n-0", NODE, {**config, "ssh_args": "-o ControlPersist=60s -o ControlPath=/x/%C"}) == ""
    assert control_socket_problem("n-0", {**NODE, "ansible_ssh_common_args": "-o ControlPath=none"}, config) == ""
    assert control_socket_problem("n-0", NODE, {**config, "ssh_args": ""}) == ""
    assert control_socket_problem("n-0", {**NODE, "ansible_ssh_extra_args": "-o ControlPersist=30s"},
                                  {**config, "ssh_args": ""}) != ""
