"""nvme_raid in check mode on fresh disks: it reports the array it would build, as a change.

The disks are an ND96asr_v4's, recorded (lsblk and empty probes): check mode runs nothing
against them. The real build is tested in the qemu VM tier (tests/vm).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")
DATA = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "data" / "nvme"


def test_check_mode_on_fresh_disks_reports_the_array_it_would_build(tmp_path):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  children:\n    aml_nodes:\n      hosts:\n        n0:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
        "          ansible_become: false\n"
        "          aml_vm_size: Standard_ND96asr_v4\n")
    probes = {f"/dev/nvme{i}n1": {"wipefs": "", "blkid": "", "examine": ""} for i in range(8)}
    recorded = {"lsblk": (DATA / "ndv4-lsblk.json").read_text(), "probes": probes, "present": None}
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"nvme_raid_recorded": recorded}))
    # Recorded outputs are not this host's disks: the role plans on them and builds nothing.
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), str(ROOT / "playbooks" / "nvme_raid.yml"),
                          "--check", "--diff", "-e", f"@{extra}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    recap = re.search(r"^n0\s+: (.*)$", res.stdout.split("PLAY RECAP")[-1], re.M).group(1)
    assert "changed=1" in recap, res.stdout
    assert "would create /dev/md128: mdadm --create /dev/md128" in res.stdout
    assert "/dev/nvme0n1" in res.stdout and "/dev/nvme7n1" in res.stdout
    assert "mkfs.xfs" in res.stdout and "/mnt/resource_nvme" in res.stdout


def test_a_node_without_local_nvme_disks_is_read_with_one_shell_command_not_a_module_run(tmp_path):
    """playbooks/nvme_raid.yml on a node (the local connection) whose lsblk shows an NVMe disk
    without a device node, as lsblk does in a container: the action reads the node with one
    shell command and plans ``skip`` with no module run, the same plan and reason
    nvme_raid_info gives there (run beside it, ad hoc)."""
    import json
    import os

    fake = tmp_path / "bin"
    fake.mkdir()
    lsblk = {"blockdevices": [{"name": "nvme90n1", "path": "/dev/nvme90n1", "type": "disk", "size": 1 << 30,
                               "fstype": None, "pttype": None, "mountpoint": None,
                               "model": "Microsoft NVMe Direct Disk", "tran": "nvme", "serial": "s0"}]}
    (fake / "lsblk.json").write_text(json.dumps(lsblk))
    (fake / "lsblk").write_text(f'#!/bin/sh\ncase "$*" in *-J*) cat {fake}/lsblk.json;; *) echo /dev/nvme90n1;; esac\n')
    (fake / "lsblk").chmod(0o755)
    python = sys.executable  # .venv's, or ansible-test's own under `ansible-test units`
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"all": {"children": {"aml_nodes": {"hosts": {"n0": {
        "ansible_connection": "local", "ansible_python_interpreter": python, "ansible_become": False,
        "nvme_raid_enabled": True, "aml_vm_size": "Standard_ND96asr_v4"}}}}}}))
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_FORCE_COLOR="0")
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "playbooks/nvme_raid.yml", "-vvv", "-e", "ansible_become=false"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert re.search(r"^n0\s+: ok=2 +changed=0 ", res.stdout, re.M), res.stdout[-2000:]  # the role's check, the action
    assert not re.findall(rf"EXEC /bin/sh -c '?{re.escape(python)}\b", res.stdout)  # no module ran (pipelined or not)
    reason = re.search(r'"reason": "([^"]*)"', res.stdout).group(1)
    assert reason.startswith("no local NVMe disks found (/dev/nvme90n1: no device node /dev/nvme90n1 on this host")

    module = subprocess.run([ansible_cli("ansible"), "-i", str(inv), "n0", "-m", "amlhpc.azureml.nvme_raid_info",
                             "-a", "vm_size=Standard_ND96asr_v4"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=180, check=False)
    assert module.returncode == 0, module.stdout[-3000:]
    answer = json.loads(module.stdout[module.stdout.index("{"):])
    assert (answer["action"], answer["reason"]) == ("skip", reason)
