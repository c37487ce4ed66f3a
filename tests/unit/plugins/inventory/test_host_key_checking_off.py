"""The pins hold whatever the operator's Ansible settings say about host key checking.

Ansible's ssh connection puts ``-o StrictHostKeyChecking=no`` (host key checking off: the
environment, ansible.cfg, or the ``ansible_host_key_checking`` / ``ansible_ssh_host_key_checking``
variables) before the inventory's own ``StrictHostKeyChecking=yes``, and ssh takes the first
value. The azureml_compute plugin sets both variables to true on each node it pins, so by
Ansible's precedence (an inventory source's host vars beat group_vars, the environment and
ansible.cfg) the pins win. Here real Ansible builds the ssh command line; the ``ssh`` it runs
is a script that records its arguments and fails, and real ``ssh -G`` says what they mean.

And a project folder too deep for ssh's control sockets: the ControlPath real Ansible gives ssh is
the path trust/control_socket.py measures, and the validate play refuses a path ssh could not bind
in one sentence, without running ssh (the kernel's side: module_utils/test_control_socket.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_cli import ansible_cli

from amlhpc.trust.control_socket import control_socket_path

ROOT = Path(__file__).resolve().parents[4]
ANSIBLE = ansible_cli("ansible")


def inventory(tmp_path: Path, group_vars: dict | None = None) -> Path:
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    # A closed port on this machine: the first read's ssh-keyscan fails at once (a warning).
    (inv / "nodes.json").write_text(json.dumps([{"nodeId": "tvmps_0", "privateIpAddress": "10.0.0.4",
                                                "publicIpAddress": "127.0.0.1", "port": 9, "nodeState": "idle"}]))
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars or {}))
    config = inv / "kh.azureml_compute.yml"
    config.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file",
                                      "cluster": "kh", "nodes_file": "nodes.json", "admin_user": "azureuser",
                                      "known_hosts_file": str(tmp_path / "state" / "known_hosts"),
                                      "known_hosts_scan_timeout": 1}))
    return config


def recorded_ssh_argv(tmp_path: Path, config: Path, **env: str) -> list[str]:
    """The arguments Ansible's ssh connection gives ssh for a ping of the node."""
    record = tmp_path / "argv.json"
    fake = tmp_path / "ssh"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\nsys.exit(255)\n")
    fake.chmod(0o755)
    # Ansible's settings from the environment go, but the tests' own fact cache (tests/conftest.py).
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("ANSIBLE_") or k in ("ANSIBLE_CONFIG", "ANSIBLE_CACHE_PLUGIN_CONNECTION")}
    environ.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_SSH_EXECUTABLE=str(fake),
                   ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / "cp"), ANSIBLE_FORCE_COLOR="0", **env)
    run = subprocess.run([ANSIBLE, "-i", str(config), "aml_nodes", "-m", "ansible.builtin.ping"], cwd=ROOT,
                         env=environ, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                         check=False)
    assert record.exists(), run.stdout + run.stderr
    return json.loads(record.read_text())


def ssh_says(argv: list[str]) -> dict[str, str]:
    """What OpenSSH makes of the options (``ssh -G``: the effective configuration, no connection)."""
    options = [a for a in argv[:-2] if a not in ("-vvv", "-C", "-tt")]  # the host and the command last
    out = subprocess.run(["ssh", "-G", "-F", "/dev/null", *options, "node"], capture_output=True, text=True,
                         check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def test_host_key_checking_off_in_the_environment_and_group_vars_leaves_the_pins_in_force(tmp_path):
    config = inventory(tmp_path, {"ansible_host_key_checking": False, "ansible_ssh_host_key_checking": False})
    argv = recorded_ssh_argv(tmp_path, config, ANSIBLE_HOST_KEY_CHECKING="False",
                             ANSIBLE_SSH_HOST_KEY_CHECKING="False")
    said = ssh_says(argv)
    assert said["stricthostkeychecking"] == "true", argv
    assert said["userknownhostsfile"] == str(tmp_path / "state" / "known_hosts"), argv
    assert said["globalknownhostsfile"] == "/dev/null", argv


def validate(tmp_path: Path, config: Path, *extra: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "ssh"
    fake.write_text(f"#!/bin/sh\ntouch {tmp_path / 'ssh-ran'}\nexit 255\n")
    fake.chmod(0o755)
    # Ansible's settings from the environment go, but the tests' own fact cache (tests/conftest.py).
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("ANSIBLE_") or k in ("ANSIBLE_CONFIG", "ANSIBLE_CACHE_PLUGIN_CONNECTION")}
    environ.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_SSH_EXECUTABLE=str(fake), ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / "cp"))
    return subprocess.run([ansible_cli("ansible-playbook"), "-i", str(config),
                           str(ROOT / "playbooks" / "validate.yml"), "-e", f"amlhpc_project_dir={tmp_path}", *extra],
                          cwd=ROOT, env=environ,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180, check=False)


def test_a_setting_above_the_inventory_s_host_vars_refuses_the_run_before_a_node_is_reached(tmp_path):
    config = inventory(tmp_path)
    (config.parent / "host_vars").mkdir()
    (config.parent / "host_vars" / "kh-0.yml").write_text("ansible_ssh_host_key_checking: false\n")
    run = validate(tmp_path, config)
    said = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0, said
    assert ("host kh-0: ansible_ssh_host_key_checking turns host key checking off, which makes ssh accept a "
            "changed host key and voids the node's pin: remove it") in said, said
    assert not (tmp_path / "ssh-ran").exists()  # refused before any task connected

    (config.parent / "host_vars" / "kh-0.yml").unlink()
    replaced = validate(tmp_path, config, "-e", "ansible_ssh_common_args='-o StrictHostKeyChecking=no'")
    said = " ".join((replaced.stdout + replaced.stderr).split())
    assert replaced.returncode != 0 and "ansible_ssh_common_args sets StrictHostKeyChecking=no ahead of" in said, said
    assert not (tmp_path / "ssh-ran").exists()


# --- the control socket -------------------------------------------------------------------------


def test_the_socket_ansible_gives_ssh_is_the_one_the_check_measures(tmp_path):
    config = inventory(tmp_path)
    argv = recorded_ssh_argv(tmp_path, config)
    given = [a.split("=", 1)[1].strip('"') for a in argv if a.startswith("ControlPath=")]
    shown = subprocess.run([ansible_cli("ansible-inventory"), "-i", str(config), "--host", "kh-0"], cwd=ROOT,
                           capture_output=True, text=True, check=True,
                           env={**{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
                                "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}).stdout
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
