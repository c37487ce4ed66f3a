"""The nvme_raid_info module: the commands it runs and what it returns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_compat import patch_module_args

ROOT = Path(__file__).resolve().parents[4]
DATA = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "data" / "nvme"

import nvme_raid_info  # noqa: E402  (conftest puts plugins/modules on sys.path)


def run(capsys, args: dict) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        nvme_raid_info.main()
    return json.loads(capsys.readouterr().out)


def test_probes_each_candidate_read_only(monkeypatch, capsys):
    lsblk = (DATA / "ndv4-lsblk.json").read_text()
    calls: list[list[str]] = []

    def fake_run(self, argv, **_kw):
        calls.append(list(argv))
        if argv[0] == "lsblk":
            return 0, lsblk, ""
        if argv[0] == "wipefs":
            return 0, (DATA / "qemu-empty-wipefs.json").read_text(), ""
        if argv[0] == "blkid":
            return 2, "", ""
        return 1, "", "mdadm: No md superblock detected"

    monkeypatch.setattr(nvme_raid_info.AnsibleModule, "run_command", fake_run)
    monkeypatch.setattr(nvme_raid_info.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/sbin/mdadm")
    monkeypatch.setattr(nvme_raid_info.os.path, "exists", lambda p: p.startswith("/dev/nvme") or p == "/dev/sda")
    out = run(capsys, {"vm_size": "STANDARD_ND96ASR_V4", "chunk_kib": 512})
    assert out["changed"] is False
    assert out["action"] == "create", out
    assert out["expected_count"] == 8
    assert out["create_argv"][:8] == ["mdadm", "--create", "/dev/md128", "--run", "--level=0",
                                      "--metadata=1.2", "--raid-devices=8", "--chunk=512"]
    assert calls[0][:3] == ["lsblk", "-J", "-b"]
    probed = sorted({c[-1] for c in calls[1:]})
    assert probed == [f"/dev/nvme{i}n1" for i in range(8)]
    assert {tuple(c[:-1]) for c in calls[1:]} == {
        ("wipefs", "--no-act", "--json"), ("blkid", "-p", "-o", "export"), ("/sbin/mdadm", "--examine", "--export")}
    # /dev/md128 does not exist: no --detail call; nothing that writes was run.
    assert not any("--detail" in c or "--create" in c for c in calls)


def test_recorded_outputs_give_the_refusal(capsys):
    probes = {f"/dev/nvme{i}n1": {"wipefs": "", "blkid": "", "examine": ""} for i in range(8)}
    probes["/dev/nvme3n1"]["blkid"] = "TYPE=xfs\nUUID=5d1f0e4c-0000-4000-8000-000000000003\n"
    out = run(capsys, {"recorded": {"lsblk": (DATA / "ndv4-lsblk-focal.json").read_text(), "probes": probes},
                       "expected_counts": {"Standard_ND96asr_v4": 8}, "vm_size": "Standard_ND96asr_v4"})
    assert out["action"] == "refuse"
    assert out["problems"] == ["/dev/nvme3n1 holds a file system (xfs, UUID 5d1f0e4c-0000-4000-8000-000000000003)"]


def test_expected_count_option_overrides_the_table(capsys):
    probes = {f"/dev/nvme{i}n1": {} for i in range(8)}
    out = run(capsys, {"recorded": {"lsblk": (DATA / "ndv4-lsblk.json").read_text(), "probes": probes},
                       "vm_size": "Standard_ND96asr_v4", "expected_count": 4})
    assert out["action"] == "refuse"
    assert "found 8 local NVMe disk(s)" in out["reason"] and "should have 4" in out["reason"]
