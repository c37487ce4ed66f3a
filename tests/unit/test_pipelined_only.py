"""Modules whose arguments carry a secret (azcopy_stage, dataset_upload) run only where the
arguments never sit in a file on the target (plugins/plugin_utils/pipelined.py): pipelined,
or under Mitogen for Ansible, whose runner hands a module its arguments in memory.

Pipelining is the user's setting, as Ansible reads it (ansible.cfg ``[connection] pipelining``,
``ANSIBLE_PIPELINING``, the ``ansible_pipelining`` variable): the action plugin turns nothing
on, it refuses where pipelining is off. A run that is not pipelined writes the module with
its arguments under the remote temporary folder (``remote_tmp``); the tests point that at a
folder of their own and find it never made.

Each test runs a real play on localhost through ansible-playbook: azcopy_stage with a SAS and
an azcopy path that does not exist, so that a module that ran fails with its own message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")
SAS = "se=2099-01-01T00%3A00%3A00Z&sp=rl&sv=2026-10-06&sr=c&sig=FAKE-pipelined-test%3D%3D"
MISSING = "azcopy was not found at /nonexistent/azcopy: install it (role stage) or set its path"


def run_play(tmp_path: Path, play_vars: dict | None = None, **env: str) -> dict:
    play = tmp_path / "play.yml"
    play.write_text(f"""
- hosts: localhost
  connection: local
  gather_facts: false
  vars: {json.dumps(play_vars or {})}
  tasks:
    - amlhpc.azureml.azcopy_stage:
        azcopy: /nonexistent/azcopy
        account_url: http://127.0.0.1:1/devstoreaccount1
        container: c
        sas: "{SAS}"
        dest: "{tmp_path / 'stage'}"
        rank: 0
        shard: {{mode: suffix, include_pattern: "*_000.tfrecord"}}
""")
    # This Python on the local connection: interpreter discovery may find a shim that fails.
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp"),
           "ANSIBLE_REMOTE_TEMP": str(tmp_path / "remote-tmp"), "ANSIBLE_STRATEGY": "linear", **env}
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}",
                           str(play)], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode != 0, proc.stdout[-3000:]
    out = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{"):])[0]
    result = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert SAS not in proc.stdout + proc.stderr
    return result


def test_the_module_runs_pipelined_on_the_local_connection(tmp_path):
    """The project's ansible.cfg turns pipelining on for every connection ([connection] pipelining)."""
    assert run_play(tmp_path)["msg"] == MISSING
    assert not (tmp_path / "remote-tmp").exists(), "the module payload was written to a file"


def test_pipelining_off_is_refused_in_one_sentence_before_anything_reaches_the_node(tmp_path):
    """The plugin turns nothing on: with pipelining off it refuses, naming the settings."""
    result = run_play(tmp_path, ANSIBLE_PIPELINING="false")
    assert result["msg"] == (
        "amlhpc.azureml.azcopy_stage carries a secret and runs only pipelined (module and arguments on the "
        "interpreter's stdin, never in a file), and pipelining is off for connection 'local': set "
        "ansible_pipelining: true (inventory or play vars) or pipelining = true in ansible.cfg's [connection] "
        "section."), result["msg"]
    assert not (tmp_path / "remote-tmp").exists() and not (tmp_path / "stage").exists()


def test_pipelining_from_the_play_vars_runs_the_module_without_a_file(tmp_path):
    """ansible_pipelining in the vars wins over the environment, as for any connection option."""
    result = run_play(tmp_path, play_vars={"ansible_pipelining": True}, ANSIBLE_PIPELINING="false")
    assert result["msg"] == MISSING
    assert not (tmp_path / "remote-tmp").exists(), "the module payload was written to a file"


def test_a_payload_kept_in_a_file_is_refused_before_the_module_runs(tmp_path):
    result = run_play(tmp_path, ANSIBLE_KEEP_REMOTE_FILES="1")
    assert result["msg"].startswith("amlhpc.azureml.azcopy_stage carries a secret and runs only pipelined")
    assert "ANSIBLE_KEEP_REMOTE_FILES" in result["msg"], result["msg"]
    assert not (tmp_path / "stage").exists() and not (tmp_path / "remote-tmp").exists()


def test_under_mitogen_the_module_runs_with_its_arguments_in_memory(tmp_path):
    ansible_mitogen = pytest.importorskip("ansible_mitogen")
    strategies = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    result = run_play(tmp_path, ANSIBLE_STRATEGY_PLUGINS=str(strategies), ANSIBLE_STRATEGY="mitogen_linear")
    assert result["msg"] == MISSING
