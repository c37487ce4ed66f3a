"""Issue 50, item 3: a level for every node size (module_utils/amlhpc/health/pair_gate.py).

The pair gate's floors per VM size (``PAIR_THRESHOLDS``) are the node table's figures
(``checks.VM_THRESHOLDS``), each from its AzNHC conf line (github.com/Azure/azurehpc-health-checks,
``conf/<size>.conf``): ``ib_write_bw`` is the per-port ``check_ib_bw_gdr`` / ``check_ib_bw_non_gdr``
figure and ``nccl`` is 80 % of the node's InfiniBand floor (ports x per-port Gb/s / 8, in GB/s),
the rule ``allreduce_cluster_busbw`` follows. A size no source gives a figure for keeps none, and
the gate says so in one sentence naming the size, the tool and the setting.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amlhpc.health import checks, pair_gate, pair_tools

ROOT = Path(__file__).resolve().parents[4]
FIX = Path(__file__).parent / "fixtures" / "pair_gate"
# /sys/class/net/<iface>/speed as read on the development machine (fixtures/pair_gate/README.md).
SPEEDS = json.loads((FIX / "sys_class_net_speed_devbox.json").read_text())["interfaces"]


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


@pytest.mark.parametrize("size, ib_write_bw, nccl", [
    # nd128isr_ndr_gb200_v6.conf: check_ib_bw_gdr 360; check_hw_ib 400 mlx5_ib0:1 ... mlx5_ib3:1
    # (4 ports): nccl 0.8 x 4 x 360 / 8 = 144.
    ("Standard_ND128isr_NDR_GB200_v6", 360.0, 144.0),
    # nd96isr_mi300x_v5.conf: check_ib_bw_non_gdr 390; check_hw_ib 400 mlx5_ib0:1 ... mlx5_ib7:1. Its
    # all-reduce is RCCL (check_rccl_allreduce 314, one node) and the gate's nccl tool needs
    # nvidia-smi, so no nccl floor.
    ("Standard_ND96isr_MI300X_v5", 390.0, None),
])
def test_the_newer_nd_sizes_have_their_conf_lines(size, ib_write_bw, nccl):
    assert pair_gate.pair_minimum(size, "ib_write_bw") == ib_write_bw
    assert pair_gate.pair_minimum(size, "nccl") == nccl
    assert pair_gate.floor_warning(size, "ib_write_bw") == ""


def test_a_size_outside_the_table_is_warned_about_in_one_sentence():
    # NC A100 v4 has no InfiniBand and no two-node figure anywhere: the gate judges its pairs
    # by the relative rule alone and says so, naming the size, the tool and the setting.
    warning = pair_gate.floor_warning("Standard_NC24ads_A100_v4", "iperf3")
    assert warning == (
        "no iperf3 pair floor is known for Standard_NC24ads_A100_v4: only the pairs' relative rule "
        "judges, and where it cannot tell the gate says so; set healthcheck_pair_thresholds: "
        "{Standard_NC24ads_A100_v4: {iperf3: <figure>}}")
    # ND GB300 v6: Azure's size page lists 4 x 800 Gb/s InfiniBand, but AzNHC has no conf file for
    # it, so there is no measured floor to cite.
    gb300 = "Standard_ND128isr_GB300_v6"
    assert gb300 in pair_gate.floor_warning(gb300, "ib_write_bw")
    # A figure set for the size, or for every size, silences it.
    nc = "Standard_NC24ads_A100_v4"
    assert pair_gate.floor_warning(nc, "iperf3", {nc: {"iperf3": 5}}) == ""
    assert pair_gate.floor_warning(nc, "iperf3", {"default": {"iperf3": 5}}) == ""


def test_a_size_in_the_table_without_a_floor_for_the_tool_is_warned_about_too():
    # The table's sizes have no iperf3 floor (a size's network bandwidth is a cap, not a floor),
    # and MI300X no nccl one: a gate run with that tool judges by the relative rule alone.
    warning = pair_gate.floor_warning("Standard_ND96asr_v4", "iperf3")
    assert warning.startswith("no iperf3 pair floor is known for Standard_ND96asr_v4: ")
    assert "healthcheck_pair_thresholds" in warning
    assert pair_gate.floor_warning("Standard_ND96isr_MI300X_v5", "nccl").startswith(
        "no nccl pair floor is known for Standard_ND96isr_MI300X_v5: ")
    assert pair_gate.floor_warning("", "iperf3") == ""  # no size known (the twin): nothing to name


def test_every_size_with_floors_is_one_the_inventory_check_knows():
    # A size with floors must not draw "not one of the VM sizes this collection knows".
    from amlhpc.validate import variable_checks

    assert set(checks.VM_THRESHOLDS) | set(pair_gate.PAIR_THRESHOLDS) <= variable_checks.KNOWN_VM_SIZES


# ---------------------------------------------------------------- iperf3: the link's speed
def test_a_link_speed_is_read_where_the_driver_knows_one():
    assert pair_tools.parse_link_speed(SPEEDS["vethdb296d5"]["speed"]) == 10000.0  # a Docker veth
    assert pair_tools.parse_link_speed(SPEEDS["eth0"]["speed"]) is None  # virtio says -1: unknown
    assert "error" in SPEEDS["lo"]  # reading it fails (EINVAL): the module passes ""
    assert pair_tools.parse_link_speed("") is None
    assert pair_tools.parse_link_speed("fast\n") is None


def test_the_recorded_healthy_pairs_rule_out_an_iperf3_floor_from_the_links_speed():
    # Healthy twin pairs over veths that report 10000 Mb/s read 0.42 to 5.5 Gb/s at load 8.5
    # (bench/data/twin_iperf3_pairs.json): one at about 4 % of its link's speed. On Azure the
    # size's bandwidth cap sits below the NIC's link speed too. A floor at any useful share of
    # the link would fail healthy nodes, so the table keeps none for iperf3.
    readings = json.loads((ROOT / "bench" / "data" / "twin_iperf3_pairs.json").read_text())["readings"]
    link_gbps = pair_tools.parse_link_speed(SPEEDS["vethdb296d5"]["speed"]) / 1000
    assert min(readings) / link_gbps < 0.05
    assert all(floors["iperf3"] is None for floors in pair_gate.PAIR_THRESHOLDS.values())


def test_a_node_whose_link_reports_less_than_most_is_named_in_one_sentence():
    speeds = {"h-0": 10000.0, "h-1": 10000.0, "h-2": 1000.0, "h-3": 10000.0, "h-4": None}
    assert pair_gate.link_speed_warning(speeds) == (
        "h-2 (1000 Mb/s) report(s) a lower link speed on the pair-test interface than the 10000 Mb/s most "
        "nodes report (a link trained down or a bad cable): reseat or replace the cable, or leave the "
        "node out")
    two = pair_gate.link_speed_warning({"a": 25000.0, "b": 100000.0, "c": 50000.0, "d": 100000.0,
                                        "e": 100000.0})
    assert two.startswith("a (25000 Mb/s), c (50000 Mb/s) report(s) a lower link speed on the pair-test "
                          "interface than the 100000 Mb/s most nodes report")
    # No speed held by more than half of the nodes that report one, or every node alike: nothing.
    assert pair_gate.link_speed_warning({"a": 1000.0, "b": 10000.0}) == ""
    assert pair_gate.link_speed_warning({"a": 10000.0, "b": 10000.0, "c": None}) == ""
    assert pair_gate.link_speed_warning({"a": None, "b": None}) == ""


@pytest.mark.parametrize("size, message", [
    # The message size of each AzNHC check_nccl_allreduce line the node figures come from.
    ("Standard_ND96isr_H100_v5", "16G"), ("Standard_ND96isr_H200_v5", "16G"),
    ("Standard_ND128isr_NDR_GB200_v6", "16G"),  # check_nccl_allreduce 432.0 1 16G
    ("Standard_ND96asr_v4", "8G"),
])
def test_the_node_all_reduce_runs_at_the_message_size_of_its_figure(size, message):
    import jinja2
    import yaml

    defaults = yaml.safe_load((ROOT / "roles" / "healthcheck" / "defaults" / "main.yml").read_text())
    template = jinja2.Environment().from_string(defaults["healthcheck_nccl_message"])
    assert template.render(healthcheck_vm_size=size) == message
