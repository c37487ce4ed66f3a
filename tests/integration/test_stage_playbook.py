"""playbooks/stage.yml on the local default against Azurite: plan, install check, stage, rerun."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from staging_helpers import ROOT, assert_identical_subset, upload_dataset

from amlhpc.cosmoflow_data import generate


@pytest.fixture(scope="module")
def pb_dataset(azurite, tmp_path_factory):
    base = tmp_path_factory.mktemp("pb")
    generate(str(base / "raw"), train_universes=1, val_universes=1, cube=8)
    return upload_dataset(azurite, base / "raw", base / "gz", "pbdata", "cosmoflow/v07")


def run_playbook(playbook: str, extra: dict, env_extra: dict, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_STDOUT_CALLBACK="default", **env_extra)
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), str(ROOT / playbook), "-e", json.dumps(extra), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)


def recap(out: str) -> dict[str, int]:
    m = re.search(r"local-0\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out)
    assert m, out[-3000:]
    return {"ok": int(m[1]), "changed": int(m[2]), "failed": int(m[4])}


def test_stage_playbook_stages_reruns_clean_and_never_shows_the_sas(azurite, pb_dataset, tmp_path):
    sas = azurite.container_sas(pb_dataset.container, "rl")
    signature = re.search(r"sig=([^&]+)", sas)[1]
    stage_dir = tmp_path / "stage"
    extra = {"stage_account_url": azurite.endpoint, "stage_container": pb_dataset.container,
             "stage_prefix": pb_dataset.prefix, "stage_mode": "balanced", "stage_dir": str(stage_dir),
             "stage_sas": "{{ lookup('ansible.builtin.env', 'TEST_STAGE_SAS') }}"}
    env = {"TEST_STAGE_SAS": sas}

    check = run_playbook("playbooks/stage.yml", extra, env, "--check")
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    assert not stage_dir.joinpath(".amlhpc-staged").exists()

    first = run_playbook("playbooks/stage.yml", extra, env, "-v")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert recap(first.stdout)["changed"] >= 1
    assert "balanced mode: 128 files" in first.stdout and "imbalance 1.0" in first.stdout
    assert "128 files" in first.stdout and "0 already there" in first.stdout
    assert sorted(assert_identical_subset(stage_dir, pb_dataset)) == pb_dataset.names

    second = run_playbook("playbooks/stage.yml", extra, env)
    assert second.returncode == 0, second.stdout[-3000:]
    assert recap(second.stdout)["changed"] == 0
    for out in (check, first, second):
        assert signature not in out.stdout + out.stderr


def test_stage_playbook_refuses_an_expired_sas_in_one_sentence(azurite, pb_dataset, tmp_path):
    expired = azurite.container_sas(pb_dataset.container, "rl", hours=-0.05, start_offset_hours=-1)
    extra = {"stage_account_url": azurite.endpoint, "stage_container": pb_dataset.container,
             "stage_prefix": pb_dataset.prefix, "stage_dir": str(tmp_path / "s"),
             "stage_sas": "{{ lookup('ansible.builtin.env', 'TEST_STAGE_SAS') }}", "amlhpc_no_log": False}
    out = run_playbook("playbooks/stage.yml", extra, {"TEST_STAGE_SAS": expired})
    assert out.returncode != 0
    assert re.search(r"The SAS token expired at \d{4}-\d\d-\d\d \d\d:\d\d UTC: generate a new one \(read and list\) "
                     r"and run again\.", out.stdout), out.stdout[-3000:]


def test_a_rerun_costs_each_node_at_most_three_host_tasks(azurite, pb_dataset, tmp_path):
    """Controller CPU goes per host-task (README "Controller cost"): on a run with nothing to
    do the role is one check-and-probe task, the skipped install and the stage per node; the
    plan and the report table are run once."""
    sas = azurite.container_sas(pb_dataset.container, "rl")
    python = os.path.realpath(str(ROOT / ".venv" / "bin" / "python"))
    inv = tmp_path / "inv.yml"
    hosts = "".join(f"        local-{i}:\n          aml_node_rank: {i}\n          stage_dir: {tmp_path / f's{i}'}\n"
                    for i in range(2))
    inv.write_text("all:\n  vars:\n    ansible_connection: local\n"
                   f"    ansible_python_interpreter: {python}\n    stage_become: false\n"
                   f"    stage_azcopy_install: false\n    stage_azcopy_path: {ROOT / '.tools' / 'bin' / 'azcopy'}\n"
                   "  children:\n    aml_nodes:\n      hosts:\n" + hosts)
    extra = {"stage_account_url": azurite.endpoint, "stage_container": pb_dataset.container,
             "stage_prefix": pb_dataset.prefix, "stage_mode": "balanced",
             "stage_sas": "{{ lookup('ansible.builtin.env', 'TEST_STAGE_SAS') }}"}
    env = {"TEST_STAGE_SAS": sas}
    first = run_playbook("playbooks/stage.yml", extra, env, "-i", str(inv))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    second = run_playbook("playbooks/stage.yml", extra, env, "-i", str(inv))
    assert second.returncode == 0, second.stdout[-3000:]
    tail = second.stdout[second.stdout.index("PLAY RECAP"):]
    counts = {}
    for host in ("local-0", "local-1"):
        m = re.search(rf"^{host}\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0\s+skipped=(\d+)", tail, re.M)
        assert m, tail
        counts[host] = (int(m[1]) + int(m[3]), int(m[2]))
    # local-1 runs the role's tasks only; local-0 also the run-once ones (plan, show, report)
    assert counts["local-1"][0] <= 3 and counts["local-0"][0] <= counts["local-1"][0] + 3, counts
    assert counts["local-0"][1] == counts["local-1"][1] == 0, counts
    # each node's line, in one table
    for i in range(2):
        assert re.search(rf"local-{i}: \d+ files, 0 fetched .*GB on disk.*already there", second.stdout), \
            second.stdout[-3000:]
    assert re.search(r"sig=", second.stdout + second.stderr) is None
