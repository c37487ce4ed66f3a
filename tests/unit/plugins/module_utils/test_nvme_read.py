"""nvme_raid's rerun read (amlhpc.nodes.nvme_read): the real shell command, run here with /bin/sh
over stand-ins of lsblk, blkid and mdadm that print recorded outputs (the qemu VM's mdadm
detail), with real files for mdadm.conf and fstab and a real mount point (/proc). It must
answer exactly where every step would change nothing, with the plan nvme_raid_info returns
on the same outputs, and None on any drift, so that the modules run. The build itself, and
a rerun over ssh, are in the qemu VM tier (tests/vm/test_nvme_raid.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from amlhpc.nodes.nvme import parse_lsblk, plan_argument_spec, plan_result
from amlhpc.nodes.nvme_read import fstab_unchanged, lineinfile_unchanged, read_command, unchanged_state
from amlhpc.nodes.file_state import FileState

DATA = Path(__file__).resolve().parent / "data" / "nvme"
DETAIL = (DATA / "qemu-md128-detail.txt").read_text()
MD_UUID = "c6781d55:dc75a956:d03fd9db:a0b506b5"
FS_UUID = "0b5e2f7e-8f7c-4c55-9d51-3f1b2a1c0d42"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mdadm.conf must belong to root, as on a node")


def lsblk_json(disks: list[str], array: str, level: str = "raid0") -> str:
    """lsblk -J of local NVMe disks (at the given paths) in a running array."""
    md = {"name": Path(array).name, "path": array, "type": level, "size": 8 << 30, "fstype": "xfs", "pttype": None,
          "mountpoint": "/mnt/resource_nvme", "model": None, "tran": None, "serial": None}
    return json.dumps({"blockdevices": [
        {"name": "sda", "path": "/dev/sda", "type": "disk", "size": 32 << 30, "fstype": None, "pttype": "gpt",
         "mountpoint": None, "model": "Virtual Disk", "tran": None, "serial": None,
         "children": [{"name": "sda1", "path": "/dev/sda1", "type": "part", "size": 32 << 30, "fstype": "ext4",
                       "pttype": "gpt", "mountpoint": "/", "model": None, "tran": None, "serial": None}]},
        *({"name": Path(d).name, "path": d, "type": "disk", "size": 1 << 30, "fstype": "linux_raid_member",
           "pttype": None, "mountpoint": None, "model": "Microsoft NVMe Direct Disk", "tran": "nvme",
           "serial": f"s{i}", "children": [md]}
          for i, d in enumerate(disks))]})


class Node:
    """A node's disks as the tools print them, and its files, in a temporary folder."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.fake = tmp / "fake"
        self.fake.mkdir()
        self.disks = [str(tmp / f"nvme{i}n1") for i in range(2)]
        for d in self.disks:
            Path(d).write_text("")
        self.device = str(tmp / "md128")
        Path(self.device).write_text("")
        self.conf = tmp / "mdadm.conf"
        self.fstab = tmp / "fstab"
        self.detail = DETAIL.replace("MD_DEVICES=8", "MD_DEVICES=2")
        self.write("lsblk.json", lsblk_json(self.disks, self.device))
        self.write("paths", "\n".join(["/dev/sda", "/dev/sda1", *self.disks, self.device]) + "\n")
        self.write("detail", self.detail)
        self.write("fstype", "xfs\n")
        self.write("blkid", f"DEVNAME={self.device}\nUUID={FS_UUID}\nBLOCK_SIZE=512\nTYPE=xfs\n")
        self.tool("lsblk", 'case "$*" in *-J*) cat "$FAKE/lsblk.json";; *) cat "$FAKE/paths";; esac')
        self.tool("blkid", 'case "$*" in *-p*) cat "$FAKE/blkid";; *) cat "$FAKE/fstype";; esac')
        self.tool("mdadm", 'case "$*" in *--detail*) cat "$FAKE/detail";; *) exit 1;; esac')
        self.conf.write_text(f"# mdadm.conf\nHOMEHOST <system>\nARRAY {self.device} metadata=1.2 UUID={MD_UUID}\n")
        self.conf.chmod(0o644)
        self.fstab.write_text("# /etc/fstab\nUUID=1111 / ext4 defaults 0 1\n"
                              f"UUID={FS_UUID} /proc xfs defaults,noatime,nofail 0 0\n")
        self.params = {**{k: v.get("default") for k, v in plan_argument_spec().items()},
                       "device": self.device, "filesystem": "xfs", "mount_point": "/proc",
                       "mount_options": "defaults,noatime", "mount_mode": "0555", "mdadm_conf": str(self.conf)}

    def write(self, name: str, text: str) -> None:
        (self.fake / name).write_text(text)

    def tool(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    def read(self, **params: object) -> dict | None:
        p = {**self.params, **params}
        env = dict(os.environ, PATH=f"{self.bin}:{os.environ['PATH']}", FAKE=str(self.fake))
        out = subprocess.run(["/bin/sh", "-c", read_command(p, fstab=str(self.fstab))], env=env,
                             capture_output=True, text=True, check=True)
        return unchanged_state(p, out.stdout, fstab=str(self.fstab))

    def module_plan(self) -> dict:
        """What nvme_raid_info returns on the same outputs (its probes of the disks included:
        the plan does not need them for a running array)."""
        probes = {d: {"wipefs": "", "blkid": "TYPE=linux_raid_member\n", "examine": ""} for d in self.disks}
        devices = parse_lsblk((self.fake / "lsblk.json").read_text())
        present = [d["path"] for d in devices if os.path.exists(d["path"])]
        return plan_result(self.params, devices, present, probes, self.detail)


@pytest.fixture
def node(tmp_path) -> Node:
    return Node(tmp_path)


def test_an_array_in_place_is_read_as_the_plan_the_module_makes(node):
    state = node.read()
    assert state is not None
    assert state["action"] == "exists"
    assert state["reason"] == f"{node.device} is already a RAID0 of the 2 NVMe disks"
    assert state == node.module_plan()


def test_the_read_over_a_terminal_is_read_the_same(node):
    """Over ssh, Ansible runs a shell command on a terminal (-tt): every line ends with \r\n."""
    env = dict(os.environ, PATH=f"{node.bin}:{os.environ['PATH']}", FAKE=str(node.fake))
    out = subprocess.run(["/bin/sh", "-c", read_command(node.params, fstab=str(node.fstab))], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert unchanged_state(node.params, out.replace("\n", "\r\n"), fstab=str(node.fstab)) == node.module_plan()


@pytest.mark.parametrize("drift", [
    "fstab options", "no fstab line", "fstab line of 4 fields", "another array in mdadm.conf",
    "mdadm.conf mode", "mdadm.conf without its last newline", "another file system", "no file system UUID",
    "not a mount point", "mount point mode", "array under another name", "array of another level",
    "mode in letters",
])
def test_any_drift_leaves_it_to_the_modules(node, drift):
    params: dict = {}
    if drift == "fstab options":
        node.fstab.write_text(node.fstab.read_text().replace("defaults,noatime,nofail", "defaults,nofail"))
    elif drift == "no fstab line":
        node.fstab.write_text("UUID=1111 / ext4 defaults 0 1\n")
    elif drift == "fstab line of 4 fields":  # ansible.posix.mount rewrites it with dump and passno
        node.fstab.write_text(f"UUID={FS_UUID} /proc xfs defaults,noatime,nofail\n")
    elif drift == "another array in mdadm.conf":
        node.conf.write_text(f"ARRAY /dev/md127 metadata=1.2 UUID={MD_UUID}\n")
    elif drift == "mdadm.conf mode":
        node.conf.chmod(0o600)
    elif drift == "mdadm.conf without its last newline":
        node.conf.write_text(node.conf.read_text().rstrip("\n"))
    elif drift == "another file system":
        node.write("fstype", "ext4\n")
    elif drift == "no file system UUID":
        node.write("blkid", "TYPE=xfs\n")
    elif drift == "not a mount point":
        folder = node.tmp / "mnt"
        folder.mkdir(mode=0o555)
        folder.chmod(0o555)
        node.fstab.write_text(node.fstab.read_text().replace(" /proc ", f" {folder} "))
        params["mount_point"] = str(folder)
    elif drift == "mount point mode":
        params["mount_mode"] = "0755"
    elif drift == "array under another name":
        node.write("lsblk.json", lsblk_json(node.disks, str(node.tmp / "md127")))
    elif drift == "array of another level":
        node.write("lsblk.json", lsblk_json(node.disks, node.device, level="raid1"))
    elif drift == "mode in letters":
        params["mount_mode"] = "u=rwx,go=rx"
    assert node.read(**params) is None


def test_a_node_without_local_nvme_disks_is_read_as_skip(node):
    node.write("lsblk.json", json.dumps({"blockdevices": [
        {"name": "sda", "path": "/dev/sda", "type": "disk", "size": 1, "fstype": None, "pttype": None,
         "mountpoint": "/", "model": None, "tran": "sata", "serial": None},
        # lsblk in a container sees the host's disks, without their device nodes
        {"name": "nvme9n1", "path": "/dev/nvme9n1", "type": "disk", "size": 1, "fstype": None, "pttype": None,
         "mountpoint": None, "model": None, "tran": "nvme", "serial": None}]}))
    node.write("paths", "/dev/sda\n/dev/nvme9n1\n")
    state = node.read(vm_size="Standard_ND96asr_v4")
    assert state is not None and state["action"] == "skip"
    assert "/dev/nvme9n1: no device node /dev/nvme9n1 on this host" in state["reason"]
    assert "a Standard_ND96asr_v4 node should have 8, check the VM" in state["reason"]


def test_disks_to_probe_are_left_to_the_module(node):
    # the same disks, no array on them: the plan needs wipefs, blkid and mdadm --examine of each
    devices = json.loads((node.fake / "lsblk.json").read_text())
    for disk in devices["blockdevices"][1:]:
        disk.pop("children")
        disk["fstype"] = None
    node.write("lsblk.json", json.dumps(devices))
    node.write("detail", "")
    assert node.read() is None


def test_a_missing_tool_or_a_strange_output_is_left_to_the_module(node):
    p = node.params
    assert unchanged_state(p, "") is None
    assert unchanged_state(p, "@@amlhpc-nvme missing lsblk\n") is None
    good = subprocess.run(["/bin/sh", "-c", read_command(p, fstab=str(node.fstab))],
                          env=dict(os.environ, PATH=f"{node.bin}:{os.environ['PATH']}", FAKE=str(node.fake)),
                          capture_output=True, text=True, check=True).stdout
    assert unchanged_state(p, good, fstab=str(node.fstab)) is not None
    assert unchanged_state(p, good.replace("@@amlhpc-nvme end blkid", "@@amlhpc-nvme end blk"),
                           fstab=str(node.fstab)) is None
    assert read_command({**p, "recorded": {"lsblk": "{}"}}) is None  # recorded outputs: nothing to read


def test_fstab_is_read_as_ansible_posix_mount_reads_it():
    line = "UUID=abc /mnt/resource_nvme xfs defaults,noatime,nofail 0 0"
    wanted = ("/mnt/resource_nvme", "UUID=abc", "xfs", "defaults,noatime,nofail")
    assert fstab_unchanged(f"# comment\n{line}\n", *wanted)
    assert fstab_unchanged(f"{line}  # the array\n", *wanted)
    assert fstab_unchanged(line.replace(" 0 0", "\t0\t0"), *wanted)
    assert not fstab_unchanged(f"{line}\n{line.replace('UUID=abc', 'UUID=old')}\n", *wanted)  # every line of it
    assert not fstab_unchanged(line.replace(" 0 0", " 0 2"), *wanted)
    assert not fstab_unchanged("#" + line, *wanted)
    assert fstab_unchanged("UUID=a /mnt/my\\040disk xfs d 0 0\n", "/mnt/my disk", "UUID=a", "xfs", "d")


def test_mdadm_conf_is_read_as_lineinfile_reads_it():
    regexp, line = r"^ARRAY\s+\S+\s+.*UUID=u1", "ARRAY /dev/md128 metadata=1.2 UUID=u1"

    def state(text: str, mode: int = 0o644) -> FileState:
        return FileState("file", 0, 0, mode, text)

    assert lineinfile_unchanged(state(f"{line}\n"), regexp, line, 0, 0, 0o644)
    # lineinfile replaces the last line the regexp matches
    assert not lineinfile_unchanged(state(f"{line}\nARRAY /dev/md127 UUID=u1\n"), regexp, line, 0, 0, 0o644)
    assert lineinfile_unchanged(state(f"ARRAY /dev/md127 UUID=u1\n{line}\n"), regexp, line, 0, 0, 0o644)
    assert not lineinfile_unchanged(state(line), regexp, line, 0, 0, 0o644)
    assert not lineinfile_unchanged(state(f"{line}\n", 0o600), regexp, line, 0, 0, 0o644)
    assert not lineinfile_unchanged(FileState("absent"), regexp, line, 0, 0, 0o644)
