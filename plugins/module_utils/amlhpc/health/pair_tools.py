# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The pair gate's tools: the command line each side of a pair runs (iperf3, ib_write_bw, two-node
nccl-tests) and the figure read from what it printed. The rounds and the verdicts are
:mod:`.pair_gate`'s. Standard library only."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping

from .benchmarks import nccl_busbw, parse_nccl_tests


def iperf3_argv(binary: str, role: str, peer_address: str, port: int, seconds: int,
                pidfile: str = "") -> list[str]:
    """The iperf3 side of ``role``: a one-off server in the background that gives up when idle
    (its pid in ``pidfile``, so that the next gate can end it), or a client that runs both
    directions at once (``--bidir``) with JSON output."""
    if role == "server":
        return [binary, "-s", "-1", "-D", "-p", str(port), "--idle-timeout", str(max(30, 4 * seconds)),
                *(["-I", pidfile] if pidfile else [])]
    return [binary, "-c", peer_address, "-p", str(port), "-t", str(seconds), "--bidir", "-J"]


def iperf3_pidfile(tmpdir: str, uid: int, port: int) -> str:
    """Where the gate's iperf3 server on ``port`` keeps its pid (one per user and port)."""
    return f"{tmpdir.rstrip('/')}/amlhpc-pair-iperf3-{uid}-{port}.pid"


def is_gate_server(cmdline: list[str], port: int, pidfile: str) -> bool:
    """Whether a process's argv is the gate's own iperf3 server on ``port`` (started with that
    ``pidfile``): an earlier gate's server left busy by a test that never ended, safe to end.
    Any other process, an unrelated iperf3 included, is not."""
    if not cmdline or not cmdline[0].rsplit("/", 1)[-1].startswith("iperf3") or "-s" not in cmdline:
        return False
    pairs = set(zip(cmdline, cmdline[1:]))
    return ("-p", str(port)) in pairs and ("-I", pidfile) in pairs


def parse_iperf3(text: str) -> tuple[float | None, str]:
    """``(Gbit/s, error)``: the slower direction of an ``iperf3 --bidir -J`` run (received
    bytes, so packets lost on the way do not count)."""
    try:
        data = json.loads(text[text.index("{"):]) if "{" in text else {}
    except ValueError:
        return None, "iperf3 printed no JSON"
    if data.get("error"):
        return None, f"iperf3: {data['error']}"
    end = data.get("end") or {}
    rates = [end[k]["bits_per_second"] for k in ("sum_received", "sum_received_bidir_reverse")
             if isinstance(end.get(k), Mapping) and "bits_per_second" in end[k]]
    if not rates:
        return None, "no received totals in iperf3's JSON"
    return min(rates) / 1e9, ""


def parse_link_speed(text: str) -> float | None:
    """Mb/s of ``/sys/class/net/<iface>/speed``; None where the driver knows none (virtio writes
    -1, reading a link that is down fails and leaves "")."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if value > 0 else None


def ib_write_bw_argv(binary: str, role: str, peer_address: str, port: int, seconds: int,
                     device: str = "") -> list[str]:
    """perftest's RDMA write bandwidth: the server waits for one client, the client reports."""
    dev = ["-d", device] if device else []
    common = [binary, *dev, "-p", str(port), "--report_gbits", "-F", "-D", str(seconds)]
    return common if role == "server" else [*common, peer_address]


_IB_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", re.M)


def parse_ib_write_bw(text: str) -> tuple[float | None, str]:
    """``(Gb/s, error)``: BW average of ``ib_write_bw --report_gbits`` (its result row:
    #bytes #iterations BW-peak BW-average MsgRate)."""
    rows = _IB_ROW.findall(text)
    if not rows:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        return None, f"ib_write_bw printed no result row ({first[:120]})" if first else "ib_write_bw printed nothing"
    return float(rows[-1][3]), ""


def nccl_pair_argv(mpirun: str, tool: str, peer_address: str, self_address: str, gpus: int, args: str = "",
                   mpirun_args: str = "") -> list[str]:
    """A two-node nccl-tests all_reduce from the client's side: one rank per GPU on each node."""
    return [mpirun, "-np", str(2 * gpus), "--host", f"{self_address}:{gpus},{peer_address}:{gpus}",
            "--map-by", f"ppr:{gpus}:node", *shlex.split(mpirun_args), tool, *shlex.split(args)]


def parse_nccl_pair(text: str) -> tuple[float | None, str]:
    """``(GB/s, error)``: the largest message's bus bandwidth of nccl-tests' table."""
    value = nccl_busbw(parse_nccl_tests(text))
    return (value, "") if value is not None else (None, "no bus bandwidth in nccl-tests' output")


PARSERS = {"iperf3": parse_iperf3, "ib_write_bw": parse_ib_write_bw, "nccl": parse_nccl_pair}
