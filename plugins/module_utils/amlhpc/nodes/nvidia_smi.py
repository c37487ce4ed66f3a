# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Reading ``nvidia-smi`` output and deciding what to change.

Plain functions over the text ``nvidia-smi`` prints, so that they can be tested on output
recorded from V100, A100 and H100 machines:

* ``--query-gpu=... --format=csv,noheader,nounits``: per-GPU clocks, where a field the GPU
  cannot report reads ``[N/A]`` or ``[Not Supported]``;
* ``--query-supported-clocks=...``: the (memory, graphics) pairs ``-ac`` accepts;
* ``topo -m``: the GPU/NIC matrix with each GPU's CPU and NUMA affinity.

Nothing here runs a command: the ``nvidia_gpu_clocks`` module and the ``nccl`` role do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

# The fields the clock module reads, in this order (names as `nvidia-smi --help-query-gpu`).
CLOCK_FIELDS: tuple[str, ...] = (
    "index",
    "pci.bus_id",
    "name",
    "clocks.max.graphics",
    "clocks.max.memory",
    "clocks.applications.graphics",
    "clocks.applications.memory",
    "clocks.default_applications.graphics",
    "clocks.default_applications.memory",
)
SUPPORTED_CLOCK_FIELDS: tuple[str, ...] = ("gpu_bus_id", "memory", "graphics")

# What nvidia-smi prints (csv) for a value the GPU or driver does not give.
UNAVAILABLE = frozenset({"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]",
                         "[Insufficient Permissions]", "[GPU is lost]", ""})


class NvidiaSmiParseError(ValueError):
    """Output that does not have the shape nvidia-smi prints."""


def query_gpu_argv(nvidia_smi: str = "nvidia-smi", fields: Sequence[str] = CLOCK_FIELDS) -> list[str]:
    return [nvidia_smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def query_supported_clocks_argv(nvidia_smi: str = "nvidia-smi") -> list[str]:
    return [nvidia_smi, f"--query-supported-clocks={','.join(SUPPORTED_CLOCK_FIELDS)}",
            "--format=csv,noheader,nounits"]


def set_clocks_argv(index: int, memory_mhz: int, graphics_mhz: int, nvidia_smi: str = "nvidia-smi") -> list[str]:
    """``-ac`` takes MEMORY,GRAPHICS, in that order."""
    return [nvidia_smi, "-i", str(index), "-ac", f"{memory_mhz},{graphics_mhz}"]


def reset_clocks_argv(index: int, nvidia_smi: str = "nvidia-smi") -> list[str]:
    return [nvidia_smi, "-i", str(index), "-rac"]


def normalize_bus_id(bus_id: str) -> str:
    """``00000001:00:00.0`` (nvidia-smi) and ``0001:00:00.0`` (lspci, NCCL) name one device."""
    text = bus_id.strip().lower()
    match = re.fullmatch(r"([0-9a-f]+):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])", text)
    if not match:
        raise NvidiaSmiParseError(f"not a PCI bus id: {bus_id!r}")
    domain = int(match.group(1), 16)
    return f"{domain:04x}:{match.group(2)}:{match.group(3)}.{match.group(4)}"


def _value(text: str) -> Optional[str]:
    text = text.strip()
    return None if text in UNAVAILABLE else text


def _mhz(text: Optional[str], field_name: str) -> Optional[int]:
    if text is None:
        return None
    value = text.split()[0]  # "1410 MHz" when "nounits" was left out
    try:
        return int(float(value))
    except ValueError as exc:
        raise NvidiaSmiParseError(f"{field_name}: expected MHz, got {text!r}") from exc


def parse_csv_rows(text: str, fields: Sequence[str]) -> list[dict[str, Optional[str]]]:
    """Rows of ``--format=csv,noheader``: one dict per line, unavailable values as None.

    Names can hold commas only in theory ("NVIDIA A100-SXM4-80GB" has none); a row with
    more cells than fields is refused rather than guessed at.
    """
    rows: list[dict[str, Optional[str]]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            raise NvidiaSmiParseError(
                f"line {lineno}: {len(cells)} values for {len(fields)} fields "
                f"({', '.join(fields)}): {line!r}")
        rows.append({f: _value(c) for f, c in zip(fields, cells)})
    return rows


@dataclass(frozen=True)
class GpuClocks:
    """One GPU's clocks, in MHz; None where nvidia-smi said [N/A] or [Not Supported]."""

    index: int
    bus_id: str
    name: str
    max_graphics: Optional[int]
    max_memory: Optional[int]
    app_graphics: Optional[int]
    app_memory: Optional[int]
    default_graphics: Optional[int]
    default_memory: Optional[int]

    @property
    def application(self) -> dict[str, Optional[int]]:
        return {"graphics": self.app_graphics, "memory": self.app_memory}


def parse_clock_query(text: str) -> list[GpuClocks]:
    """Parse ``nvidia-smi --query-gpu=<CLOCK_FIELDS> --format=csv,noheader,nounits``."""
    gpus = []
    for row in parse_csv_rows(text, CLOCK_FIELDS):
        if row["index"] is None or row["pci.bus_id"] is None:
            raise NvidiaSmiParseError(f"a GPU without index or bus id: {row}")
        gpus.append(GpuClocks(
            index=int(row["index"]),
            bus_id=normalize_bus_id(row["pci.bus_id"]),
            name=row["name"] or "unknown",
            max_graphics=_mhz(row["clocks.max.graphics"], "clocks.max.graphics"),
            max_memory=_mhz(row["clocks.max.memory"], "clocks.max.memory"),
            app_graphics=_mhz(row["clocks.applications.graphics"], "clocks.applications.graphics"),
            app_memory=_mhz(row["clocks.applications.memory"], "clocks.applications.memory"),
            default_graphics=_mhz(row["clocks.default_applications.graphics"],
                                  "clocks.default_applications.graphics"),
            default_memory=_mhz(row["clocks.default_applications.memory"],
                                "clocks.default_applications.memory"),
        ))
    return sorted(gpus, key=lambda g: g.index)


def parse_supported_clocks(text: str) -> dict[str, dict[int, set[int]]]:
    """``--query-supported-clocks=gpu_bus_id,memory,graphics``: bus id -> memory -> graphics set."""
    table: dict[str, dict[int, set[int]]] = {}
    for row in parse_csv_rows(text, SUPPORTED_CLOCK_FIELDS):
        if row["gpu_bus_id"] is None:
            continue
        memory = _mhz(row["memory"], "memory")
        graphics = _mhz(row["graphics"], "graphics")
        if memory is None or graphics is None:
            continue
        table.setdefault(normalize_bus_id(row["gpu_bus_id"]), {}).setdefault(memory, set()).add(graphics)
    return table


@dataclass
class ClockPlan:
    """What to do with one GPU: ``action`` is ``set``, ``ok`` (already there) or ``skip``."""

    gpu: GpuClocks
    action: str
    target: Optional[dict[str, int]] = None
    reason: str = ""

    def result(self) -> dict[str, Any]:
        return {
            "index": self.gpu.index,
            "bus_id": self.gpu.bus_id,
            "name": self.gpu.name,
            "before": dict(self.gpu.application),
            "target": dict(self.target) if self.target else None,
            "action": self.action,
            "reason": self.reason,
        }


def _target(gpu: GpuClocks, graphics_mhz: Optional[int], memory_mhz: Optional[int],
            supported: Optional[Mapping[str, Mapping[int, Iterable[int]]]]) -> tuple[Optional[dict[str, int]], str]:
    memory = memory_mhz or gpu.max_memory
    graphics = graphics_mhz or gpu.max_graphics
    if memory is None or graphics is None:
        return None, "not supported: the GPU reports no maximum clocks; skipped"
    pairs = (supported or {}).get(gpu.bus_id)
    if pairs:
        if memory not in pairs:
            return None, (f"memory clock {memory} MHz is not supported (supported: "
                          f"{', '.join(str(m) for m in sorted(pairs, reverse=True))})")
        if graphics not in set(pairs[memory]):
            top = max(pairs[memory])
            return None, (f"graphics clock {graphics} MHz is not supported with memory {memory} MHz "
                          f"(highest: {top} MHz)")
    elif graphics_mhz or memory_mhz:
        if gpu.max_memory is not None and memory > gpu.max_memory:
            return None, f"memory clock {memory} MHz is above the maximum {gpu.max_memory} MHz"
        if gpu.max_graphics is not None and graphics > gpu.max_graphics:
            return None, f"graphics clock {graphics} MHz is above the maximum {gpu.max_graphics} MHz"
    return {"graphics": graphics, "memory": memory}, ""


def plan_pin(gpus: Iterable[GpuClocks], graphics_mhz: Optional[int] = None, memory_mhz: Optional[int] = None,
             supported: Optional[Mapping[str, Mapping[int, Iterable[int]]]] = None,
             indices: Optional[Iterable[int]] = None) -> list[ClockPlan]:
    """Decide, per GPU, whether ``-ac`` is needed to reach the target application clocks.

    The target is each GPU's maximum clocks unless ``graphics_mhz``/``memory_mhz`` say
    otherwise; with ``supported`` (from ``--query-supported-clocks``) the pair is checked
    against what the GPU accepts. A GPU whose application clocks read [N/A] or
    [Not Supported] is skipped with that reason: setting them would fail.
    """
    wanted = None if indices is None else set(indices)
    plans = []
    for gpu in gpus:
        if wanted is not None and gpu.index not in wanted:
            continue
        if gpu.app_graphics is None or gpu.app_memory is None:
            plans.append(ClockPlan(gpu, "skip", reason="not supported: application clocks read N/A; skipped"))
            continue
        target, problem = _target(gpu, graphics_mhz, memory_mhz, supported)
        if target is None:
            action = "skip" if problem.startswith("not supported") else "invalid"
            plans.append(ClockPlan(gpu, action, reason=problem))
        elif target == {"graphics": gpu.app_graphics, "memory": gpu.app_memory}:
            plans.append(ClockPlan(gpu, "ok", target, "already at the target clocks"))
        else:
            plans.append(ClockPlan(gpu, "set", target,
                                   f"{gpu.app_memory},{gpu.app_graphics} -> {target['memory']},{target['graphics']}"))
    return plans


def plan_reset(gpus: Iterable[GpuClocks], indices: Optional[Iterable[int]] = None) -> list[ClockPlan]:
    """Decide, per GPU, whether ``-rac`` is needed: only where clocks differ from the defaults."""
    wanted = None if indices is None else set(indices)
    plans = []
    for gpu in gpus:
        if wanted is not None and gpu.index not in wanted:
            continue
        default = {"graphics": gpu.default_graphics, "memory": gpu.default_memory}
        if None in (gpu.app_graphics, gpu.app_memory, gpu.default_graphics, gpu.default_memory):
            plans.append(ClockPlan(gpu, "skip", reason="not supported: application clocks read N/A; skipped"))
        elif default == gpu.application:
            plans.append(ClockPlan(gpu, "ok", default, "already at the default clocks"))  # type: ignore[arg-type]
        else:
            plans.append(ClockPlan(gpu, "set", default,  # type: ignore[arg-type]
                                   f"{gpu.app_memory},{gpu.app_graphics} -> default "
                                   f"{gpu.default_memory},{gpu.default_graphics}"))
    return plans


# ---------------------------------------------------------------------------------------
# nvidia-smi topo -m

# Connection types from nearest to farthest (the legend nvidia-smi prints under the matrix).
LINK_RANK = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}


def link_rank(link: str) -> int:
    if link.startswith("NV") and link != "NODE":
        return LINK_RANK["NV"]
    return LINK_RANK.get(link, 99)


def parse_cpu_list(text: Optional[str]) -> list[int]:
    """``0-23,48-71`` -> [0, ..., 23, 48, ..., 71]; N/A -> []."""
    if text is None or text in UNAVAILABLE:
        return []
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            cpus.extend(range(int(low), int(high) + 1))
        else:
            cpus.append(int(part))
    return cpus


@dataclass
class TopoGpu:
    index: int
    cpu_affinity: str
    numa_node: Optional[int]
    nearest_nics: list[str] = field(default_factory=list)
    nic_link: Optional[str] = None


@dataclass
class Topology:
    gpus: list[TopoGpu]
    nics: list[str]
    links: dict[str, dict[str, str]]


_CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def parse_topo_matrix(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m`` (tab or space separated, with or without a NIC legend).

    Column heads are GPU0..GPUn, then NICs (``NIC0`` with a "NIC Legend" below, or the
    device names such as ``mlx5_0`` in older drivers), then ``CPU Affinity``, ``NUMA
    Affinity`` and ``GPU NUMA ID`` when the driver prints them.
    """
    # Drivers of the 580 series underline the head row with terminal escapes (ESC[4m ... ESC[0m)
    # even when the output is a pipe: drop every CSI sequence before reading the columns.
    lines = [_CSI.sub("", line).rstrip() for line in text.splitlines()]
    # The head row starts with GPU0 (after a tab or spaces); the GPU0 row follows it with " X ".
    header_at = next((i for i, line in enumerate(lines)
                      if line.split()[:1] == ["GPU0"] and line.split()[1:2] != ["X"]), None)
    if header_at is None:
        raise NvidiaSmiParseError("no GPU0 column head: not the output of `nvidia-smi topo -m`")
    head = lines[header_at].split()
    if "CPU" in head:
        columns = head[:head.index("CPU")]
    else:
        columns = head
    trailing = " ".join(head[len(columns):])
    has_numa = "NUMA Affinity" in trailing

    legend = {}
    for line in lines:
        match = re.fullmatch(r"\s*(NIC\d+):\s*(\S+)\s*", line)
        if match:
            legend[match.group(1)] = match.group(2)

    gpus: list[TopoGpu] = []
    links: dict[str, dict[str, str]] = {}
    for line in lines[header_at + 1:]:
        if not line.strip():
            continue
        if line.strip().startswith("Legend"):
            break
        tokens = line.split()
        name, values = tokens[0], tokens[1:]
        if len(values) < len(columns):
            raise NvidiaSmiParseError(f"row {name}: {len(values)} values for {len(columns)} columns")
        row = dict(zip(columns, values[:len(columns)]))
        rest = values[len(columns):]
        links[legend.get(name, name)] = {legend.get(c, c): v for c, v in row.items()}
        match = re.fullmatch(r"GPU(\d+)", name)
        if not match:
            continue
        cpu = rest[0] if rest else "N/A"
        numa: Optional[int] = None
        if has_numa and len(rest) > 1 and rest[1] not in UNAVAILABLE:
            try:
                numa = int(rest[1])
            except ValueError:
                numa = None
        gpus.append(TopoGpu(index=int(match.group(1)), cpu_affinity=cpu, numa_node=numa))

    nic_columns = [c for c in columns if not re.fullmatch(r"GPU\d+", c)]
    nics = [legend.get(c, c) for c in nic_columns]
    for gpu in gpus:
        row = links[f"GPU{gpu.index}"]
        ranks = {n: link_rank(row[n]) for n in nics if n in row}
        if ranks:
            best = min(ranks.values())
            gpu.nearest_nics = [n for n in nics if ranks.get(n) == best]  # in column order
            gpu.nic_link = row[gpu.nearest_nics[0]]
    return Topology(gpus=sorted(gpus, key=lambda g: g.index), nics=nics, links=links)


def pinning_facts(numa_of_gpu: Mapping[int, Optional[int]], cpus_of_numa: Optional[Mapping[int, str]] = None,
                  source: str = "nvidia-smi topo -m") -> dict[str, Any]:
    """GPU-to-NUMA pinning for launchers, from each GPU's NUMA node.

    Local rank r runs on the r-th GPU of ``cuda_visible_devices`` (GPUs ordered by NUMA
    node, then index) and is bound to that GPU's NUMA node: with Open MPI
    ``--map-by ppr:K:numa --bind-to numa`` puts ranks 0..K-1 on NUMA node 0, and so on,
    which is the same order; torchrun ranks use ``numactl`` with ``numa_by_local_rank``.
    Returns ``{"known": False, ...}`` when any GPU's NUMA node is unknown.
    """
    if not numa_of_gpu or any(n is None for n in numa_of_gpu.values()):
        return {"known": False, "source": source, "reason": "NUMA affinity not reported for every GPU"}
    order = sorted(numa_of_gpu, key=lambda g: (numa_of_gpu[g], g))
    per_numa: dict[int, list[int]] = {}
    for gpu in order:
        per_numa.setdefault(int(numa_of_gpu[gpu]), []).append(gpu)  # type: ignore[arg-type]
    counts = {len(v) for v in per_numa.values()}
    numa_by_rank = [int(numa_of_gpu[g]) for g in order]  # type: ignore[arg-type]
    facts: dict[str, Any] = {
        "known": True,
        "source": source,
        "gpu_numa": {str(g): int(numa_of_gpu[g]) for g in sorted(numa_of_gpu)},  # type: ignore[arg-type]
        "numa_gpus": {str(n): gpus for n, gpus in sorted(per_numa.items())},
        "cuda_visible_devices": ",".join(str(g) for g in order),
        "numa_by_local_rank": numa_by_rank,
        "numactl_by_local_rank": [f"numactl --cpunodebind={n} --membind={n}" for n in numa_by_rank],
    }
    if len(counts) == 1:
        facts["mpirun_bind_flags"] = f"--map-by ppr:{counts.pop()}:numa --bind-to numa"
    else:
        facts["mpirun_bind_flags"] = "--bind-to numa"
    if cpus_of_numa:
        facts["cpus_by_local_rank"] = [cpus_of_numa.get(n, "") for n in numa_by_rank]
    return facts


def topology_pinning(text: str) -> dict[str, Any]:
    """Pinning facts straight from ``nvidia-smi topo -m`` output, plus the nearest NICs."""
    topo = parse_topo_matrix(text)
    facts = pinning_facts({g.index: g.numa_node for g in topo.gpus},
                          {g.numa_node: g.cpu_affinity for g in topo.gpus if g.numa_node is not None})
    facts["nearest_nics"] = {str(g.index): g.nearest_nics for g in topo.gpus}
    return facts
