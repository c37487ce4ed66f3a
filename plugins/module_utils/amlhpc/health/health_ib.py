# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""InfiniBand checks of one node: port state and rate per HCA, and perftest's bandwidth figure.

Plain functions over the text the tools print (the tests feed them recorded-format outputs,
``tests/unit/plugins/module_utils/fixtures/health/``):

* ``ibstat`` (infiniband-diags): one ``CA '<name>'`` block per HCA, a ``Port <n>:`` block per
  port with ``State``, ``Physical state``, ``Rate`` (Gb/s) and ``Link layer``;
* ``ibv_devinfo -v`` (rdma-core): one ``hca_id:`` block per HCA, ``port:`` blocks with
  ``state: PORT_ACTIVE (4)``, ``active_width: 4X (2)``, ``active_speed: 50.0 Gbps (64)`` and
  ``link_layer``; the port's rate is width x lane speed;
* ``ib_write_bw --report_gbits`` (perftest): the result row under ``#bytes #iterations BW
  peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]``.

What they gate mirrors AzNHC (github.com/Azure/azurehpc-health-checks): ``check_hw_ib <rate>
<hca>:<port>`` in ``conf/<size>.conf`` (each InfiniBand port ACTIVE, LinkUp, at its rate) and
``check_ib_bw_gdr <Gb/s>`` (``customTests/azure_ib_write_bw_gdr.nhc``: ib_write_bw per HCA
from GPU memory). Only ports whose link layer is InfiniBand count: the Ethernet function of
the accelerated-networking NIC (``mlx5_an0``) is the VM's front-end network, not the fabric.

Standard library only (it also runs on the node, inside the health probe).
"""

from __future__ import annotations

import re
from typing import Any

_IBSTAT_CA = re.compile(r"^CA '([^']+)'")
_IBSTAT_PORT = re.compile(r"^\s+Port (\d+):\s*$")
_IBSTAT_FIELD = re.compile(r"^\s+([A-Za-z ]+):\s*(.*?)\s*$")


def parse_ibstat(text: str) -> list[dict[str, Any]]:
    """Ports of ``ibstat``: [{"hca", "port", "state", "physical_state", "rate_gbps", "link_layer"}]."""
    ports: list[dict[str, Any]] = []
    hca = None
    port: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _IBSTAT_CA.match(line)
        if m:
            hca, port = m.group(1), None
            continue
        m = _IBSTAT_PORT.match(line)
        if m and hca is not None:
            port = {"hca": hca, "port": int(m.group(1)), "state": "", "physical_state": "",
                    "rate_gbps": None, "link_layer": ""}
            ports.append(port)
            continue
        m = _IBSTAT_FIELD.match(line)
        if m and port is not None:
            key, value = m.group(1).strip().lower(), m.group(2)
            if key == "state":
                port["state"] = value
            elif key == "physical state":
                port["physical_state"] = value
            elif key == "rate":
                port["rate_gbps"] = float(value) if re.fullmatch(r"[\d.]+", value) else None
            elif key == "link layer":
                port["link_layer"] = value
    return ports


_DEVINFO_HCA = re.compile(r"^hca_id:\s*(\S+)")
_DEVINFO_PORT = re.compile(r"^\s+port:\s*(\d+)\s*$")
_DEVINFO_FIELD = re.compile(r"^\s+(\w+):\s*(.*?)\s*$")
_WIDTH = re.compile(r"(\d+)X")
_SPEED = re.compile(r"([\d.]+)\s*Gbps")
_STATE = re.compile(r"PORT_(\w+)")


def parse_ibv_devinfo(text: str) -> list[dict[str, Any]]:
    """Ports of ``ibv_devinfo -v``, in :func:`parse_ibstat`'s shape (state ``Active``..., rate
    = active_width x active_speed; None where ``-v`` was not given)."""
    ports: list[dict[str, Any]] = []
    hca = None
    port: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _DEVINFO_HCA.match(line)
        if m:
            hca, port = m.group(1), None
            continue
        m = _DEVINFO_PORT.match(line)
        if m and hca is not None:
            port = {"hca": hca, "port": int(m.group(1)), "state": "", "physical_state": "",
                    "rate_gbps": None, "link_layer": "", "_width": None, "_speed": None}
            ports.append(port)
            continue
        m = _DEVINFO_FIELD.match(line)
        if not (m and port is not None):
            continue
        key, value = m.group(1), m.group(2)
        if key == "state":
            s = _STATE.search(value)
            port["state"] = s.group(1).capitalize() if s else value
        elif key == "phys_state":
            port["physical_state"] = {"LINK_UP": "LinkUp", "DISABLED": "Disabled", "POLLING": "Polling"}.get(
                value.split()[0], value.split()[0] if value else "")
        elif key == "active_width":
            w = _WIDTH.search(value)
            port["_width"] = int(w.group(1)) if w else None
        elif key == "active_speed":
            s = _SPEED.search(value)
            port["_speed"] = float(s.group(1)) if s else None
        elif key == "link_layer":
            port["link_layer"] = value
    for p in ports:
        width, speed = p.pop("_width"), p.pop("_speed")
        if width and speed:
            p["rate_gbps"] = width * speed
    return ports


def ib_port_checks(ports: list[dict[str, Any]], expected_ports: int | None,
                   min_rate: float | None, tool: str) -> list[dict[str, Any]]:
    """``ib_ports`` (count of InfiniBand ports, each Active and LinkUp) and ``ib_rate`` (the
    slowest port's rate), each ``{"check", "status", "value", "threshold", "reason"}``."""
    ib = [p for p in ports if p["link_layer"].lower() == "infiniband"]
    if not ib and not expected_ports:
        reason = f"{tool} lists no InfiniBand port and this VM size expects none"
        return [{"check": name, "status": "skip", "value": "", "threshold": "", "reason": reason}
                for name in ("ib_ports", "ib_rate")]
    down = [p for p in ib if p["state"].lower() != "active"
            or (p["physical_state"] and p["physical_state"].lower() != "linkup")]
    names = ", ".join(f"{p['hca']}:{p['port']} ({p['state'] or '?'}/{p['physical_state'] or '?'})" for p in down)
    reasons = []
    if down:
        reasons.append(f"port(s) not active: {names}")
    if expected_ports is not None and len(ib) != int(expected_ports):
        reasons.append(f"{tool} lists {len(ib)} InfiniBand port(s), expected {int(expected_ports)}")
    threshold = "" if expected_ports is None else f"{int(expected_ports)} active"
    out = [{"check": "ib_ports", "status": "fail" if reasons else "pass",
            "value": f"{len(ib) - len(down)} of {len(ib)} active", "threshold": threshold,
            "reason": "; ".join(reasons)}]
    rated = [p for p in ib if p["rate_gbps"] is not None and p not in down]
    if not rated:
        out.append({"check": "ib_rate", "status": "skip", "value": "", "threshold": "",
                    "reason": f"{tool} shows no rate of an active InfiniBand port"})
        return out
    slow = min(rated, key=lambda p: p["rate_gbps"])
    shown = f"{slow['rate_gbps']:g} Gb/s ({slow['hca']}:{slow['port']})"
    if min_rate is None:
        out.append({"check": "ib_rate", "status": "pass", "value": shown, "threshold": "",
                    "reason": "no threshold for this VM size: reported, not gated"})
    else:
        below = [p for p in rated if p["rate_gbps"] < float(min_rate)]
        out.append({"check": "ib_rate", "status": "fail" if below else "pass", "value": shown,
                    "threshold": f">= {float(min_rate):g} Gb/s",
                    "reason": "; ".join(f"{p['hca']}:{p['port']} runs at {p['rate_gbps']:g} Gb/s, "
                                        f"below {float(min_rate):g} Gb/s" for p in below)})
    return out


_PERFTEST_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb|MB)/sec\]\s+BW average\[(Gb|MB)/sec\]")
_PERFTEST_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def parse_ib_write_bw(text: str) -> float | None:
    """BW average of ``ib_write_bw``'s result row, in Gb/s (``--report_gbits``; MB/sec, perftest's
    default, is converted: perftest's MB is 2^20 bytes)."""
    unit = None
    value = None
    for line in text.splitlines():
        h = _PERFTEST_HEADER.search(line)
        if h:
            unit = h.group(2)
            continue
        r = _PERFTEST_ROW.match(line)
        if unit and r:
            value = float(r.group(4))
    if value is None:
        return None
    return value if unit == "Gb" else value * 2**20 * 8 / 1e9


def ib_bw_check(results: dict[str, str], minimum: float | None) -> dict[str, Any]:
    """``ib_bw``: the slowest HCA's ib_write_bw loopback figure (``results``: HCA -> output)."""
    figures = {hca: parse_ib_write_bw(out) for hca, out in results.items()}
    missing = sorted(h for h, v in figures.items() if v is None)
    if missing or not figures:
        return {"check": "ib_bw", "status": "fail", "value": "", "threshold": "",
                "reason": f"ib_write_bw printed no bandwidth for {', '.join(missing) or 'any HCA'}"}
    worst = min(figures, key=lambda h: figures[h] or 0.0)
    shown = f"{figures[worst]:.1f} Gb/s (min of {len(figures)}, {worst})"
    if minimum is None:
        return {"check": "ib_bw", "status": "pass", "value": shown, "threshold": "",
                "reason": "no threshold for this VM size: reported, not gated"}
    below = sorted(h for h, v in figures.items() if (v or 0.0) < float(minimum))
    return {"check": "ib_bw", "status": "fail" if below else "pass", "value": shown,
            "threshold": f">= {float(minimum):g} Gb/s",
            "reason": "; ".join(f"{h} ib_write_bw {figures[h]:.1f} Gb/s is below {float(minimum):g} Gb/s"
                                for h in below)}
