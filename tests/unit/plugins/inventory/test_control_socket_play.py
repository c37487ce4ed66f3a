"""A project folder too deep for ssh's control sockets: refused before a node is reached.

Real Ansible builds the ssh command line of a node the azureml_compute plugin lists (the ``ssh``
it runs records its arguments and fails): its ControlPath is the path trust/control_socket.py
computes, and the validate play refuses a path ssh could not bind in one sentence, without
running ssh. The kernel's side (where a unix socket's path ends) is in
tests/unit/plugins/module_utils/test_control_socket.py.
"""

from __future__ import annotations

import json
import subprocess

from ansible_cli import ansible_cli
from test_host_key_checking_off import ROOT, inventory, recorded_ssh_argv, validate

from amlhpc.trust.control_socket import control_socket_path


def test_the_socket_ansible_gives_ssh_is_the_one_the_check_measures(tmp_path):
    config = inventory(tmp_path)
    argv = recorded_ssh_argv(tmp_path, config)
    given = [a.split("=", 1)[1].strip('"') for a in argv if a.startswith("ControlPath=")]
    shown = subprocess.run([ansible_cli("ansible-inventory"), "-i", str(config), "--host", "kh-0"], cwd=ROOT,
                           capture_output=True, text=True, check=True,
                           env={"PATH": "/usr/bin:/bin", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                                "HOME": str(tmp_path)}).stdout
    host_vars = json.loads(shown)
    assert given == [control_socket_path(host_vars, {"control_path_dir": str(tmp_path / "cp")}, host="kh-0")], argv


def test_a_control_path_dir_too_deep_is_refused_in_one_sentence_before_ssh_runs(tmp_path):
    config = inventory(tmp_path)
    deep = tmp_path / ("d" * 90)
    run = validate(tmp_path, config, "-e", f"ansible_control_path_dir={deep}")
    said = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0, said
    assert "host kh-0: ssh's control socket would be " in said and "past the 107 a unix socket takes" in said, said
    assert "set ANSIBLE_SSH_CONTROL_PATH_DIR (or control_path_dir in ansible.cfg's [ssh_connection])" in said, said
    assert not (tmp_path / "ssh-ran").exists()  # refused before any task connected
