"""Issue 50, item 3: a level for every node size (module_utils/amlhpc/health/pair_gate.py).

The pair gate's floors per VM size (``PAIR_THRESHOLDS``) are the node table's figures
(``checks.VM_THRESHOLDS``), each from its AzNHC conf line (github.com/Azure/azurehpc-health-checks,
``conf/<size>.conf``): ``ib_write_bw`` is the per-port ``check_ib_bw_gdr`` / ``check_ib_bw_non_gdr``
figure and ``nccl`` is 80 % of the node's InfiniBand floor (ports x per-port Gb/s / 8, in GB/s),
the rule ``allreduce_cluster_busbw`` follows. A size no source gives a figure for keeps none, and
the gate says so in one sentence naming the size, the tool and the setting.
"""

from __future__ import annotations

import pytest

from amlhpc.health import checks, pair_gate


def test_every_pair_floor_is_the_node_tables_figure():
    # One source per size: the two tables cannot drift apart (H200's 380 Gb/s was H100's figure).
    for size, floors in pair_gate.PAIR_THRESHOLDS.items():
        node = checks.VM_THRESHOLDS[size]
        assert floors["ib_write_bw"] == node["ib_bw_gbps"], size
        assert floors["nccl"] == node["allreduce_cluster_busbw"], size
    # Every size the node table gates InfiniBand bandwidth on has pair floors too.
    assert {s for s, t in checks.VM_THRESHOLDS.items() if t["ib_bw_gbps"]} <= set(pair_gate.PAIR_THRESHOLDS)


def test_the_nccl_floor_is_80_percent_of_the_nodes_infiniband_floor():
    for size, floors in pair_gate.PAIR_THRESHOLDS.items():
        node = checks.VM_THRESHOLDS[size]
        if floors["nccl"] is not None:
            assert floors["nccl"] == round(0.8 * node["ib_ports"] * node["ib_bw_gbps"] / 8, 1), size


@pytest.mark.parametrize("size, ib_write_bw, nccl", [
    ("Standard_ND96asr_v4", 185.0, 148.0),          # nd96asr_v4.conf: check_ib_bw_gdr 185.0, 8 HDR ports
    ("Standard_ND96amsr_A100_v4", 185.0, 148.0),    # nd96amsr_a100_v4.conf: check_ib_bw_gdr 185.0
    ("Standard_ND96isr_H100_v5", 380.0, 304.0),     # nd96isr_h100_v5.conf: check_ib_bw_gdr 380
    ("Standard_ND96isr_H200_v5", 360.0, 288.0),     # nd96isr_h200_v5.conf: check_ib_bw_gdr 360
    ("Standard_ND40rs_v2", 78.0, 7.8),              # nd40rs_v2.conf: check_ib_bw_non_gdr 78 65536, 1 EDR port
])
def test_each_sizes_floors_are_its_conf_line(size, ib_write_bw, nccl):
    assert pair_gate.pair_minimum(size, "ib_write_bw") == ib_write_bw
    assert pair_gate.pair_minimum(size, "nccl") == nccl
    assert checks.thresholds_for(size)["ib_bw_gbps"] == ib_write_bw
