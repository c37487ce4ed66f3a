"""The ansible-core range: 2.18 through 2.21, said in meta/runtime.yml, refused below with one
sentence by the inventory plugins (while the inventory is read) and by site.yml's first play."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from amlhpc.core_range import CORE_FLOOR, REQUIRES_ANSIBLE, core_floor_error, core_version
from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("version", "expected"), [
    ("2.18.0", (2, 18)), ("2.21.5", (2, 21)), ("2.19.0rc1", (2, 19)), ("2.17.14", (2, 17)), (" 3.0.0", (3, 0))])
def test_core_version(version, expected):
    assert core_version(version) == expected


def test_a_version_string_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not an ansible-core version"):
        core_version("devel")


@pytest.mark.parametrize("version", ["2.18.0", "2.18.19", "2.20.10", "2.21.5", "2.22.0"])
def test_the_floor_and_above_pass(version):
    assert core_floor_error(version) is None


@pytest.mark.parametrize("version", ["2.17.14", "2.16.0", "2.9.27"])
def test_below_the_floor_one_sentence_names_the_floor_and_the_fix(version):
    msg = core_floor_error(version)
    assert msg.startswith(f"amlhpc.azureml needs ansible-core 2.18 or later and this is ansible-core {version}: ")
    assert "pip install 'ansible-core>=2.18,<2.22'" in msg
    assert msg.count(". ") == 0 and msg.endswith(".") and "\n" not in msg


def test_runtime_yml_the_preflight_play_and_the_code_agree():
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == REQUIRES_ANSIBLE == ">=2.18.0,<2.22.0"
    play = yaml.safe_load((ROOT / "playbooks" / "preflight.yml").read_text())[0]
    task = play["tasks"][0]
    assert task["ansible.builtin.assert"]["that"] == "ansible_version.full is version('%d.%d.0', '>=')" % CORE_FLOOR
    # the play's sentence is the code's, with the version templated in
    assert " ".join(task["ansible.builtin.assert"]["fail_msg"].split()) == core_floor_error("2.0.0").replace(
        "2.0.0", "{{ ansible_version.full }}")
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    assert site[0]["ansible.builtin.import_playbook"] == "preflight.yml"
    teardown = yaml.safe_load((ROOT / "playbooks" / "teardown.yml").read_text())
    assert teardown[0]["ansible.builtin.import_playbook"] == "preflight.yml"


def test_the_preflight_play_passes_on_this_core(tmp_path):
    """On the core of this venv (2.18 or 2.21 in make test) the check passes and runs nothing else."""
    res = subprocess.run([ansible_cli("ansible-playbook"), "playbooks/preflight.yml", "-i", "localhost,", "-c", "local"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Preflight | Stop on an ansible-core older than 2.18" in res.stdout
    assert "ok: [localhost]" in res.stdout
