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
    # Ansible's argument check of the role (on the controller, nothing sent to the node), then
    # the role ends in the strategy: one ok per host, nothing else.
    ("playbooks/gpu_clocks.yml", "GPU clocks | End here where gpu_clocks_enabled is false", 1),
    # the play's include_role, then the role's argument check
    ("playbooks/gpu_clocks_reset.yml", "GPU clocks | End the reset where gpu_clocks_enabled is false", 2),
    ("playbooks/nccl.yml", "NCCL | End here where nccl_enabled is false", 1),
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


def test_a_pinned_node_is_read_with_one_shell_command_not_a_module_run(tmp_path):
    """playbooks/gpu_clocks.yml on a node (the local connection) with the recorded A100 GPUs
    of tests/fixtures/nvidia-smi: the first run pins them with the module; on the second run
    the action reads them with one shell command, no Python on the node, and reports what the
    module would (changed=0, each GPU already at the target)."""
    import json
    import os
    import shutil
    import sys

    fixtures = ROOT / "tests" / "fixtures" / "nvidia-smi"
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(fixtures / "a100_ndv4.query.csv", state / "state.csv")
    shutil.copy(fixtures / "a100_ndv4.supported.csv", state / "supported.csv")
    python = sys.executable  # .venv's, or ansible-test's own under `ansible-test units`
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"all": {"children": {"aml_nodes": {"hosts": {"gpu-0": {
        "ansible_connection": "local", "ansible_python_interpreter": python, "gpu_clocks_become": False,
        "gpu_clocks_nvidia_smi": str(fixtures / "fake-nvidia-smi")}}}}}}))
    env = dict(os.environ, FAKE_NVIDIA_SMI_DIR=str(state), ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_FORCE_COLOR="0")

    def play(*extra: str) -> subprocess.CompletedProcess:
        res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "playbooks/gpu_clocks.yml", "-vvv", *extra], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=180, check=False)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        return res

    def python_runs(out: str) -> int:
        # The module pipelined (the interpreter alone) or from a file ('python .../AnsiballZ_...').
        return len(re.findall(rf"EXEC /bin/sh -c '?{re.escape(python)}\b", out))

    first = play()
    assert re.search(r"^gpu-0\s+: ok=2 +changed=1 ", first.stdout, re.M), first.stdout[-2000:]
    assert python_runs(first.stdout) == 1  # the module, after the read
    second = play("--diff")
    assert re.search(r"^gpu-0\s+: ok=2 +changed=0 ", second.stdout, re.M), second.stdout[-2000:]
    assert python_runs(second.stdout) == 0
    assert second.stdout.count('"reason": "already at the target clocks"') == 8  # each GPU's result
    calls = [json.loads(line) for line in (state / "calls.log").read_text().splitlines()]
    assert sum("-ac" in c for c in calls) == 8  # all on the first run
