"""gpu_clocks and nccl on the embedded local default: switched off, each ends after validating
its arguments, sends nothing to the node and writes nothing."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")


@pytest.mark.parametrize(("playbook", "line", "ok"), [
    # The role's argument check is inside its one task (rolespec_validate: false), so a role
    # that is off ends in the strategy before any host-task: the host is not in the recap.
    ("playbooks/gpu_clocks.yml", "GPU clocks | End here where gpu_clocks_enabled is false", 0),
    # the play's include_role, then the role's argument check
    ("playbooks/gpu_clocks_reset.yml", "GPU clocks | End the reset where gpu_clocks_enabled is false", 2),
    ("playbooks/nccl.yml", "NCCL | End here where nccl_enabled is false", 0),
])
def test_the_local_default_switches_them_off(playbook, line, ok):
    res = subprocess.run([ANSIBLE_PLAYBOOK, playbook, "--check", "--diff"], cwd=ROOT, capture_output=True,
                         text=True, timeout=180, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert line in res.stdout
    recap = res.stdout[res.stdout.index("PLAY RECAP"):]
    if ok:
        assert re.search(rf"^local-0\s+: ok={ok} +changed=0 +unreachable=0 +failed=0 +skipped=0 ", recap, re.M), \
            res.stdout
    else:
        assert not re.search(r"^(local-0|localhost)\s+:", recap, re.M), res.stdout
