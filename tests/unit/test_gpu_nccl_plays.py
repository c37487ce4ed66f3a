"""gpu_clocks and nccl on the embedded local default: each skips with one line, writes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


@pytest.mark.parametrize(("playbook", "line"), [
    ("playbooks/gpu_clocks.yml", "gpu_clocks skipped: local profile (no root, no GPU to pin)"),
    ("playbooks/gpu_clocks_reset.yml", "gpu_clocks reset skipped: local profile (no root, no GPU)"),
    ("playbooks/nccl.yml", "nccl skipped: local profile (writes nothing under /etc; jobs run with NCCL defaults)"),
])
def test_local_profile_skips_with_a_reason(playbook, line):
    res = subprocess.run([ANSIBLE_PLAYBOOK, playbook, "--check", "--diff"], cwd=ROOT, capture_output=True,
                         text=True, timeout=180, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert line in res.stdout
    assert "changed=0" in res.stdout and "failed=0" in res.stdout
