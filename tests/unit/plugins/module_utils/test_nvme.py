"""nvme: discovery, the empty-disk guard and the plan, on recorded and NDv4-shaped outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amlhpc.nodes import nvme

DATA = Path(__file__).parent / "data" / "nvme"
NVME8 = [f"/dev/nvme{i}n1" for i in range(8)]


def text(name: str) -> str:
    return (DATA / name).read_text()


def ndv4(fixture: str = "ndv4-lsblk.json") -> list[dict]:
    return nvme.parse_lsblk(text(fixture))


def clean_probes(paths=NVME8) -> dict:
    return {p: {"wipefs": text("qemu-empty-wipefs.json"), "blkid": "", "examine": ""} for p in paths}


def absent(device="/dev/md128") -> dict:
    return nvme.array_from_detail(device, "")


def decide(devices, probes, array=None, expected=8, force=False, vm_size="Standard_ND96asr_v4"):
    cands, excl = nvme.discover(devices)
    return nvme.plan(cands, excl, probes, array or absent(), expected, force=force, vm_size=vm_size)


@pytest.mark.parametrize("fixture", ["ndv4-lsblk.json", "ndv4-lsblk-focal.json"])
def test_ndv4_discovery_keeps_the_eight_local_disks_and_never_the_os_disk(fixture):
    cands, excl = nvme.discover(ndv4(fixture))
    assert [d["path"] for d in cands] == NVME8
    assert all(d["size"] == 960197124096 for d in cands)
    assert {e["path"]: e["reason"] for e in excl} == {"/dev/sda": "not NVMe", "/dev/sdb": "not NVMe"}


def test_nvme_os_disk_and_remote_disks_are_excluded_with_the_reason():
    devices = nvme.parse_lsblk(json.dumps({"blockdevices": [
        {"name": "nvme0n1", "type": "disk", "tran": "nvme", "model": "MSFT NVMe Accelerator v1.0",
         "children": [{"name": "nvme0n1p1", "type": "part", "mountpoints": ["/"]}]},
        {"name": "nvme1n1", "type": "disk", "tran": "nvme", "model": "MSFT NVMe Accelerator v1.0"},
        {"name": "nvme2n1", "type": "disk", "tran": "nvme", "model": "Microsoft NVMe Direct Disk v2"},
        {"name": "nvme10n1", "type": "disk", "tran": "nvme", "model": "Microsoft NVMe Direct Disk v2"},
        {"name": "loop0", "type": "loop"},
    ]}))
    cands, excl = nvme.discover(devices, present=["/dev/nvme2n1"])
    assert [d["path"] for d in cands] == ["/dev/nvme2n1"]
    assert excl == [
        {"path": "/dev/nvme0n1", "reason": "OS disk (holds /)"},
        {"path": "/dev/nvme1n1", "reason": "remote disk (model 'MSFT NVMe Accelerator v1.0')"},
        {"path": "/dev/nvme10n1", "reason": "no device node /dev/nvme10n1 on this host"},
    ]


def test_candidates_sort_in_natural_order():
    devices = nvme.parse_lsblk(json.dumps({"blockdevices": [
        {"name": n, "type": "disk", "tran": "nvme"} for n in ["nvme10n1", "nvme2n1", "nvme1n1"]]}))
    assert [d["name"] for d in nvme.discover(devices)[0]] == ["nvme1n1", "nvme2n1", "nvme10n1"]


def test_clean_ndv4_plans_create_with_the_mdadm_command_line():
    got = decide(ndv4(), clean_probes())
    assert got["action"] == "create"
    assert got["reason"].startswith("creating /dev/md128: RAID0 of 8 empty NVMe disks (/dev/nvme0n1,")
    assert nvme.mdadm_create_argv("/dev/md128", got["devices"], 256) == [
        "mdadm", "--create", "/dev/md128", "--run", "--level=0", "--metadata=1.2", "--raid-devices=8",
        "--chunk=256", *NVME8]


def test_expected_count_is_looked_up_case_insensitively_and_can_be_overridden():
    counts = nvme.DEFAULT_EXPECTED_COUNTS
    assert nvme.expected_count("STANDARD_ND96ASR_V4", counts) == 8
    assert nvme.expected_count("Standard_ND96amsr_A100_v4", counts) == 8
    assert nvme.expected_count("Standard_ND40rs_v2", counts) == 0
    assert nvme.expected_count("Standard_D2s_v3", counts) is None
    assert nvme.expected_count(None, counts) is None
    assert nvme.expected_count("Standard_ND96asr_v4", counts, override=6) == 6


def test_count_mismatch_is_refused_naming_what_was_found():
    devices = [d for d in ndv4() if d["name"] != "nvme5n1"]
    got = decide(devices, clean_probes())
    assert got["action"] == "refuse"
    assert "found 7 local NVMe disk(s) (/dev/nvme0n1" in got["reason"]
    assert "but a Standard_ND96asr_v4 node should have 8" in got["reason"]
    assert "/dev/nvme5n1" not in got["reason"]


def test_no_nvme_disks_skips_with_one_line():
    devices = [d for d in ndv4() if not d["name"].startswith("nvme")]
    got = decide(devices, {}, expected=None, vm_size=None)
    assert got["action"] == "skip"
    assert got["reason"] == ("no local NVMe disks found (/dev/sda: not NVMe; /dev/sdb: not NVMe): "
                             "nothing to do")
    assert "\n" not in got["reason"]
    sized = decide(devices, {}, expected=0, vm_size="Standard_ND40rs_v2")
    assert sized["action"] == "skip"
    assert sized["reason"].endswith("; a Standard_ND40rs_v2 node has none): nothing to do")
    # An NDv4 without NVMe disks is skipped too, but the line says something is off.
    odd = decide(devices, {}, expected=8)
    assert odd["action"] == "skip"
    assert "a Standard_ND96asr_v4 node should have 8, check the VM" in odd["reason"]


def test_a_disk_with_a_file_system_is_refused_and_named():
    probes = clean_probes()
    probes["/dev/nvme3n1"] = {
        "blkid": "DEVNAME=/dev/nvme3n1\nUUID=0b7f6c2e-1111-4e0f-9d61-2a4c3b1c5d9e\nLABEL=scratch\n"
                 "VERSION=1.0\nTYPE=ext4\nUSAGE=filesystem\n",
        "wipefs": json.dumps({"signatures": [{"device": "nvme3n1", "offset": "0x438", "type": "ext4",
                                              "uuid": "0b7f6c2e-1111-4e0f-9d61-2a4c3b1c5d9e",
                                              "label": "scratch"}]}),
        "examine": ""}
    got = decide(ndv4(), probes)
    assert got["action"] == "refuse"
    assert got["problems"] == ["/dev/nvme3n1 holds a file system "
                               "(ext4, UUID 0b7f6c2e-1111-4e0f-9d61-2a4c3b1c5d9e, label 'scratch')"]
    assert "refusing to build /dev/md128: 1 of 8 NVMe disks are not empty" in got["reason"]
    assert "nvme_raid_force: true" in got["reason"]
    forced = decide(ndv4(), probes, force=True)
    assert forced["action"] == "create"
    assert forced["wipe"] == ["/dev/nvme3n1"]


def test_partition_table_raid_metadata_and_stray_signatures_are_each_named():
    devices = ndv4()
    nv1 = next(d for d in devices if d["name"] == "nvme1n1")
    nv1["pttype"] = "gpt"
    nv1["children"] = [{"name": "nvme1n1p1", "path": "/dev/nvme1n1p1", "type": "part", "fstype": "xfs",
                        "pttype": "gpt", "mountpoints": [], "children": []}]
    probes = clean_probes()
    probes["/dev/nvme2n1"] = {"blkid": text("qemu-member-blkid.txt").replace("nvme0n1", "nvme2n1"),
                              "examine": text("qemu-member-examine.txt"),
                              "wipefs": text("qemu-member-wipefs.json")}
    probes["/dev/nvme4n1"] = {"blkid": "", "examine": "",
                              "wipefs": json.dumps({"signatures": [{"offset": "0x218", "type": "LVM2_member"}]})}
    got = decide(devices, probes)
    assert got["action"] == "refuse"
    assert got["problems"] == [
        "/dev/nvme1n1 has a gpt partition table with partitions /dev/nvme1n1p1",
        "/dev/nvme2n1 carries RAID metadata (level raid0, array UUID c6781d55:dc75a956:d03fd9db:a0b506b5, "
        "name 'amlhpc-vm:128')",
        "/dev/nvme4n1 has a signature of LVM2_member at offset 0x218",
    ]


def test_mounted_disks_are_refused_even_with_force():
    devices = ndv4()
    nv6 = next(d for d in devices if d["name"] == "nvme6n1")
    nv6["fstype"] = "xfs"
    nv6["mountpoints"] = ["/data"]
    got = decide(devices, clean_probes(), force=True)
    assert got["action"] == "refuse"
    assert "/dev/nvme6n1 holds a file system (xfs) and is mounted (at /data)" in got["reason"]
    assert "not even with nvme_raid_force" in got["reason"]


def _with_md(devices, md="md128", level="raid0", mount=None):
    for d in devices:
        if d["name"].startswith("nvme"):
            d["fstype"] = "linux_raid_member"
            d["children"] = [{"name": md, "path": f"/dev/{md}", "type": level, "fstype": "xfs",
                              "mountpoints": [mount] if mount else [], "children": []}]
    return devices


def member_probes() -> dict:
    return {p: {"blkid": text("qemu-member-blkid.txt"), "examine": text("qemu-member-examine.txt"),
                "wipefs": text("qemu-member-wipefs.json")} for p in NVME8}


def test_an_existing_array_of_the_same_disks_is_kept():
    array = nvme.array_from_detail("/dev/md128", text("qemu-md128-detail.txt"))
    assert array["members"] == NVME8 and array["level"] == "raid0" and array["raid_devices"] == 8
    got = decide(_with_md(ndv4(), mount="/mnt/resource_nvme"), member_probes(), array=array)
    assert got["action"] == "exists"
    assert got["reason"] == "/dev/md128 is already a RAID0 of the 8 NVMe disks"
    assert got["array_device"] == "/dev/md128"


def test_an_array_that_came_back_under_another_name_is_kept_under_that_name():
    got = decide(_with_md(ndv4(), md="md127"), member_probes())
    assert got["action"] == "exists"
    assert got["array_device"] == "/dev/md127"
    assert "(assembled as /dev/md127, not /dev/md128)" in got["reason"]


def test_a_different_running_array_is_refused():
    got = decide(_with_md(ndv4(), md="md0", level="raid1"), member_probes())
    assert got["action"] == "refuse"
    assert "/dev/nvme0n1 carries RAID metadata" in got["reason"]
    assert "and is in the running array /dev/md0" in got["reason"]
    array = nvme.array_from_detail("/dev/md128", "MD_LEVEL=raid1\nMD_DEVICES=2\n"
                                                 "MD_DEVICE_dev_sdc_DEV=/dev/sdc\nMD_DEVICE_dev_sdd_DEV=/dev/sdd\n")
    other = decide(ndv4(), clean_probes(), array=array)
    assert other["action"] == "refuse"
    assert other["reason"].startswith("/dev/md128 already exists as raid1 of /dev/sdc, /dev/sdd")


def test_a_stopped_array_of_all_the_disks_is_assembled_not_rebuilt():
    devices = ndv4()
    for d in devices:
        if d["name"].startswith("nvme"):
            d["fstype"] = "linux_raid_member"
    got = decide(devices, member_probes())
    assert got["action"] == "assemble"
    assert "c6781d55:dc75a956:d03fd9db:a0b506b5" in got["reason"]
    # Seven of eight members is not "the same array": refused, not assembled.
    probes = member_probes()
    probes["/dev/nvme7n1"] = clean_probes()["/dev/nvme0n1"]
    got = decide(devices, probes)
    assert got["action"] == "refuse"


def test_parsers_accept_empty_outputs():
    assert nvme.parse_lsblk("") == []
    assert nvme.parse_wipefs("") == []
    assert nvme.parse_wipefs(text("qemu-empty-wipefs.json")) == []
    assert nvme.parse_export(None) == {}
    assert nvme.array_from_detail("/dev/md128", None)["exists"] is False


# ---------------------------------------------------------------------------------------
# The build's own decisions (the nvme_raid action)

def test_check_mode_names_the_array_it_would_build():
    from amlhpc.nodes.nvme import would_build_message
    state = {"action": "create", "create_argv": ["mdadm", "--create", "/dev/md128", "--level=0", "/dev/nvme0n1"],
             "devices": ["/dev/nvme0n1"], "wipe": ["/dev/nvme0n1"]}
    assert would_build_message(state, "/dev/md128", "xfs", "/mnt/resource_nvme", "/etc/mdadm/mdadm.conf") == (
        "would create /dev/md128: mdadm --create /dev/md128 --level=0 /dev/nvme0n1; wipefs --all /dev/nvme0n1; "
        "then mkfs.xfs on it (when it holds none), mount at /mnt/resource_nvme (fstab, nofail) and record it in "
        "/etc/mdadm/mdadm.conf")
    assemble = dict(state, action="assemble", wipe=[], devices=["/dev/nvme0n1", "/dev/nvme1n1"])
    assert would_build_message(assemble, "/dev/md128", "ext4", "/m", "/c").startswith(
        "would assemble /dev/md128: mdadm --assemble /dev/md128 /dev/nvme0n1 /dev/nvme1n1; then mkfs.ext4")


@pytest.mark.parametrize(("given", "fstab"), [
    ("defaults,noatime", "defaults,noatime,nofail"),
    ("nofail,noatime", "nofail,noatime"),
    ("", "nofail"),
    ("defaults,,noatime,", "defaults,noatime,nofail"),
])
def test_mount_options_always_carry_nofail(given, fstab):
    from amlhpc.nodes.nvme import mount_options
    assert mount_options(given) == fstab


def test_mdadm_conf_line_matches_the_arrays_line_under_any_name():
    import re as _re
    from amlhpc.nodes.nvme import mdadm_conf_line
    got = mdadm_conf_line("/dev/md128", "0a1b2c3d:4e5f6a7b:8c9d0e1f:2a3b4c5d")
    assert got["line"] == "ARRAY /dev/md128 metadata=1.2 UUID=0a1b2c3d:4e5f6a7b:8c9d0e1f:2a3b4c5d"
    assert _re.match(got["regexp"], "ARRAY /dev/md/127 metadata=1.2 name=x UUID=0a1b2c3d:4e5f6a7b:8c9d0e1f:2a3b4c5d")
    assert not _re.match(got["regexp"], "ARRAY /dev/md127 metadata=1.2 UUID=ffffffff:4e5f6a7b:8c9d0e1f:2a3b4c5d")
