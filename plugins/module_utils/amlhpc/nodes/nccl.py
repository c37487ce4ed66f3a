# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""NCCL set-up of Azure ND-series nodes: topology by VM size, nccl.conf and the job env file.

The topology tables below describe what each VM size exposes inside the VM (the PCI bus
ids Hyper-V gives the GPUs and InfiniBand HCAs, and the NUMA node each pair hangs off),
the same facts as the topology files the Azure HPC images ship under /opt/microsoft.
One table feeds both the NCCL topology file (``render_topology_xml``) and the GPU-to-NUMA
pinning default used when ``nvidia-smi topo -m`` cannot tell (``known_pinning``).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from .nvidia_smi import NvidiaSmiParseError, pinning_facts, topology_pinning

GPU_CLASS = "0x030200"   # 3D controller
IB_CLASS = "0x020700"    # InfiniBand controller
BRIDGE_CLASS = "0x060400"


@dataclass(frozen=True)
class PciSwitch:
    """Devices behind one (virtual) PCIe switch; ``busid`` None: directly under the CPU."""

    busid: Optional[str]
    devices: tuple[tuple[str, str], ...]   # (busid, class)


@dataclass(frozen=True)
class NumaDomain:
    numaid: int
    affinity: str          # CPU mask as NCCL writes it: 32-bit words, most significant first
    cpus: str              # the same CPUs as a list, as `nvidia-smi topo -m` prints them
    switches: tuple[PciSwitch, ...]


@dataclass(frozen=True)
class NcclTopology:
    name: str
    gpu: str
    vm_sizes: tuple[str, ...]
    vendor: str
    familyid: int
    modelid: int
    link_speed: str
    bridge_attrs: str
    domains: tuple[NumaDomain, ...]

    def gpu_bus_ids(self) -> list[str]:
        return sorted(b for d in self.domains for s in d.switches for b, c in s.devices if c == GPU_CLASS)

    def numa_of_gpu(self) -> dict[int, int]:
        """GPU index (CUDA_DEVICE_ORDER=PCI_BUS_ID order) -> NUMA node."""
        numa_of_bus = {b: d.numaid for d in self.domains for s in d.switches for b, c in s.devices
                       if c == GPU_CLASS}
        return {i: numa_of_bus[b] for i, b in enumerate(self.gpu_bus_ids())}


def _pairs(*pairs: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for gpu, hca in pairs:
        out += [(gpu, GPU_CLASS), (hca, IB_CLASS)]
    return tuple(out)


_AMD_ROME = {"vendor": "AuthenticAMD", "familyid": 23, "modelid": 49}
_INTEL_SPR = {"vendor": "GenuineIntel", "familyid": 6, "modelid": 143}
_INTEL_SKX = {"vendor": "GenuineIntel", "familyid": 6, "modelid": 85}

TOPOLOGIES: dict[str, NcclTopology] = {
    # ND A100 v4: 8 A100 (40 or 80 GB), 8 HDR HCAs, 96 vCPUs on 4 NUMA nodes of 24.
    "ndv4": NcclTopology(
        name="ndv4", gpu="A100", vm_sizes=("standard_nd96asr_v4", "standard_nd96amsr_a100_v4"),
        link_speed="16 GT/s", bridge_attrs="", **_AMD_ROME,
        domains=(
            NumaDomain(0, "00000000,00000000,00ffffff", "0-23",
                       (PciSwitch("ffff:ff:01.0", _pairs(("0003:00:00.0", "0103:00:00.0"),
                                                         ("0004:00:00.0", "0104:00:00.0"))),)),
            NumaDomain(1, "00000000,0000ffff,ff000000", "24-47",
                       (PciSwitch("ffff:ff:02.0", _pairs(("0001:00:00.0", "0101:00:00.0"),
                                                         ("0002:00:00.0", "0102:00:00.0"))),)),
            NumaDomain(2, "000000ff,ffff0000,00000000", "48-71",
                       (PciSwitch("ffff:ff:03.0", _pairs(("000d:00:00.0", "0107:00:00.0"),
                                                         ("000e:00:00.0", "0108:00:00.0"))),)),
            NumaDomain(3, "ffffff00,00000000,00000000", "72-95",
                       (PciSwitch("ffff:ff:04.0", _pairs(("000b:00:00.0", "0105:00:00.0"),
                                                         ("000c:00:00.0", "0106:00:00.0"))),)),
        )),
    # ND H100 v5: 8 H100, 8 NDR HCAs, 96 vCPUs on 2 NUMA nodes; one GPU + HCA per switch.
    "ndv5": NcclTopology(
        name="ndv5", gpu="H100", vm_sizes=("standard_nd96isr_h100_v5",),
        link_speed="32.0 GT/s PCIe",
        bridge_attrs=' vendor="0x0000" device="0x0000" subsystem_vendor="0x0000" subsystem_device="0x0000"',
        **_INTEL_SPR,
        domains=(
            NumaDomain(0, "ffffffff,ffff0000,00000000", "0-47", tuple(
                PciSwitch(f"ffff:ff:0{n}.0", _pairs((gpu, hca))) for n, gpu, hca in (
                    (1, "0001:00:00.0", "0101:00:00.0"), (2, "0002:00:00.0", "0102:00:00.0"),
                    (3, "0003:00:00.0", "0103:00:00.0"), (4, "0008:00:00.0", "0104:00:00.0")))),
            NumaDomain(1, "00000000,0000ffff,ffffffff", "48-95", tuple(
                PciSwitch(f"ffff:ff:0{n}.0", _pairs((gpu, hca))) for n, gpu, hca in (
                    (5, "0009:00:00.0", "0105:00:00.0"), (6, "000a:00:00.0", "0106:00:00.0"),
                    (7, "000b:00:00.0", "0107:00:00.0"), (8, "000c:00:00.0", "0108:00:00.0")))),
        )),
    # ND40rs v2: 8 V100 (32 GB), one EDR HCA, 40 vCPUs on 2 NUMA nodes; no switches.
    "ndv2": NcclTopology(
        name="ndv2", gpu="V100", vm_sizes=("standard_nd40rs_v2",),
        link_speed="16 GT/s", bridge_attrs="", **_INTEL_SKX,
        domains=(
            NumaDomain(0, "00000000,000fffff", "0-19", (PciSwitch(None, (
                ("0001:00:00.0", GPU_CLASS), ("0002:00:00.0", GPU_CLASS), ("0003:00:00.0", GPU_CLASS),
                ("0004:00:00.0", GPU_CLASS), ("0101:00:00.0", IB_CLASS))),)),
            NumaDomain(1, "000000ff,fff00000", "20-39", (PciSwitch(None, (
                ("0005:00:00.0", GPU_CLASS), ("0006:00:00.0", GPU_CLASS), ("0007:00:00.0", GPU_CLASS),
                ("0008:00:00.0", GPU_CLASS))),)),
        )),
}


def topology_for_vm_size(vm_size: Optional[str]) -> Optional[NcclTopology]:
    """The topology of an Azure VM size (case does not matter), None when there is none."""
    if not vm_size:
        return None
    wanted = vm_size.strip().lower()
    for topo in TOPOLOGIES.values():
        if wanted in topo.vm_sizes:
            return topo
    return None


def render_topology_xml(topo: NcclTopology) -> str:
    """The NCCL topology file (NCCL_TOPO_FILE) for a table entry."""
    lines = ['<system version="1">']
    for dom in topo.domains:
        lines.append(f'  <cpu numaid="{dom.numaid}" affinity="{dom.affinity}" arch="x86_64" '
                     f'vendor="{topo.vendor}" familyid="{topo.familyid}" modelid="{topo.modelid}">')
        for switch in dom.switches:
            indent = "    "
            if switch.busid is not None:
                lines.append(f'    <pci busid="{switch.busid}" class="{BRIDGE_CLASS}" '
                             f'link_speed="{topo.link_speed}" link_width="16"{topo.bridge_attrs}>')
                indent = "      "
            for busid, cls in switch.devices:
                lines.append(f'{indent}<pci busid="{busid}" class="{cls}" '
                             f'link_speed="{topo.link_speed}" link_width="16"/>')
            if switch.busid is not None:
                lines.append("    </pci>")
        lines.append("  </cpu>")
    lines.append("</system>")
    return "\n".join(lines) + "\n"


def known_pinning(vm_size: Optional[str]) -> dict[str, Any]:
    """Pinning facts from the table for a VM size; ``known`` False for unknown sizes."""
    topo = topology_for_vm_size(vm_size)
    if topo is None:
        return {"known": False, "source": "table", "reason": f"no topology table for VM size {vm_size!r}"}
    return pinning_facts(topo.numa_of_gpu(), {d.numaid: d.cpus for d in topo.domains},
                         source=f"{topo.name} table")


def choose_pinning(measured: Optional[Mapping[str, Any]], vm_size: Optional[str]) -> dict[str, Any]:
    """Measured facts (``nvidia-smi topo -m``) when complete, else the VM size's table."""
    if measured and measured.get("known"):
        return dict(measured)
    fallback = known_pinning(vm_size)
    if not fallback["known"] and measured:
        fallback["reason"] = f"{measured.get('reason', 'no measurement')}; {fallback['reason']}"
    return fallback


# ---------------------------------------------------------------------------------------
# /etc/nccl.conf and the job environment file

HEADER = "# Managed by Ansible (amlhpc role nccl): local edits are overwritten.\n"


def _check_key(key: str) -> str:
    if not key or not (key[0].isalpha() or key[0] == "_") or not all(c.isalnum() or c == "_" for c in key):
        raise ValueError(f"not an environment variable name: {key!r}")
    return key


def nccl_conf_content(settings: Mapping[str, Any], topo_file: Optional[str] = None) -> str:
    """/etc/nccl.conf: NCCL reads KEY=VALUE lines (no quoting, '#' starts a comment line)."""
    values: dict[str, str] = {}
    if topo_file:
        values["NCCL_TOPO_FILE"] = topo_file
    for key, value in settings.items():
        if value is None or value == "":
            continue
        text = str(int(value)) if isinstance(value, bool) else str(value)
        if "\n" in text:
            raise ValueError(f"{key}: a value cannot span lines")
        values[_check_key(key)] = text
    return HEADER + "".join(f"{k}={v}\n" for k, v in sorted(values.items()))


def nccl_env_content(env: Mapping[str, Any], ld_library_path: Sequence[str] = (),
                     pinning: Optional[Mapping[str, Any]] = None, topo_file: Optional[str] = None) -> str:
    """The file jobs source (``. /etc/amlhpc/nccl.env``): shell exports, values quoted.

    ``ld_library_path`` entries (the SHARP plugin folder, when the node has it) go in
    front of the job's own LD_LIBRARY_PATH. Pinning facts become AMLHPC_* variables for
    launchers to use; CUDA_VISIBLE_DEVICES itself is left to the launcher.
    """
    lines = [HEADER, "# Source it in a job script: . /etc/amlhpc/nccl.env\n"]
    values: dict[str, str] = {}
    if topo_file:
        values["NCCL_TOPO_FILE"] = topo_file
    for key, value in env.items():
        if value is None or value == "":
            continue
        values[_check_key(key)] = str(int(value)) if isinstance(value, bool) else str(value)
    if pinning and pinning.get("known"):
        values["AMLHPC_GPU_ORDER"] = str(pinning["cuda_visible_devices"])
        values["AMLHPC_NUMA_BY_LOCAL_RANK"] = " ".join(str(n) for n in pinning["numa_by_local_rank"])
        values["AMLHPC_MPIRUN_BIND_FLAGS"] = str(pinning["mpirun_bind_flags"])
    for key, value in sorted(values.items()):
        lines.append(f"export {key}={shlex.quote(value)}\n")
    if ld_library_path:
        joined = ":".join(shlex.quote(p) for p in ld_library_path)
        lines.append(f'export LD_LIBRARY_PATH={joined}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"\n')
    return "".join(lines)


# ---------------------------------------------------------------------------------------
# What a containerised job needs of the node's NCCL set-up

def parse_env_file(text: str) -> dict[str, str]:
    """The ``export KEY=VALUE`` lines of an environment file written by :func:`nccl_env_content`
    (values shell-quoted). Lines that expand other variables (LD_LIBRARY_PATH) are left out:
    they name folders of the node, not of the job's image."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("export ") or "$" in line:
            continue
        key, sep, value = line[len("export "):].partition("=")
        if not sep:
            continue
        words = shlex.split(value)
        out[_check_key(key.strip())] = words[0] if words else ""
    return out


def job_settings(env_text: Optional[str], conf_path: str, env_path: str,
                 image_topo_file: Optional[str] = None) -> dict[str, Any]:
    """Environment variables and read-only mounts that carry the node's NCCL set-up into a job
    that runs in a container (AzureML runs every job in one): the variables of the env file,
    and the files themselves (nccl.conf, the env file, the topology file) at the same paths.

    ``env_text`` None (no env file on the node): nothing to pass."""
    if env_text is None:
        return {"environment_variables": {}, "mounts": []}
    env = parse_env_file(env_text)
    files = [conf_path, env_path]
    topo = env.get("NCCL_TOPO_FILE") or image_topo_file
    if topo:
        env["NCCL_TOPO_FILE"] = topo
        files.append(topo)
    return {"environment_variables": env, "mounts": [f"{f}:{f}" for f in dict.fromkeys(files) if f]}


# ---------------------------------------------------------------------------------------
# What the role decides for one node, from what nccl_config (or nccl_facts) read there

def node_pinning(topo_text: Optional[str], vm_size: Optional[str]) -> dict[str, Any]:
    """Pinning facts: measured from ``nvidia-smi topo -m`` text when it is complete, else
    the VM size's table (``known`` False with the reasons when neither applies)."""
    if topo_text:
        try:
            measured: dict[str, Any] = topology_pinning(topo_text)
        except NvidiaSmiParseError as exc:
            measured = {"known": False, "reason": f"nvidia-smi topo -m not understood: {exc}"}
    else:
        measured = {"known": False, "reason": "no nvidia-smi topo -m output"}
    return choose_pinning(measured, vm_size)


def config_folders(topo_file_dest: str, env_path: str) -> list[str]:
    """The folders ``node_plan`` has made for the topology file and the environment file."""
    return list(dict.fromkeys(posixpath.dirname(p) for p in (topo_file_dest, env_path)))


def node_plan(probe: Mapping[str, Any], *, vm_size: str = "", topo_file_src: str = "",
              topo_file_content: Optional[str] = None, topo_file_dest: str = "/etc/amlhpc/nccl-topo.xml",
              conf_path: str = "/etc/nccl.conf", conf_settings: Optional[Mapping[str, Any]] = None,
              conf_backup: bool = True, env_path: str = "/etc/amlhpc/nccl.env",
              env: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """Everything the nccl role decides for a node, from its probe (``imds``,
    ``sharp_plugin_dirs_found``, ``topo_m``, ``image_topo_file``, as nccl_facts returns them):

    ``facts`` (``nccl_vm_size_found``, ``nccl_vm_size_source``, ``nccl_topology`` (name and
    GPU, or None), ``nccl_topo_file_in_use``, ``nccl_pinning``), the ``directories`` and
    ``files`` to write (amlhpc_files' shapes), and ``msg``: one line on the topology in use
    and one on the pinning. ``topo_file_src`` names the user's topology file on the
    controller and ``topo_file_content`` is its text; without one, the VM size's table
    entry is rendered (the role's shipped files are the same text). Raises ValueError for
    a setting that is not a variable name or a value that spans lines."""
    imds = probe.get("imds") or {}
    imds_ok = imds.get("status") == 200
    if vm_size:
        found, source = vm_size, "inventory"
    elif imds_ok:
        found = str(((imds.get("json") or {}).get("compute") or {}).get("vmSize") or "")
        source = "instance metadata"
    else:
        found, source = "", f"unknown ({imds.get('msg') or 'instance metadata not asked'})"
    topo = topology_for_vm_size(found)
    image_file = "" if topo_file_src else str(probe.get("image_topo_file") or "")
    if topo_file_src:
        in_use = topo_file_dest
    elif image_file:
        in_use = image_file
    elif topo is not None:
        in_use = topo_file_dest
    else:
        in_use = ""
    topo_m = probe.get("topo_m") or {}
    pinning = node_pinning(topo_m.get("stdout") if topo_m.get("rc") == 0 else "", found)

    if in_use:
        origin = topo_file_src or ("the image" if image_file else f"{topo.name} table" if topo else "")
        topo_msg = f"NCCL_TOPO_FILE={in_use} from {origin}"
    else:
        topo_msg = (f"no topology file: VM size {found or 'unknown'} ({source}) has none, NCCL detects the "
                    "topology itself (set nccl_topo_file_src to give one)")
    if pinning.get("known"):
        pin_msg = (f"GPU order {pinning['cuda_visible_devices']}, NUMA by local rank "
                   f"{' '.join(str(n) for n in pinning['numa_by_local_rank'])}, mpirun {pinning['mpirun_bind_flags']} "
                   f"(from {pinning['source']})")
    else:
        pin_msg = f"no pinning facts: {pinning.get('reason', '')}"

    topo_text = ""
    if in_use == topo_file_dest:
        topo_text = topo_file_content if topo_file_src else render_topology_xml(topo)  # type: ignore[arg-type]
    directories = [{"path": d} for d in config_folders(topo_file_dest, env_path)]
    files = [
        {"path": topo_file_dest, "state": "present" if in_use == topo_file_dest else "absent", "content": topo_text or ""},
        {"path": conf_path, "content": nccl_conf_content(conf_settings or {}, in_use or None), "backup": conf_backup},
        {"path": env_path, "content": nccl_env_content(env or {}, list(probe.get("sharp_plugin_dirs_found") or [])[:1],
                                                       pinning, in_use or None)},
    ]
    facts = {"nccl_vm_size_found": found, "nccl_vm_size_source": source,
             "nccl_topology": {"name": topo.name, "gpu": topo.gpu} if topo else None,
             "nccl_topo_file_in_use": in_use, "nccl_pinning": pinning,
             # the env file as written: the submit role hands it to the job without reading it back
             "nccl_env_file": {"path": env_path, "content": files[2]["content"]}}
    return {"facts": facts, "directories": directories, "files": files, "msg": f"{topo_msg}; {pin_msg}"}
