# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Checks of the node's and the cluster's throughput: the table nccl-tests (``all_reduce_perf``,
``alltoall_perf``) print, elbencho's result table or its ``--csvfile``, and the project's own
reader (:mod:`amlhpc.health.fsbench`). Standard library only."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from typing import Any

from .checks import at_least, check, FAIL

# --------------------------------------------------------------------------------------
# nccl-tests
# --------------------------------------------------------------------------------------
_NCCL_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")
_NCCL_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_NCCL_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)")


def parse_nccl_tests(text: str) -> dict[str, Any]:
    """The result table of an nccl-tests binary (``all_reduce_perf``, ``alltoall_perf``...).

    Returns ``{"rows": [...], "avg_busbw", "out_of_bounds", "wrong"}``; each row has size,
    count, type, redop, root and the out-of-place / in-place time (us), algbw and busbw (GB/s)
    and #wrong ("N/A" when the test did not check, counted as 0). Lines the MPI launcher or
    NCCL_DEBUG interleave are ignored.
    """
    rows = []
    wrong = 0
    for line in text.splitlines():
        m = _NCCL_ROW.match(line)
        if not m:
            continue
        g = m.groups()
        row = {"size": int(g[0]), "count": int(g[1]), "type": g[2], "redop": g[3], "root": int(g[4]),
               "oop_time_us": float(g[5]), "oop_algbw": float(g[6]), "oop_busbw": float(g[7]),
               "oop_wrong": g[8], "ip_time_us": float(g[9]), "ip_algbw": float(g[10]),
               "ip_busbw": float(g[11]), "ip_wrong": g[12]}
        for key in ("oop_wrong", "ip_wrong"):
            if row[key].isdigit():
                wrong += int(row[key])
        rows.append(row)
    avg = _NCCL_AVG.search(text)
    oob = _NCCL_OOB.search(text)
    return {"rows": rows, "avg_busbw": float(avg.group(1)) if avg else None,
            "out_of_bounds": int(oob.group(1)) if oob else None, "wrong": wrong}


_NCCL_HEADER = re.compile(r"^# nThread (\d+) nGpus (\d+) ")
_NCCL_RANK = re.compile(r"^#\s+Rank\s+(\d+) Group\s+(\d+) Pid\s+(\d+) on\s+(\S+) device\s+(\d+) \[([^\]]*)\] (.*)$")


def nccl_ranks(text: str) -> dict[str, Any]:
    """The ``# Using devices`` list of an nccl-tests run and its header.

    Returns ``{"threads", "gpus_per_thread", "ranks": [{rank, pid, host, device, bus_id, name}],
    "processes"}``. Each process drives ``threads x gpus_per_thread`` ranks, so a consistent
    run lists ``processes x threads x gpus_per_thread`` ranks: one process for ``-g 8``,
    eight for ``mpirun -np 8 ... -g 1``.
    """
    head = next((m for m in map(_NCCL_HEADER.match, text.splitlines()) if m), None)
    ranks = [{"rank": int(m[1]), "pid": int(m[3]), "host": m[4], "device": int(m[5]), "bus_id": m[6],
              "name": m[7].strip()}
             for m in map(_NCCL_RANK.match, text.splitlines()) if m]
    return {"threads": int(head[1]) if head else None, "gpus_per_thread": int(head[2]) if head else None,
            "ranks": ranks, "processes": len({(r["host"], r["pid"]) for r in ranks})}


def nccl_busbw(parsed: Mapping[str, Any]) -> float | None:
    """Bus bandwidth the gate uses: out-of-place busbw at the largest message size.

    aznhc runs one size (``-b 16G -e 16G``), where that equals the "Avg bus bandwidth" line;
    over a sweep the average is dragged down by the latency-bound small sizes, so the
    largest size is the figure comparable with the thresholds.
    """
    rows = parsed.get("rows") or []
    if not rows:
        return None
    return max(rows, key=lambda r: r["size"])["oop_busbw"]


def nccl_check(name: str, text: str, minimum: float | None) -> dict[str, Any]:
    parsed = parse_nccl_tests(text)
    if not parsed["rows"]:
        return check(name, FAIL, reason="nccl-tests printed no result row (see the task output)")
    if parsed["wrong"] or (parsed["out_of_bounds"] or 0) > 0:
        return check(name, FAIL, f"{parsed['wrong']} wrong", reason=(
            f"wrong results: #wrong {parsed['wrong']}, out-of-bounds values {parsed['out_of_bounds']}"))
    largest = max(r["size"] for r in parsed["rows"])
    result = at_least(name, nccl_busbw(parsed), minimum, "GB/s", f"busbw at {largest} B")
    result["value"] += f" @ {largest} B"
    return result


# --------------------------------------------------------------------------------------
# Shared mount: elbencho and the project's reader
# --------------------------------------------------------------------------------------
MIB_TO_MB = 1.048576


def parse_elbencho(text: str) -> dict[str, float]:
    """{"WRITE": MB/s, "READ": MB/s} (last-done column) from elbencho's table or CSV.

    elbencho reports MiB/s; the result is MB/s (10^6 bytes/s) like the project's reader.
    """
    out: dict[str, float] = {}
    if text.lstrip().startswith("ISO date"):
        for row in csv.DictReader(io.StringIO(text.lstrip())):
            value = (row.get("MiB/s [last]") or "").strip()
            op = (row.get("operation") or "").strip()
            if value and op in ("WRITE", "READ"):
                out[op] = float(value) * MIB_TO_MB
        return out
    op = None
    for line in text.splitlines():
        head = line.split()
        if head and head[0] in ("WRITE", "READ", "MKDIRS", "RMFILES", "RMDIRS", "DROPCACHE", "SYNC", "STAT"):
            op = head[0]
        elif line.startswith("---"):
            op = None
        if op in ("WRITE", "READ") and "Throughput MiB/s" in line:
            out[op] = float(line.split(":", 1)[1].split()[-1]) * MIB_TO_MB
    return out


def fs_checks(tool: str, result: Mapping[str, Any] | str, thresholds: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Write and read checks from elbencho's output (text) or the project reader's result."""
    if tool == "elbencho":
        parsed = parse_elbencho(str(result))
        write, read, errors = parsed.get("WRITE"), parsed.get("READ"), []
    elif tool == "amlhpc_fs_bench":
        write, read = result.get("write_mbps"), result.get("read_mbps")
        errors = list(result.get("errors") or [])
    else:
        raise ValueError(f"unknown file system tool {tool!r}: elbencho or amlhpc_fs_bench")
    out = [at_least("fs_write", write, thresholds.get("fs_write_mbps"), "MB/s", "write throughput"),
           at_least("fs_read", read, thresholds.get("fs_read_mbps"), "MB/s", "read throughput")]
    if errors:
        out[1] = check("fs_read", FAIL, out[1]["value"], out[1]["threshold"],
                       f"data read back differs from what was written: {'; '.join(errors[:3])}")
    for c in out:
        c["value"] += f" ({tool})" if c["value"] else ""
    return out
