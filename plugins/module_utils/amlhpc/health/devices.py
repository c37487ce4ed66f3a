# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Checks of one node's devices, each a plain function over text a tool printed, so the tests feed
it recorded outputs and the role what it ran on the node:

* ``nvidia-smi --query-gpu=...`` and ``--query-remapped-rows=...`` (CSV, no header, no units)
  and the kernel log (``NVRM: Xid`` lines): GPU count, uncorrectable ECC errors, pages
  pending retirement, row-remap failures, fatal XIDs; ``nvidia-smi -q`` ECC counts and
  clock slowdowns;
* InfiniBand link flaps (sysfs counters), port state and rate, ``ib_write_bw``;
* host<->device and GPU<->GPU bandwidth from NVIDIA's ``nvbandwidth`` or the CUDA samples'
  ``bandwidthTest``; NVLink status; the local NVMe count.
Standard library only."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .checks import _out, at_least, check, CRITICAL_XIDS, FAIL, PASS, skipped
from .health_ib import ib_bw_check, ib_port_checks, parse_ibstat, parse_ibv_devinfo

# --------------------------------------------------------------------------------------
# nvidia-smi
# --------------------------------------------------------------------------------------
GPU_QUERY_FIELDS = ("index", "name", "pci.bus_id", "ecc.mode.current",
                    "ecc.errors.uncorrected.volatile.total", "retired_pages.pending")
REMAP_QUERY_FIELDS = ("gpu_bus_id", "remapped_rows.correctable", "remapped_rows.uncorrectable",
                      "remapped_rows.pending", "remapped_rows.failure")


def nvidia_smi_gpu_args(binary: str = "nvidia-smi") -> list[str]:
    return [binary, "--query-gpu=" + ",".join(GPU_QUERY_FIELDS), "--format=csv,noheader,nounits"]


def nvidia_smi_remap_args(binary: str = "nvidia-smi") -> list[str]:
    return [binary, "--query-remapped-rows=" + ",".join(REMAP_QUERY_FIELDS), "--format=csv,noheader,nounits"]


def _csv_rows(text: str, fields: tuple[str, ...]) -> list[dict[str, str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            raise ValueError(f"nvidia-smi printed {len(cells)} fields where {len(fields)} were asked "
                             f"({', '.join(fields)}): {line!r}")
        rows.append(dict(zip(fields, cells)))
    return rows


def parse_gpu_query(text: str) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-gpu=<GPU_QUERY_FIELDS> --format=csv,noheader,nounits``."""
    return _csv_rows(text, GPU_QUERY_FIELDS)


def parse_remap_query(text: str) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-remapped-rows=<REMAP_QUERY_FIELDS> --format=csv,noheader,nounits``."""
    return _csv_rows(text, REMAP_QUERY_FIELDS)


def _count(value: str) -> int | None:
    """An nvidia-smi counter: an integer, or None for [N/A] / [Not Supported]."""
    value = value.strip()
    return int(value) if value.isdigit() else None


def _yes(value: str) -> bool:
    return value.strip().lower() in ("yes", "1", "true")


_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)")


def parse_xids(kernel_log: str) -> list[dict[str, Any]]:
    """``NVRM: Xid (PCI:0001:00:00): 79, pid=..., GPU has fallen off the bus.`` lines."""
    out = []
    for line in kernel_log.splitlines():
        m = _XID_RE.search(line)
        if m:
            out.append({"pci": m.group(1), "xid": int(m.group(2)), "text": m.group(3).strip()})
    return out


def gpu_checks(gpu_query: str, remap_query: str | None, kernel_log: str | None,
               expected_gpus: int | None, vm_size: str = "", kernel_log_error: str = "") -> list[dict[str, Any]]:
    """GPU count and health of one node.

    ``remap_query`` None: the driver cannot report row remapping (pre-Ampere), not gated.
    ``kernel_log`` None: the kernel log could not be read (``kernel_log_error`` says why, as the
    command said it), XIDs not gated.
    """
    try:
        gpus = parse_gpu_query(gpu_query)
    except ValueError as exc:
        return [check("gpu_count", FAIL, reason=str(exc))]
    checks = []
    where = f" for {vm_size}" if vm_size else ""
    if expected_gpus is None:
        checks.append(check("gpu_count", PASS if gpus else FAIL, len(gpus), None,
                            "no expected count for this VM size: at least one GPU required"
                            if gpus else "nvidia-smi lists no GPU"))
    elif len(gpus) == int(expected_gpus):
        checks.append(check("gpu_count", PASS, len(gpus), f"== {expected_gpus}"))
    else:
        checks.append(check("gpu_count", FAIL, len(gpus), f"== {expected_gpus}",
                            f"found {len(gpus)} GPUs, expected {expected_gpus}{where}"))

    problems = []
    for g in gpus:
        label = f"GPU {g['index']} ({g['pci.bus_id']})"
        ecc = _count(g["ecc.errors.uncorrected.volatile.total"])
        if ecc:
            problems.append(f"{label}: {ecc} uncorrectable ECC error(s) since boot")
        if _yes(g["retired_pages.pending"]):
            problems.append(f"{label}: memory pages pending retirement (needs a GPU reset)")
        if g["ecc.mode.current"].lower() == "disabled":
            problems.append(f"{label}: ECC is disabled")
    try:
        remaps = parse_remap_query(remap_query) if remap_query is not None else []
    except ValueError:
        remaps = []  # "[Not Supported]" rows: no row remapper on this GPU (pre-Ampere)
    for r in remaps:
        if _yes(r["remapped_rows.failure"]):
            problems.append(f"GPU {r['gpu_bus_id']}: row remapping failed (replace the GPU)")
        elif _yes(r["remapped_rows.pending"]):
            problems.append(f"GPU {r['gpu_bus_id']}: row remap pending (needs a GPU reset)")
    checks.append(check("gpu_health", FAIL if problems else PASS,
                        f"{len(problems)} problem(s)", "0 problems", "; ".join(problems)))

    if kernel_log is None:
        why = " ".join((kernel_log_error or "").split())[:200] or "no output"
        checks.append(skipped("gpu_xid", f"kernel log not readable, XIDs not checked: {why}"))
    else:
        fatal = [x for x in parse_xids(kernel_log) if x["xid"] in CRITICAL_XIDS]
        seen = sorted({(x["pci"], x["xid"]) for x in fatal})
        reason = "; ".join(f"Xid {xid} on PCI {pci}" for pci, xid in seen)
        checks.append(check("gpu_xid", FAIL if fatal else PASS, f"{len(seen)} critical",
                            "0 critical", reason))
    return checks


# --------------------------------------------------------------------------------------
# ECC counts, row remaps, clock slowdowns (nvidia-smi -q -d ECC / PERFORMANCE)
# --------------------------------------------------------------------------------------
def nvidia_smi_q_args(binary: str, display: str) -> list[str]:
    """``nvidia-smi -q -d <display>`` (ECC, PERFORMANCE): the tool's own report, every GPU."""
    return [binary, "-q", "-d", display]


_Q_GPU = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)\s*$")
_Q_LINE = re.compile(r"^(\s+)(\S.*?)\s*(?::\s*(.*?))?\s*$")


def parse_nvidia_smi_q(text: str) -> dict[str, dict[str, str]]:
    """``nvidia-smi -q`` (any ``-d``): per GPU (its bus id), every value under its section path
    (``"ECC Errors/Volatile/SRAM Correctable": "0"``), sections known by their indent."""
    gpus: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        m = _Q_GPU.match(line)
        if m:
            current, stack = gpus.setdefault(m.group(1), {}), []
            continue
        m = _Q_LINE.match(line)
        if current is None or not m:
            continue
        indent, key, value = len(m.group(1)), m.group(2).strip(), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([*(k for _i, k in stack), key])
        if value is None:
            stack.append((indent, key))
        else:
            current[path] = value.strip()
    return gpus


def _q_count(values: Mapping[str, str], *keys: str) -> int | None:
    counts = [_count(values[k]) for k in keys if k in values]
    known = [c for c in counts if c is not None]
    return max(known) if known else None


def ecc_counts_check(ecc_q: str | None, remap_query: str | None, limits: Mapping[str, Any],
                     error: str = "") -> dict[str, Any]:
    """``gpu_ecc_counts``: correctable ECC errors in SRAM and DRAM (``nvidia-smi -q -d ECC``,
    volatile and aggregate) and rows remapped for uncorrectable errors (``--query-remapped-rows``),
    the largest of any GPU against the size's ``ecc_sram_correctable_max``,
    ``ecc_dram_correctable_max`` and ``remap_uncorrectable_max`` (AzNHC's check_gpu_ecc)."""
    if ecc_q is None:
        why = " ".join((error or "no output").split())[:200]
        return skipped("gpu_ecc_counts", f"nvidia-smi -q -d ECC did not answer: {why}")
    gpus = parse_nvidia_smi_q(ecc_q)
    sram = {bus: _q_count(v, "ECC Errors/Volatile/SRAM Correctable", "ECC Errors/Aggregate/SRAM Correctable")
            for bus, v in gpus.items()}
    dram = {bus: _q_count(v, "ECC Errors/Volatile/DRAM Correctable", "ECC Errors/Aggregate/DRAM Correctable")
            for bus, v in gpus.items()}
    try:
        remaps = {r["gpu_bus_id"]: _count(r["remapped_rows.uncorrectable"])
                  for r in (parse_remap_query(remap_query) if remap_query is not None else [])}
    except ValueError:
        remaps = {}
    figures = {"SRAM": (sram, limits.get("ecc_sram_correctable_max"), "correctable SRAM ECC error(s)"),
               "DRAM": (dram, limits.get("ecc_dram_correctable_max"), "correctable DRAM ECC error(s)"),
               "remaps": (remaps, limits.get("remap_uncorrectable_max"), "row(s) remapped for uncorrectable errors")}
    if not any(v is not None for counts, _limit, _what in figures.values() for v in counts.values()):
        return skipped("gpu_ecc_counts", "this GPU or driver reports no SRAM/DRAM ECC split and no row remaps "
                                         "(V100 and older): not checked")
    value, threshold, problems = [], [], []
    for label, (counts, limit, what) in figures.items():
        known = {bus: c for bus, c in counts.items() if c is not None}
        if not known:
            continue
        worst = max(known.values())
        value.append(f"{label} {worst}")
        if limit is not None:
            threshold.append(f"{label} <= {int(limit)}")
            problems += [f"GPU {bus}: {c} {what} (more than {int(limit)})" for bus, c in known.items() if c > limit]
    if not threshold:
        return check("gpu_ecc_counts", PASS, ", ".join(value), None, "no threshold for this VM size: reported, not gated")
    return check("gpu_ecc_counts", FAIL if problems else PASS, ", ".join(value), ", ".join(threshold),
                 "; ".join(problems))


# nvidia-smi -q -d PERFORMANCE: "Clocks Event Reasons" (driver 535.54.03 on; "Clocks Throttle
# Reasons" before). The ones that mean the hardware is slowing the GPU down (healthagent's
# get_throttle_reasons): the rest (idle, application clocks, SW power cap, sync boost) are normal.
SLOWDOWN_REASONS = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown")
_REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")


def throttle_check(perf_q: str | None, limits: Mapping[str, Any], error: str = "") -> dict[str, Any]:
    """``gpu_throttle``: GPUs whose clocks a hardware, hardware-thermal, power-brake or
    software-thermal slowdown holds down, against the size's ``gpu_slowdown_max`` (AzNHC's
    check_gpu_clock_throttling)."""
    if perf_q is None:
        why = " ".join((error or "no output").split())[:200]
        return skipped("gpu_throttle", f"nvidia-smi -q -d PERFORMANCE did not answer: {why}")
    gpus = parse_nvidia_smi_q(perf_q)
    slowed: dict[str, list[str]] = {}
    seen = False
    for bus, values in gpus.items():
        for path, state in values.items():
            parts = path.split("/")
            if parts[0] in _REASON_SECTIONS:
                seen = True
                if parts[-1] in SLOWDOWN_REASONS and state.lower() == "active":
                    slowed.setdefault(bus, []).append(parts[-1])
    if not seen:
        return skipped("gpu_throttle", "nvidia-smi -q -d PERFORMANCE printed no clocks event reasons: not checked")
    limit = limits.get("gpu_slowdown_max")
    value = f"{len(slowed)} GPU(s) slowed"
    reason = "; ".join(f"GPU {bus}: {', '.join(r)} active" for bus, r in sorted(slowed.items()))
    if limit is None:
        return check("gpu_throttle", PASS, value, None, reason or "no threshold for this VM size: reported, not gated")
    return check("gpu_throttle", FAIL if len(slowed) > int(limit) else PASS, value, f"<= {int(limit)} GPU(s)", reason)


# --------------------------------------------------------------------------------------
# InfiniBand link flaps (/sys/class/infiniband/<hca>/ports/<port>/counters/link_downed)
# --------------------------------------------------------------------------------------
IB_SYSFS = "/sys/class/infiniband"
_IB_FILE = re.compile(r"^(?:.*/)?([^/\s]+)/ports/(\d+)/(?:counters/)?(link_downed|link_layer):\s*(.*?)\s*$")


def parse_ib_counters(text: str) -> dict[str, dict[str, str]]:
    """``grep -H . /sys/class/infiniband/*/ports/*/link_layer
    /sys/class/infiniband/*/ports/*/counters/link_downed`` (``<path>:<value>`` lines):
    ``{"mlx5_ib0:1": {"link_layer": "InfiniBand", "link_downed": "0"}}``."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = _IB_FILE.match(line.strip())
        if m:
            out.setdefault(f"{m.group(1)}:{m.group(2)}", {})[m.group(3)] = m.group(4)
    return out


def ib_flaps_check(counters: str | None, limit: Any) -> dict[str, Any]:
    """``ib_link_flaps``: how often each InfiniBand port's link went down since boot (its
    ``link_downed`` counter; Ethernet ports such as ``mlx5_an0`` left out), against the size's
    ``ib_link_downed_max`` (AzNHC's check_ib_link_flapping)."""
    ports = {p: v for p, v in parse_ib_counters(counters or "").items()
             if v.get("link_layer", "InfiniBand").lower() == "infiniband" and "link_downed" in v}
    if not ports:
        return skipped("ib_link_flaps", f"no InfiniBand port counters under {IB_SYSFS}: not checked")
    downs = {p: _count(v["link_downed"]) for p, v in ports.items()}
    known = {p: c for p, c in downs.items() if c is not None}
    worst = max(known.values()) if known else 0
    value = f"{worst} link-down(s) on the worst of {len(ports)} port(s)"
    if limit is None:
        return check("ib_link_flaps", PASS, value, None, "no threshold for this VM size: reported, not gated")
    flapping = sorted((p, c) for p, c in known.items() if c > int(limit))
    return check("ib_link_flaps", FAIL if flapping else PASS, value, f"<= {int(limit)} per port",
                 "; ".join(f"{p} went down {c} times since boot (a flapping link: its cable or port)"
                           for p, c in flapping))


# --------------------------------------------------------------------------------------
# Host <-> device bandwidth
# --------------------------------------------------------------------------------------
_NVBW_RUNNING = re.compile(r"^Running (\S+?)\.?\s*$")
_NVBW_ROW = re.compile(r"^\s*(\d+)((?:\s+(?:[\d.]+|N/A))+)\s*$")


def _nvbandwidth_matrices(text: str) -> dict[str, dict[tuple[int, int], float]]:
    """``nvbandwidth`` text output: {testcase: {(row, column): GB/s}}, N/A cells left out."""
    out: dict[str, dict[tuple[int, int], float]] = {}
    current = None
    header: list[int] = []
    for line in text.splitlines():
        m = _NVBW_RUNNING.match(line.strip())
        if m:
            current, header = m.group(1), []
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped and all(tok.isdigit() for tok in stripped.split()) and not header:
            header = [int(t) for t in stripped.split()]
            continue
        row = _NVBW_ROW.match(line)
        if header and row:
            src = int(row.group(1))
            out.setdefault(current, {}).update(
                {(src, col): float(v) for col, v in zip(header, row.group(2).split()) if v != "N/A"})
    return out


def parse_nvbandwidth(text: str) -> dict[str, dict[int, float]]:
    """``nvbandwidth`` text output: {testcase: {gpu: GB/s}} for the CPU<->GPU testcases.

    A host<->device matrix has one row (the CPU) and a column per GPU.
    """
    out: dict[str, dict[int, float]] = {}
    for testcase, cells in _nvbandwidth_matrices(text).items():
        if testcase.startswith(("host_to_device", "device_to_host")):
            for (_row, gpu), value in cells.items():
                out.setdefault(testcase, {})[gpu] = value
    return out


_BT_SECTION = re.compile(r"(Host to Device|Device to Host|Device to Device) Bandwidth, (\d+) Device\(s\)")
_BT_UNIT = re.compile(r"Bandwidth\s*\((GB/s|MB/s)\)")
_BT_ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s*$")


def parse_bandwidth_test(text: str) -> dict[str, float]:
    """CUDA samples ``bandwidthTest`` output: {"h2d", "d2h", "d2d"} in GB/s per device.

    The figure of the largest transfer size is used; with ``--device=all`` bandwidthTest
    prints the SUM over the devices, so it is divided by the device count. Samples before
    CUDA 10 print "MB/s", which their code computes as 2^20 bytes/s; newer ones print GB/s
    (10^9 bytes/s).
    """
    names = {"Host to Device": "h2d", "Device to Host": "d2h", "Device to Device": "d2d"}
    out: dict[str, float] = {}
    section = None
    devices = 1
    scale = 1.0
    best_size = -1
    for line in text.splitlines():
        m = _BT_SECTION.search(line)
        if m:
            section, devices, best_size = names[m.group(1)], int(m.group(2)), -1
            continue
        u = _BT_UNIT.search(line)
        if u:
            scale = 1.0 if u.group(1) == "GB/s" else 1.048576e-3
            continue
        r = _BT_ROW.match(line)
        if section and r and int(r.group(1)) > best_size:
            best_size = int(r.group(1))
            out[section] = float(r.group(2)) * scale / max(devices, 1)
    return out


def h2d_check(tool: str, outputs: list[str], minimum: float | None) -> dict[str, Any]:
    """The host<->device check from nvbandwidth (one output) or bandwidthTest (one per GPU)."""
    per_gpu: dict[str, float] = {}
    if tool == "nvbandwidth":
        parsed = parse_nvbandwidth("\n".join(outputs))
        for test, label in (("host_to_device_memcpy_ce", "H2D"), ("device_to_host_memcpy_ce", "D2H")):
            for gpu, bw in parsed.get(test, {}).items():
                per_gpu[f"GPU {gpu} {label}"] = bw
    elif tool == "bandwidthTest":
        for gpu, out in enumerate(outputs):
            parsed = parse_bandwidth_test(out)
            for key, label in (("h2d", "H2D"), ("d2h", "D2H")):
                if key in parsed:
                    per_gpu[f"GPU {gpu} {label}"] = parsed[key]
    else:
        raise ValueError(f"unknown bandwidth tool {tool!r}: nvbandwidth or bandwidthTest")
    if not per_gpu:
        return check("h2d_bandwidth", FAIL, reason=f"{tool} printed no host<->device figure")
    worst = min(per_gpu, key=per_gpu.__getitem__)
    result = at_least("h2d_bandwidth", per_gpu[worst], minimum, "GB/s", f"{worst} bandwidth")
    result["value"] += f" (min of {len(per_gpu)}, {worst})"
    return result


# --------------------------------------------------------------------------------------
# NVLink and local NVMe
# --------------------------------------------------------------------------------------
_NVLINK_GPU = re.compile(r"^GPU (\d+): ")
_NVLINK_LINK = re.compile(r"^\s*Link (\d+): (.*?)\s*$")


def parse_nvlink_status(text: str) -> dict[int, dict[int, float | None]]:
    """``nvidia-smi nvlink -s``: {gpu: {link: GB/s, or None where it says <inactive>}}.

    A GPU without NVLink (PCIe cards) is listed with no links, or not at all."""
    out: dict[int, dict[int, float | None]] = {}
    gpu = None
    for line in text.splitlines():
        m = _NVLINK_GPU.match(line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = {}
            continue
        m = _NVLINK_LINK.match(line)
        if m and gpu is not None:
            speed = re.match(r"([\d.]+)\s*GB/s", m.group(2))
            out[gpu][int(m.group(1))] = float(speed.group(1)) if speed else None
    return out


def nvlink_check(text: str) -> dict[str, Any]:
    """``nvlink``: fails on any link nvidia-smi shows inactive (aznhc check_nvlink_status,
    customTests/azure_gpu_nvlink.nhc); a node without NVLink is reported, not gated."""
    links = parse_nvlink_status(text)
    total = sum(len(v) for v in links.values())
    if not total:
        return check("nvlink", PASS, "no NVLink", reason="nvidia-smi shows no NVLink on this node: not gated")
    inactive = [f"GPU {gpu} link {link}" for gpu, per in sorted(links.items())
                for link, speed in sorted(per.items()) if speed is None]
    return check("nvlink", FAIL if inactive else PASS, f"{total - len(inactive)} of {total} active", "all active",
                 f"inactive: {', '.join(inactive)}" if inactive else "")


def nvme_check(devices: Iterable[str], expected: int | None) -> dict[str, Any]:
    """``nvme_count``: local NVMe namespaces (``/dev/nvme*n1``, as aznhc check_nvme_count counts)."""
    found = sorted(devices)
    if expected is None:
        return check("nvme_count", PASS, len(found), reason="no expected count for this VM size: reported, not gated")
    if len(found) == int(expected):
        return check("nvme_count", PASS, len(found), f"== {int(expected)}")
    return check("nvme_count", FAIL, len(found), f"== {int(expected)}",
                 f"found {len(found)} NVMe disk(s), expected {int(expected)}")


def ib_checks(probe: Mapping[str, Any], limits: Mapping[str, Any], tool_names: Mapping[str, str]) -> list[dict[str, Any]]:
    """InfiniBand ports (ibstat, else ibv_devinfo -v) and, where perftest is there, ib_bw."""
    tools = probe.get("tools") or {}
    if tools.get("ibstat") and probe.get("ibstat"):
        run, tool, parse = probe["ibstat"], "ibstat", parse_ibstat
    elif tools.get("ibv_devinfo") and probe.get("ibv_devinfo"):
        run, tool, parse = probe["ibv_devinfo"], "ibv_devinfo", parse_ibv_devinfo
    else:
        reason = (f"neither {tool_names.get('ibstat', 'ibstat')} nor {tool_names.get('ibv_devinfo', 'ibv_devinfo')} "
                  "found: InfiniBand not checked")
        return [skipped(name, reason) for name in ("ib_ports", "ib_rate", "ib_bw")]
    if run.get("rc") != 0:
        why = " ".join(_out(run).split())[:200]
        out = [check("ib_ports", FAIL, reason=f"{tool} failed: {why}"), skipped("ib_rate", f"{tool} failed")]
    else:
        out = ib_port_checks(parse(str(run.get("stdout", ""))), limits.get("ib_ports"), limits.get("ib_rate_gbps"), tool)
    bw = probe.get("ib_write_bw")
    if not tools.get("ib_write_bw"):
        out.append(skipped("ib_bw", f"{tool_names.get('ib_write_bw', 'ib_write_bw')} (perftest) not found"))
    elif not bw:
        out.append(skipped("ib_bw", "no active InfiniBand port to measure"))
    else:
        out.append(ib_bw_check({hca: _out(r) for hca, r in bw.items()}, limits.get("ib_bw_gbps")))
    return out


P2P_TESTCASE = "device_to_device_memcpy_read_ce"


def parse_nvbandwidth_p2p(text: str) -> dict[tuple[int, int], float]:
    """``nvbandwidth -t device_to_device_memcpy_read_ce``: {(row GPU, column GPU): GB/s}, the
    diagonal (N/A) left out."""
    return _nvbandwidth_matrices(text).get(P2P_TESTCASE, {})


def p2p_check(text: str, minimum: float | None) -> dict[str, Any]:
    """``p2p_bandwidth``: the slowest GPU pair's copy (aznhc check_gpu_bw's second figure)."""
    pairs = parse_nvbandwidth_p2p(text)
    if not pairs:
        return check("p2p_bandwidth", FAIL, reason=f"nvbandwidth printed no {P2P_TESTCASE} figure")
    worst = min(pairs, key=pairs.__getitem__)
    result = at_least("p2p_bandwidth", pairs[worst], minimum, "GB/s", f"GPU {worst[0]} <- GPU {worst[1]} copy")
    result["value"] += f" (min of {len(pairs)} pairs, GPU {worst[0]} <- GPU {worst[1]})"
    if minimum is not None:
        slow = sorted(k for k, v in pairs.items() if v < float(minimum))
        if len(slow) > 1:
            result["reason"] += f"; {len(slow)} pairs below: " + ", ".join(f"{a}<-{b}" for a, b in slow)
    return result
