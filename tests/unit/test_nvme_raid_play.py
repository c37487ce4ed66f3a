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
