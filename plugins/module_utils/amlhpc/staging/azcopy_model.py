# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""How long staging takes, and what limits it: a bottleneck model for one azcopy per node.

Each node downloads its shard over the wire (the plan's compressed bytes) and, for
gzip-encoded blobs, decompresses it (``azcopy --decompress``) into the bytes on disk.
Three limits, the slowest wins:

``account egress``
    the storage account serves at most ``egress_gbps`` to all nodes together (Azure's
    default for a GPv2 account: 200 Gbps in the large regions, 50 Gbps elsewhere);
``NIC``
    one node receives at most ``min(nic_gbps, azcopy_mb_s)``: its network card, or the rate
    azcopy was measured to reach on one node for uncompressed blobs, whichever is lower
    (named ``NIC`` either way: it is the per-node network path);
``decompression CPU``
    one node writes at most ``decompress_mb_s`` of decompressed bytes (azcopy's measured
    per-node rate with ``--decompress``).

Per node: ``max(wire_node / net_rate, raw_node / decompress_rate)``; cluster: the slowest
node, and never less than ``wire_total / egress``; plus azcopy's start (``overhead_s``).

The default rates are fitted to the seeds' figures for 4 NDv4 nodes and CosmoFlow v0.7
(5.1 TB, 1.1 TB gzip-encoded): about 35 min uncompressed, about 13 min gzip-encoded. The
uncompressed run gives the per-node network rate (5.1 TB / 4 / 35 min = 607 MB/s, well
under the NIC's 24 Gbps and the account's 200 Gbps); the gzip-encoded run, which moves
1.1 TB, would take 7.5 min at that rate, so its 13 min say decompression is the limit,
at 5.1 TB / 4 / 13 min = 1.63 GB/s per node. ``bench/staging_model.py`` checks both, and
checks the model against Azurite runs on this machine. Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

BOTTLENECKS = ("account egress", "NIC", "decompression CPU")


@dataclass(frozen=True)
class Rates:
    """The model's inputs other than the plan (per node unless said otherwise)."""

    nic_gbps: float = 24.0  # ND96asr_v4 / ND96amsr_A100_v4 front-end network
    egress_gbps: float = 200.0  # the storage account, all nodes together
    azcopy_mb_s: float = 607.0  # azcopy's measured per-node rate, uncompressed blobs (bytes over the wire)
    decompress_mb_s: float = 1630.0  # azcopy's measured per-node rate with --decompress (bytes on disk)
    overhead_s: float = 0.0  # azcopy's start and end-of-job report, per run


def predict(wire_per_node: Sequence[int], raw_per_node: Sequence[int | None], rates: Rates,
            gzip_per_node: Sequence[int] | None = None) -> dict[str, Any]:
    """Predicted staging time and its bottleneck for a plan.

    ``wire_per_node``: bytes each node downloads; ``raw_per_node``: bytes each writes
    (``None``: unknown, taken as the wire bytes); ``gzip_per_node``: of the wire bytes, how
    many are gzip-encoded (default: all of a node's bytes when raw differs from wire).
    Returns seconds, minutes, bottleneck, the seconds each limit alone would need, the
    slowest node's rank and the rates used.
    """
    if not wire_per_node:
        raise ValueError("the plan has no nodes")
    net_bps = min(rates.nic_gbps * 1e9 / 8, rates.azcopy_mb_s * 1e6)
    nic_limited_by_card = rates.nic_gbps * 1e9 / 8 <= rates.azcopy_mb_s * 1e6
    per_node = []
    for i, wire in enumerate(wire_per_node):
        raw = raw_per_node[i] if raw_per_node[i] is not None else wire
        gz_wire = gzip_per_node[i] if gzip_per_node is not None else (wire if raw != wire else 0)
        # decompression applies to the gzip-encoded part; its share of the bytes on disk:
        gz_raw = raw - (wire - gz_wire) if gz_wire else 0
        t_net = wire / net_bps if net_bps else 0.0
        t_cpu = gz_raw / (rates.decompress_mb_s * 1e6) if gz_raw and rates.decompress_mb_s else 0.0
        per_node.append((max(t_net, t_cpu), t_net, t_cpu, i))
    slowest = max(per_node)
    t_egress = sum(wire_per_node) / (rates.egress_gbps * 1e9 / 8) if rates.egress_gbps else 0.0
    limits = {"account egress": t_egress, "NIC": slowest[1], "decompression CPU": slowest[2]}
    bottleneck = max(limits, key=lambda k: limits[k])
    seconds = limits[bottleneck] + rates.overhead_s
    return {"seconds": round(seconds, 3), "minutes": round(seconds / 60, 2), "bottleneck": bottleneck,
            "limits_s": {k: round(v, 3) for k, v in limits.items()}, "slowest_rank": slowest[3],
            "nic_is_card": nic_limited_by_card, "rates": asdict(rates)}


def predict_node(wire: int, raw: int | None, rates: Rates, nodes: int = 1, wire_total: int | None = None) -> dict[str, Any]:
    """The prediction for one node's shard (its share of the account's egress included)."""
    wire_total = wire if wire_total is None else wire_total
    out = predict([wire], [raw], rates)
    t_egress = wire_total / (rates.egress_gbps * 1e9 / 8) if rates.egress_gbps else 0.0
    if t_egress > out["limits_s"]["NIC"] and t_egress > out["limits_s"]["decompression CPU"]:
        out["bottleneck"] = "account egress"
        out["seconds"] = round(t_egress + rates.overhead_s, 3)
        out["minutes"] = round(out["seconds"] / 60, 2)
    out["limits_s"]["account egress"] = round(t_egress, 3)
    out["nodes"] = nodes
    return out


def rates_from(values: dict[str, Any] | None) -> Rates:
    """``Rates`` from a dict of options (missing or empty keys keep the defaults)."""
    values = {k: v for k, v in (values or {}).items() if v not in (None, "")}
    known = set(Rates.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown staging-model rate(s) {', '.join(unknown)}: use {', '.join(sorted(known))}")
    return Rates(**{k: float(v) for k, v in values.items()})


TIME_LIMIT_MARGIN = 3.0
"""How many times the model's prediction a stage may take before it is stopped (the default of
``stage_timeout_margin``)."""
TIME_LIMIT_FLOOR_S = 300.0
"""Seconds every time limit adds to the margin's: azcopy's start, the listing of a
``--list-of-files`` and its retries, which the model does not count."""
TIME_LIMIT_UNKNOWN_S = 6 * 3600.0
"""The time limit where the plan gives no sizes (suffix mode without a listing)."""


def time_limit(wire: int | None, raw: int | None, rates: Rates, *, nodes: int = 1,
               margin: float = TIME_LIMIT_MARGIN, cap_mbps: float | None = None) -> tuple[float, str]:
    """The default time limit of one node's stage and how it was found (one phrase).

    ``wire`` and ``raw``: the bytes this run fetches, over the wire and on disk (``None``:
    unknown). The model predicts their time on this node (its share of the account's egress
    with ``nodes`` nodes; a bandwidth cap ``cap_mbps`` lowers the network rate), and the limit
    is ``margin`` times that plus :data:`TIME_LIMIT_FLOOR_S`. No sizes: :data:`TIME_LIMIT_UNKNOWN_S`.
    """
    if margin <= 0:
        raise ValueError(f"the time limit's margin must be above 0, got {margin:g}")
    if wire is None:
        return TIME_LIMIT_UNKNOWN_S, f"{TIME_LIMIT_UNKNOWN_S:g} s, the limit where the plan gives no sizes"
    if cap_mbps:
        rates = Rates(**{**asdict(rates), "azcopy_mb_s": min(rates.azcopy_mb_s, cap_mbps / 8)})
    pred = predict_node(int(wire), None if raw is None else int(raw), rates, nodes=max(1, nodes),
                        wire_total=int(wire) * max(1, nodes))
    limit = TIME_LIMIT_FLOOR_S + margin * pred["seconds"]
    return round(limit, 1), (f"{margin:g} x the staging model's {pred['seconds']:g} s for {wire / 1e9:.3g} GB "
                             f"({pred['bottleneck']}) + {TIME_LIMIT_FLOOR_S:g} s")
