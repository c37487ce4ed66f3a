"""A failing stage or submit says why (redacted), and never shows the secret.

The modules mark their secrets no_log and redact their messages; a task-level no_log on
top hid every failure behind "the output has been hidden". These run the real playbooks
on the local profile, at -vvv, with a visibly fake SAS, against causes that fail early.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

from ansible_cli import ansible_cli
from project_copy import project_env

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")
SIG = "FAKEsignatureNOTREAL0123456789abcdef"
SAS = f"sv=2024-11-04&ss=b&srt=co&sp=rl&se=2030-01-01T00%3A00%3A00Z&sig={SIG}%3D"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def play(project: Path, playbook: str, extra: dict) -> subprocess.CompletedProcess:
    """The playbook on the local default, in a project of the test's own (its report page, facts
    and outputs there, never in the checkout's)."""
    env = project_env(project, ANSIBLE_STDOUT_CALLBACK="default")
    return subprocess.run([ANSIBLE_PLAYBOOK, playbook, "-vvv", "-e", json.dumps(extra)], cwd=project, env=env,
                          capture_output=True, text=True, timeout=240, check=False)


def test_a_failing_stage_plan_shows_its_reason_and_not_the_sas(project):
    res = play(project, "playbooks/stage.yml", {"local_blob_port": closed_port(), "stage_sas": SAS})
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "has been hidden" not in out, res.stdout[-3000:]
    assert "Stage | Plan each node's shard" in res.stdout and "127.0.0.1" in res.stdout
    assert "Connection refused" in out or "Failed to establish a new connection" in out, res.stdout[-3000:]
    assert SIG not in out


def test_a_failing_submit_shows_its_reason_and_not_the_secret(project, tmp_path):
    res = play(project, "playbooks/submit.yml", {"submit_train_args": {"token": f"sp=r&sig={SIG}"},
                                                 "submit_output_dir": str(tmp_path / "out"),
                                                 "submit_data_dir": str(tmp_path)})
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "has been hidden" not in out, res.stdout[-3000:]
    assert "train_args.token looks like a SAS token" in out or "token looks like a SAS token" in out, res.stdout[-3000:]
    assert SIG not in out


def test_the_old_aml_job_sas_name_keeps_the_secret_out_of_the_log(project, tmp_path):
    # The deprecation path copies aml_job_sas into submit_sas: named, never shown.
    res = play(project, "playbooks/submit.yml", {"aml_job_sas": SAS, "aml_job_account": "mydata",
                                                 "aml_job_train_args": {"token": f"sp=r&sig={SIG}"},
                                                 "aml_job_output_dir": str(tmp_path / "out")})
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "aml_job_sas -> submit_sas" in res.stdout, res.stdout[-3000:]
    assert "token looks like a SAS token" in out, res.stdout[-3000:]
    assert SIG not in out


def test_a_sas_with_a_line_break_is_refused_without_its_signature(project):
    """Issue 40 item 5 (red on 2.1.0): a SAS pasted with a line break inside its signature is
    refused, and the refusal shows no part of the signature, before or after the break."""
    head, tail = "BROKENsigHEAD0123456789", "abcdefTAILpart9876543210zz"
    sas = f"sv=2024-11-04&ss=b&srt=co&sp=rl&se=2030-01-01T00%3A00%3A00Z&sig={head}\n{tail}%3D"
    res = play(project, "playbooks/stage.yml", {"local_blob_port": closed_port(), "stage_sas": sas, "stage_list": True})
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "line break" in out, res.stdout[-3000:]
    for part in (head, tail, head[:12], tail[-12:]):
        assert part not in out, part
