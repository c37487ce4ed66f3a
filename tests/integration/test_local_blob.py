"""The local default's Azurite lives exactly as long as the ansible-playbook run that started it.

The report play stops it at the end of a good run; a run that fails earlier never reaches
that play, and Azurite was left running with its pid file. It must be gone either way.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

from conftest import free_port
from project_copy import project_env

ROOT = Path(__file__).resolve().parents[2]


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


def test_azurite_is_stopped_when_a_later_play_fails(tmp_path, project):
    port, blob_dir = free_port(), tmp_path / "azurite"
    playbook = tmp_path / "fails.yml"
    playbook.write_text(
        "---\n"
        f"- name: Start the local blob store\n  ansible.builtin.import_playbook: {ROOT}/playbooks/local_blob.yml\n"
        "- name: A later phase fails\n  hosts: localhost\n  connection: local\n  gather_facts: false\n"
        "  tasks:\n    - name: Probe that Azurite answers, then fail\n"
        "      ansible.builtin.wait_for: {host: 127.0.0.1, port: '{{ local_blob_port }}', timeout: 5}\n"
        "    - name: Fail as a stage or submit failure would\n"
        "      ansible.builtin.fail: {msg: a later phase failed}\n")
    env = project_env(project, ANSIBLE_STDOUT_CALLBACK="default")
    extra = {"local_blob_port": port, "local_blob_dir": str(blob_dir)}
    res = subprocess.run([str(ROOT / ".venv" / "bin" / "ansible-playbook"), str(playbook), "-e", json.dumps(extra)],
                         cwd=project, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert res.returncode != 0 and "a later phase failed" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    assert "Probe that Azurite answers" in res.stdout and "ok: [localhost]" in res.stdout
    pidfile = blob_dir / "azurite.pid"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (pidfile.exists() or _answers(port)):
        time.sleep(0.25)
    leftover = pidfile.read_text().strip() if pidfile.exists() else ""
    try:
        assert not pidfile.exists(), f"Azurite's pid file is left after the failed run ({leftover})"
        assert not _answers(port), f"Azurite still answers on port {port} after the failed run"
    finally:
        if leftover.isdigit() and _alive(int(leftover)):
            os.kill(int(leftover), 15)
