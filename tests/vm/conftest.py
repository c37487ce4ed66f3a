"""The VM tier: a Debian bookworm guest under qemu (TCG, no KVM needed) with eight emulated
NVMe disks, reached over SSH on 127.0.0.1 only, and the real roles run against it.

The image is built once by tests/vm/build-image.sh (debootstrap, needs root) and cached
under .cache/vm/. Every boot uses a fresh copy-on-write overlay of it, so a test never sees
another test's changes, and new sparse disk images. qemu is always killed at the end.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from project_copy import make_project_copy, project_env

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tests" / "vm" / "build-image.sh"
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
DISK_SIZE = 256 * 1024 * 1024
BOOT_TIMEOUT = 600  # seconds; a TCG boot takes ~40 s on 2 idle cores, far more on a loaded machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VM:
    """A running qemu guest with root SSH on 127.0.0.1:port."""

    image: Path
    workdir: Path
    disks: list[Path]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    boots: int = 0
    initrd: Path | None = None  # None: the image's; after reboot(): the guest's own

    @property
    def key(self) -> Path:
        return self.image / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"

    @property
    def serial_log(self) -> Path:
        return self.workdir / "serial.log"

    def start(self) -> None:
        overlay = self.workdir / "root.qcow2"
        if not overlay.exists():
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                            str(self.image / "root.raw"), str(overlay)], check=True)
        host_key = " ".join((self.image / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_key}\n")
        argv = ["qemu-system-x86_64", "-accel", "tcg", "-m", "2048", "-smp", "2", "-nodefaults",
                "-display", "none", "-serial", f"file:{self.serial_log}",
                "-kernel", str(self.image / "vmlinuz"), "-initrd", str(self.initrd or self.image / "initrd.img"),
                "-append", "root=/dev/vda rw console=ttyS0 quiet",
                "-drive", f"file={overlay},if=virtio,format=qcow2",
                "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.port}-:22",
                "-device", "virtio-net-pci,netdev=n0"]
        for i, disk in enumerate(self.disks):
            argv += ["-drive", f"file={disk},if=none,id=nv{i},format=raw",
                     "-device", f"nvme,serial=amlhpcnv{i},drive=nv{i}"]
        log = open(self.workdir / "qemu.log", "ab")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self.wait_up()

    def ssh_argv(self, command: str) -> list[str]:
        return ["ssh", "-q", "-i", str(self.key), "-p", str(self.port), "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                "-o", "ConnectTimeout=10", "root@127.0.0.1", command]

    def ssh(self, command: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        res = subprocess.run(self.ssh_argv(command), capture_output=True, text=True, timeout=timeout, check=False)
        if check and res.returncode != 0:
            raise AssertionError(f"in the VM, `{command}` failed (rc {res.returncode}):\n{res.stdout}{res.stderr}")
        return res

    def wait_up(self, old_boot_id: str = "") -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                pytest.fail(f"qemu exited (rc {self.process.returncode}): see {self.workdir / 'qemu.log'}")
            try:
                res = self.ssh("cat /proc/sys/kernel/random/boot_id", check=False, timeout=30)
            except subprocess.TimeoutExpired:
                continue
            if res.returncode == 0 and res.stdout.strip() and res.stdout.strip() != old_boot_id:
                self.boots += 1
                return
            time.sleep(2)
        tail = self.serial_log.read_text(errors="replace")[-3000:] if self.serial_log.exists() else ""
        pytest.fail(f"the VM did not answer SSH on 127.0.0.1:{self.port} within {BOOT_TIMEOUT}s; "
                    f"serial console:\n{tail}")

    def reboot(self) -> None:
        """Power off and boot again with the guest's own /boot/initrd.img, as a boot loader
        would (qemu's -kernel/-initrd boot would otherwise reuse the image's initrd)."""
        initrd = self.workdir / f"initrd-boot{self.boots + 1}.img"
        with open(initrd, "wb") as f:
            subprocess.run(self.ssh_argv("cat /boot/initrd.img-$(uname -r)"), stdout=f, check=True, timeout=300)
        assert initrd.stat().st_size > 1024 * 1024, "the guest's initrd is missing or truncated"
        self.initrd = initrd
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.ssh("sync; systemctl poweroff", check=False, timeout=20)
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    # --------------------------------------------------------------- ansible against it
    def inventory(self) -> Path:
        path = self.workdir / "inventory.yml"
        host = {
            "ansible_host": "127.0.0.1", "ansible_port": self.port, "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes",
            "ansible_python_interpreter": "/usr/bin/python3",
            "aml_cluster": "vm", "aml_node_rank": 0, "aml_private_ip": "10.0.2.15", "aml_node_id": "vm-0",
            "aml_node_state": "idle", "aml_vm_size": "Standard_ND96asr_v4",
        }
        inv = {"all": {"children": {
            "aml_nodes": {"children": {"head": {"hosts": {"amlhpc-vm": host}}, "workers": {"hosts": {}}}},
            "cluster_vm": {"hosts": {"amlhpc-vm": {}}}}}}
        path.write_text(yaml.safe_dump(inv))
        return path

    def playbook(self, playbook: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        # In a project folder of the VM's own (tests/project_copy.py): a refusal's report page, the
        # fact cache, never the checkout's outputs/ or .cache/ (the integration tier runs beside).
        project = make_project_copy(self.workdir / "project")
        env = project_env(project)
        # A fresh SSH master per boot: a reboot leaves the old one dead.
        env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = str(self.workdir / f"cp{self.boots}")
        env["ANSIBLE_FORCE_COLOR"] = "0"
        env["ANSIBLE_NOCOLOR"] = "1"
        res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(self.inventory()), str(project / playbook), *args],
                             cwd=project, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        (self.workdir / "ansible.log").open("a").write(f"$ {playbook} {' '.join(args)}\n{res.stdout}{res.stderr}\n")
        return res


def recap(stdout: str, host: str = "amlhpc-vm") -> dict[str, int]:
    """The PLAY RECAP counters of ``host`` (ok, changed, failed, ...)."""
    for line in stdout.splitlines():
        if line.startswith(host) and ":" in line and "ok=" in line:
            pairs = line.split(":", 1)[1].split()
            return {k: int(v) for k, v in (p.split("=") for p in pairs)}
    raise AssertionError(f"no PLAY RECAP line for {host} in:\n{stdout[-3000:]}")


def make_disks(workdir: Path, count: int = 8) -> list[Path]:
    disks = []
    for i in range(count):
        disk = workdir / f"nvme{i}.raw"
        with open(disk, "wb") as f:
            f.truncate(DISK_SIZE)
        disks.append(disk)
    return disks


@pytest.fixture(scope="session")
def vm_image() -> Path:
    for tool in ("qemu-system-x86_64", "qemu-img", "debootstrap", "mkfs.ext4"):
        if not shutil.which(tool) and not Path("/usr/sbin", tool).exists():
            pytest.fail(f"{tool} is missing: run `.ci/sysdeps vm` as root (make test-vm does)")
    res = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=1800, check=False)
    if res.returncode != 0:
        pytest.fail(f"building the VM image failed:\n{res.stderr[-3000:]}")
    return Path(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def vm_factory(vm_image, tmp_path_factory) -> Iterator:
    """Boots VMs (each in its own folder) and always kills them at the end."""
    vms: list[VM] = []

    def boot(prepare=None, name: str = "vm") -> VM:
        workdir = tmp_path_factory.mktemp(name)
        disks = make_disks(workdir)
        if prepare:
            prepare(workdir, disks)
        vm = VM(image=vm_image, workdir=workdir, disks=disks)
        vms.append(vm)
        vm.start()
        return vm

    yield boot
    for vm in vms:
        try:
            vm.stop()
        finally:
            if vm.process is not None and vm.process.poll() is None:
                vm.process.kill()
                vm.process.wait()
