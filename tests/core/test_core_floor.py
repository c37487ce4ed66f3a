"""Below the supported range the run stops at once, with one sentence naming the floor.

Runs the real ansible-core 2.17 (``.venv-core217``, built by ``.ci/bootstrap core217``, as
``make test-oldest-core`` does) on this checkout: the local default (site.yml), the teardown,
and site.yml on an inventory our plugins do not read (a host list), where the first play
refuses instead. Bare ansible-core 2.17 has none of the collections the playbooks name, so
the last case lends it those of the control venv's ``ansible`` package, as an older ``ansible``
package would bring its own."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OLD = ROOT / ".venv-core217" / "bin"
SENTENCE = re.compile(r"amlhpc\.azureml needs ansible-core 2\.18 or later and this is ansible-core 2\.17\.\d+: "
                      r"install a supported one \(pip install 'ansible-core>=2\.18,<2\.22', or the ansible package "
                      r"11 to 14\) and run again\.")


def run_old(*argv: str, **extra: str) -> subprocess.CompletedProcess:
    if not (OLD / "ansible-playbook").is_file():
        pytest.fail(f"{OLD}/ansible-playbook is missing: run .ci/bootstrap core217 (make test-oldest-core does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", PATH=f"{OLD}:{env['PATH']}", **extra)
    return subprocess.run([str(OLD / "ansible-playbook"), *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def one_line(text: str) -> str:
    """Ansible wraps its warnings and errors at the terminal width: joined again."""
    return " ".join(text.split())


@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/teardown.yml"])
def test_our_inventory_refuses_ansible_core_2_17_before_any_play(playbook):
    res = run_old(playbook)
    out = one_line(res.stdout + res.stderr)
    assert res.returncode != 0, out[-3000:]
    assert SENTENCE.search(out), out[-3000:]
    assert "PLAY [" not in res.stdout and "Traceback" not in out


def test_any_other_inventory_is_refused_by_the_first_play():
    bundled = sorted(ROOT.glob(".venv/lib/python3*/site-packages"))
    assert bundled and (bundled[0] / "ansible_collections" / "community").is_dir(), "make setup builds .venv"
    res = run_old("site.yml", "-i", "localhost,", "-c", "local",
                  ANSIBLE_COLLECTIONS_PATH=f"{ROOT / '.cache' / 'collections'}:{bundled[0]}")
    out = one_line(res.stdout + res.stderr)
    assert res.returncode != 0, out[-3000:]
    assert SENTENCE.search(out), out[-3000:]
    plays = re.findall(r"^PLAY \[(.*?)\]", res.stdout, re.M)
    assert plays == ["Check the controller"], res.stdout[-3000:]
    assert "Traceback" not in out
