"""Node faults for the AmlCompute twin: each one is made in the node's environment, never by a
variable of the product, so the health gate meets it as it would meet it on a real cluster.

* :func:`gpu_tools` puts a recorded-format ``nvidia-smi`` stand-in on a node (the replies of
  ``tests/unit/plugins/module_utils/fixtures/health``: ``--query-gpu``, ``--query-remapped-rows``,
  ``nvlink -s``) in ``/usr/local/bin``, where the health check finds the real one on an Azure
  HPC image. :func:`gpu_fault` makes it a bad GPU node: the query shows two uncorrectable ECC
  errors on GPU 5, one NVLink of GPU 2 is inactive, and the node's kernel log (a ``dmesg``
  stand-in on the same ``PATH``, as root's sudo ``secure_path`` orders it) holds an Xid 79
  (GPU fallen off the bus) beside a non-fatal Xid 13 (``fixtures/health/dmesg_xid.txt``).
* :func:`scratch_read_only` makes the node's scratch mount read-only, as the kernel does to a
  file system after I/O errors: a bind mount of it remounted ``ro`` inside the node's own
  mount namespace (a short-lived privileged helper container enters it with ``nsenter``; the
  node itself keeps no capability). Root's writes there fail with ``EROFS``.
* :func:`gpu_wear` makes the stand-in show what AzNHC's check_gpu_ecc and
  check_gpu_clock_throttling catch before a GPU breaks: 12000 correctable SRAM ECC errors on
  one GPU, a hardware slowdown on another (``nvidia-smi -q -d ECC`` / ``-q -d PERFORMANCE``).
* :func:`ib_link_flaps` gives the node InfiniBand port counters (``/sys/class/infiniband/<hca>/
  ports/1/counters/link_downed``), one port flapping: a tmpfs over the node's ``/sys/class``,
  made in its mount namespace by the same helper; :func:`ib_link_steady` takes it away.
* :func:`stop_answering` freezes every process of the node (``docker pause``): its TCP stack
  still accepts, sshd never answers, as a hung VM does. :func:`answer_again` thaws it.

What it cannot show: a GPU (the stand-ins print what a faulty one prints), a real kernel log.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .cluster import Twin, TwinNode, docker

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "health"
BIN = "/usr/local/bin"


def _replay(name: str) -> str:
    return f"cat <<'FIXTURE'\n{(FIX / name).read_text()}FIXTURE\n"


def _nvidia_smi(gpu_csv: str, nvlink: str, ecc: str = "nvsmi_q_ecc_ndv4_ok.txt",
                perf: str = "nvsmi_q_perf_ndv4_ok.txt") -> str:
    return ("#!/bin/sh\ncase \"$*\" in\n"
            f"  *--query-gpu=*) {_replay(gpu_csv)};;\n"
            f"  *--query-remapped-rows=*) {_replay('nvsmi_remap_ndv4_ok.csv')};;\n"
            f"  \"-q -d ECC\") {_replay(ecc)};;\n"
            f"  \"-q -d PERFORMANCE\") {_replay(perf)};;\n"
            f"  \"nvlink -s\") {_replay(nvlink)};;\n"
            "  *) echo \"stand-in nvidia-smi: $* not recorded\" >&2; exit 2 ;;\nesac\n")


def _install(twin: Twin, node: TwinNode | int, name: str, body: str) -> None:
    script = f"cat > {BIN}/{name} <<'STANDIN'\n{body}STANDIN\nchmod 0755 {BIN}/{name}"
    res = twin.exec(node, "sh", "-c", script)
    if res.returncode != 0:
        raise RuntimeError(f"cannot install the {name} stand-in: {res.stderr.strip()}")


def gpu_tools(twin: Twin, node: TwinNode | int) -> None:
    """A healthy 8-GPU NDv4's nvidia-smi on ``node`` (no dmesg stand-in: the node's own dmesg,
    which a container may not read, answers)."""
    _install(twin, node, "nvidia-smi", _nvidia_smi("nvsmi_gpu_ndv4_ok.csv", "nvlink_a100_ok.txt"))
    twin.exec(node, "rm", "-f", f"{BIN}/dmesg")


def gpu_fault(twin: Twin, node: TwinNode | int) -> None:
    """``node``'s GPUs report faults: uncorrectable ECC errors, an inactive NVLink, an Xid 79."""
    _install(twin, node, "nvidia-smi", _nvidia_smi("nvsmi_gpu_ndv4_ecc.csv", "nvlink_a100_inactive.txt"))
    _install(twin, node, "dmesg", "#!/bin/sh\n" + _replay("dmesg_xid.txt"))


def gpu_wear(twin: Twin, node: TwinNode | int) -> None:
    """``node``'s GPUs wear out the way AzNHC's check_gpu_ecc and check_gpu_clock_throttling
    see it: GPU 3 has 12000 correctable SRAM ECC errors (``-q -d ECC``), GPU 6 is held in a
    hardware (thermal) slowdown (``-q -d PERFORMANCE``); no uncorrectable error, no XID."""
    _install(twin, node, "nvidia-smi", _nvidia_smi("nvsmi_gpu_ndv4_ok.csv", "nvlink_a100_ok.txt",
                                                   "nvsmi_q_ecc_ndv4_sram_high.txt",
                                                   "nvsmi_q_perf_ndv4_hw_slowdown.txt"))
    twin.exec(node, "rm", "-f", f"{BIN}/dmesg")


# The helper that enters a node's mount namespace: the host's PIDs, the capabilities nsenter
# and mount need, nothing else (no network, removed when done).
_HELPER = ("docker", "run", "--rm", "--pid=host", "--network=none", "--cap-add=SYS_ADMIN", "--cap-add=SYS_PTRACE",
           "--cap-add=SYS_CHROOT", "--security-opt=apparmor=unconfined", "--security-opt=seccomp=unconfined")


def _one(twin: Twin, node: TwinNode | int) -> TwinNode:
    return node if isinstance(node, TwinNode) else next(n for n in twin.nodes if n.slot == node)


def _container_pid(node: TwinNode) -> str:
    return docker("inspect", "-f", "{{.State.Pid}}", node.container).strip()


def scratch_read_only(twin: Twin, node: TwinNode | int, path: str | None = None) -> None:
    """``node``'s scratch (``twin.scratch_path``) turns read-only under the node."""
    node = _one(twin, node)
    path = path or twin.scratch_path
    cmd = (f"nsenter -t {_container_pid(node)} -m sh -c "
           f"'mount --bind {path} {path} && mount -o remount,bind,ro {path}'")
    res = subprocess.run([*_HELPER, twin.image, "sh", "-c", cmd], capture_output=True, text=True, timeout=120,
                         check=False)
    if res.returncode != 0:
        raise RuntimeError(f"cannot make {path} read-only on {node.container}: {res.stderr.strip()}")


def scratch_writable(twin: Twin, node: TwinNode | int, path: str | None = None) -> None:
    """Undo :func:`scratch_read_only` (the bind mount goes, the disk under it was never touched)."""
    node = _one(twin, node)
    path = path or twin.scratch_path
    subprocess.run([*_HELPER, twin.image, "sh", "-c",
                    f"nsenter -t {_container_pid(node)} -m umount {path}"],
                   capture_output=True, text=True, timeout=120, check=False)


def stop_answering(twin: Twin, node: TwinNode | int) -> None:
    docker("pause", _one(twin, node).container)


def answer_again(twin: Twin, node: TwinNode | int) -> None:
    docker("unpause", _one(twin, node).container, check=False)


# InfiniBand port counters where the kernel keeps them: a tmpfs over /sys/class in the node's
# mount namespace, every class entry kept (a link to the real device under /sys/devices) and
# an infiniband class added with two ports, as sysfs lays it out.
_SYSCLASS = "/run/amlhpc-twin-sysclass"


def ib_link_flaps(twin: Twin, node: TwinNode | int, downs: int = 3) -> None:
    """``node`` gets InfiniBand ports ``mlx5_ib0`` and ``mlx5_ib1`` whose ``link_downed``
    counters read 0 and ``downs`` (a flapping link, what AzNHC's check_ib_link_flapping
    catches), beside an Ethernet ``mlx5_an0`` port that went down 7 times (not counted)."""
    node = _one(twin, node)
    ports = "".join(f"mkdir -p {_SYSCLASS}/infiniband/{hca}/ports/1/counters; "
                    f"echo {layer} > {_SYSCLASS}/infiniband/{hca}/ports/1/link_layer; "
                    f"echo {n} > {_SYSCLASS}/infiniband/{hca}/ports/1/counters/link_downed; "
                    for hca, layer, n in (("mlx5_an0", "Ethernet", 7), ("mlx5_ib0", "InfiniBand", 0),
                                          ("mlx5_ib1", "InfiniBand", downs)))
    script = (f"set -e; mkdir -p {_SYSCLASS}; mount -t tmpfs amlhpc-twin {_SYSCLASS}; "
              f"for d in /sys/class/*; do c={_SYSCLASS}/$(basename $d); mkdir -p $c; "
              "for e in $d/*; do [ -e \"$e\" ] && ln -s \"$(readlink -f \"$e\")\" $c/$(basename \"$e\"); done; "
              f"done; {ports}mount --bind {_SYSCLASS} /sys/class")
    res = subprocess.run([*_HELPER, twin.image, "nsenter", "-t", _container_pid(node), "-m", "sh", "-c", script],
                         capture_output=True, text=True, timeout=120, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"cannot give {node.container} InfiniBand counters: {res.stderr.strip()}")


def ib_link_steady(twin: Twin, node: TwinNode | int) -> None:
    """Undo :func:`ib_link_flaps` (the node's own /sys/class again)."""
    node = _one(twin, node)
    subprocess.run([*_HELPER, twin.image, "nsenter", "-t", _container_pid(node), "-m", "sh", "-c",
                    f"umount /sys/class; umount {_SYSCLASS}; rmdir {_SYSCLASS}"],
                   capture_output=True, text=True, timeout=120, check=False)
