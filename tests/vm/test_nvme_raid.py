"""nvme_raid for real: a qemu guest with eight emulated NVMe disks (-device nvme) and the
Debian kernel's md driver. The role runs over SSH exactly as it would on an ND96asr_v4."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .conftest import VM, recap

PLAYBOOK = "playbooks/nvme_raid.yml"
MEMBERS = [f"/dev/nvme{i}n1" for i in range(8)]
CANARY = "CosmoFlow shard 0042: keep me\n"


@pytest.fixture(scope="module")
def built(vm_factory) -> tuple[VM, subprocess.CompletedProcess]:
    vm = vm_factory(name="nvme-built")
    return vm, vm.playbook(PLAYBOOK)


def assert_array_up(vm: VM) -> None:
    detail = vm.ssh("mdadm --detail --export /dev/md128").stdout
    assert "MD_LEVEL=raid0" in detail
    assert "MD_DEVICES=8" in detail
    assert sorted(line.split("=", 1)[1] for line in detail.splitlines()
                  if line.startswith("MD_DEVICE_") and "_DEV=" in line) == MEMBERS
    mount = vm.ssh("findmnt -n -o SOURCE,FSTYPE,OPTIONS /mnt/resource_nvme").stdout.split()
    assert mount[0] == "/dev/md128" and mount[1] == "xfs", mount
    size = int(vm.ssh("blockdev --getsize64 /dev/md128").stdout)
    assert size > 7 * 256 * 1024 * 1024  # eight 256 MiB members, less metadata


def test_first_run_builds_the_array_mounts_it_and_persists_it(built):
    vm, res = built
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert recap(res.stdout)["changed"] > 0
    assert "creating /dev/md128: RAID0 of 8 empty NVMe disks" in res.stdout
    assert_array_up(vm)
    conf = vm.ssh("cat /etc/mdadm/mdadm.conf").stdout
    uuid = vm.ssh("mdadm --detail --export /dev/md128 | sed -n 's/^MD_UUID=//p'").stdout.strip()
    assert f"ARRAY /dev/md128 metadata=1.2 UUID={uuid}" in conf.splitlines()
    fs_uuid = vm.ssh("blkid -s UUID -o value /dev/md128").stdout.strip()
    fstab = [line.split() for line in vm.ssh("cat /etc/fstab").stdout.splitlines() if "resource_nvme" in line]
    assert len(fstab) == 1
    assert fstab[0][:3] == [f"UUID={fs_uuid}", "/mnt/resource_nvme", "xfs"]
    assert "nofail" in fstab[0][3].split(",")
    # The rebuilt initramfs knows the array, so early boot assembles it as md128.
    initramfs_conf = vm.ssh("rm -rf /tmp/ird && unmkinitramfs /boot/initrd.img-$(uname -r) /tmp/ird && "
                            "cat /tmp/ird/main/etc/mdadm/mdadm.conf /tmp/ird/etc/mdadm/mdadm.conf 2>/dev/null; "
                            "rm -rf /tmp/ird", check=False).stdout
    assert uuid in initramfs_conf


def module_runs(stdout: str) -> int:
    """Module runs over ssh in a -vvv log: the commands that start the node's Python."""
    return sum(1 for line in stdout.splitlines() if "EXEC ssh" in line and "/usr/bin/python3" in line)


def test_second_run_changes_nothing_and_runs_no_module(built):
    """A rerun reads the node with one shell command (plugins/module_utils/amlhpc/nodes/nvme_read.py):
    the array, its file system, mdadm.conf, fstab, the mount and its mode are in place, so
    none of the five modules (plan, filesystem, lineinfile, mount, file) runs."""
    vm, first = built
    assert first.returncode == 0
    res = vm.playbook(PLAYBOOK, "-vvv")
    assert res.returncode == 0, res.stdout[-4000:]
    assert recap(res.stdout)["changed"] == 0, res.stdout[-4000:]
    assert "/dev/md128 is already a RAID0 of the 8 NVMe disks" in res.stdout
    assert module_runs(res.stdout) == 0, res.stdout[-4000:]


def test_check_mode_with_diff_changes_nothing(built):
    vm, first = built
    assert first.returncode == 0
    res = vm.playbook(PLAYBOOK, "--check", "--diff")
    assert res.returncode == 0, res.stdout[-4000:]
    assert recap(res.stdout)["changed"] == 0, res.stdout[-4000:]


def test_a_record_that_drifted_is_put_back_by_the_modules(built):
    """What the read finds out of place makes the modules run: here the mount point's mode
    and the array's line in mdadm.conf. Both come back, and the next rerun runs no module."""
    vm, first = built
    assert first.returncode == 0
    vm.ssh("chmod 0700 /mnt/resource_nvme && sed -i '/^ARRAY /d' /etc/mdadm/mdadm.conf")
    res = vm.playbook(PLAYBOOK, "-vvv")
    assert res.returncode == 0, res.stdout[-4000:]
    assert recap(res.stdout)["changed"] == 1, res.stdout[-4000:]
    assert module_runs(res.stdout) == 5, res.stdout[-4000:]  # the plan, filesystem, lineinfile, mount, file
    assert vm.ssh("stat -c %a /mnt/resource_nvme").stdout.strip() == "755"
    uuid = vm.ssh("mdadm --detail --export /dev/md128 | sed -n 's/^MD_UUID=//p'").stdout.strip()
    assert f"ARRAY /dev/md128 metadata=1.2 UUID={uuid}" in vm.ssh("cat /etc/mdadm/mdadm.conf").stdout.splitlines()
    again = vm.playbook(PLAYBOOK, "-vvv")
    assert recap(again.stdout)["changed"] == 0 and module_runs(again.stdout) == 0, again.stdout[-4000:]


def test_array_comes_back_after_a_reboot(built):
    vm, first = built
    assert first.returncode == 0
    vm.ssh("echo survives > /mnt/resource_nvme/marker && sync")
    vm.reboot()
    assert_array_up(vm)
    assert vm.ssh("cat /mnt/resource_nvme/marker").stdout == "survives\n"
    res = vm.playbook(PLAYBOOK)
    assert res.returncode == 0 and recap(res.stdout)["changed"] == 0, res.stdout[-4000:]


def _ext4_on_nvme3(workdir: Path, disks: list[Path]) -> None:
    """Before boot: /dev/nvme3n1 holds an ext4 file system with a known file."""
    content = workdir / "content"
    content.mkdir()
    (content / "canary.txt").write_text(CANARY)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "keepme", "-d", str(content), str(disks[3])], check=True)


@pytest.fixture(scope="module")
def refused(vm_factory) -> tuple[VM, subprocess.CompletedProcess]:
    vm = vm_factory(prepare=_ext4_on_nvme3, name="nvme-refused")
    return vm, vm.playbook(PLAYBOOK)


def test_a_disk_with_a_file_system_is_refused_and_left_intact(refused):
    vm, res = refused
    assert res.returncode != 0
    assert recap(res.stdout)["failed"] == 1
    out = " ".join(res.stdout.split())  # the message is wrapped on the terminal
    assert "refusing to build /dev/md128: 1 of 8 NVMe disks are not empty: /dev/nvme3n1 holds a file system (ext4, UUID" in out
    assert "label 'keepme'" in out
    assert "nvme_raid_force: true" in out
    # Nothing was built, and every disk is as it was.
    assert "md128" not in vm.ssh("cat /proc/mdstat").stdout
    assert vm.ssh("blkid -p -o value -s TYPE /dev/nvme3n1").stdout.strip() == "ext4"
    vm.ssh("e2fsck -fn /dev/nvme3n1")
    vm.ssh("mkdir -p /tmp/check && mount -o ro /dev/nvme3n1 /tmp/check")
    assert vm.ssh("cat /tmp/check/canary.txt").stdout == CANARY
    vm.ssh("umount /tmp/check")
    for disk in MEMBERS:
        if disk != "/dev/nvme3n1":
            assert vm.ssh(f"wipefs --no-act --noheadings {disk}").stdout.strip() == ""
    assert not vm.ssh("grep -q resource_nvme /etc/fstab", check=False).returncode == 0


def test_force_overwrites_the_disk_that_was_refused(refused):
    vm, first = refused
    assert first.returncode != 0
    # The initramfs rebuild is proven on the first VM; it takes minutes under TCG.
    res = vm.playbook(PLAYBOOK, "-e", "nvme_raid_force=true", "-e", "nvme_raid_update_initramfs=false")
    assert res.returncode == 0, res.stdout[-4000:]
    assert "over non-empty disks because nvme_raid_force is set" in " ".join(res.stdout.split())
    assert_array_up(vm)
