"""InfiniBand, NVLink and NVMe checks and the per-size tables, on outputs in the real tools'
formats (fixtures/health: ibstat, ibv_devinfo -v, ib_write_bw, nvidia-smi nvlink -s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amlhpc.health import health, health_ib

FIX = Path(__file__).parent / "fixtures" / "health"


def fx(name: str) -> str:
    return (FIX / name).read_text()


def by_name(checks):
    return {c["check"]: c for c in checks}


# ---------------------------------------------------------------- the per-size tables
@pytest.mark.parametrize(("size", "expected"), [
    # conf/nd96asr_v4.conf: check_hw_ib 200 x 8, check_ib_bw_gdr 185.0, check_nccl_allreduce 228.0
    ("Standard_ND96asr_v4", {"gpus": 8, "allreduce_node_busbw": 228.0, "ib_ports": 8, "ib_rate_gbps": 200.0,
                             "ib_bw_gbps": 185.0, "nvme_count": None}),
    ("Standard_ND96amsr_A100_v4", {"gpus": 8, "allreduce_node_busbw": 228.0, "ib_rate_gbps": 200.0, "ib_bw_gbps": 185.0}),
    # conf/nd96isr_h100_v5.conf: check_gpu_bw 48 335, check_nccl_allreduce 460.0, check_hw_ib 400, check_ib_bw_gdr 380
    ("Standard_ND96isr_H100_v5", {"gpus": 8, "h2d_gbps": 48.0, "p2p_gbps": 335.0, "allreduce_node_busbw": 460.0,
                                  "ib_ports": 8, "ib_rate_gbps": 400.0, "ib_bw_gbps": 380.0}),
    # conf/nd96isr_h200_v5.conf: check_gpu_bw 48 335, check_nccl_allreduce 431.0, check_hw_ib 400 x 8,
    # check_ib_bw_gdr 360, check_nvme_count 8
    ("Standard_ND96isr_H200_v5", {"gpus": 8, "h2d_gbps": 48.0, "p2p_gbps": 335.0, "allreduce_node_busbw": 431.0,
                                  "ib_ports": 8,
                                  "ib_rate_gbps": 400.0, "ib_bw_gbps": 360.0, "nvme_count": 8}),
    # conf/nd40rs_v2.conf: check_hw_ib 100 mlx5_ib0:1, check_ib_bw_non_gdr 78 65536 (an earlier version: 90)
    ("Standard_ND40rs_v2", {"gpus": 8, "h2d_gbps": 10.0, "ib_ports": 1, "ib_rate_gbps": 100.0,
                            "ib_bw_gbps": 78.0}),
    # conf/nd128isr_ndr_gb200_v6.conf: check_gpu_count 4, check_gpu_bw 48 335, check_nccl_allreduce 432.0,
    # check_hw_ib 400 x 4, check_ib_bw_gdr 360, check_gpu_ecc 20000000 10000
    ("Standard_ND128isr_NDR_GB200_v6", {
        "gpus": 4, "h2d_gbps": 48.0, "p2p_gbps": 335.0, "allreduce_node_busbw": 432.0, "ib_ports": 4,
        "ib_rate_gbps": 400.0, "ib_bw_gbps": 360.0, "nvme_count": None, "allreduce_cluster_busbw": 144.0,
        "alltoall_cluster_busbw": 27.0, "ecc_sram_correctable_max": 10000, "ib_link_downed_max": 1}),
    # conf/nd96isr_mi300x_v5.conf: check_hw_ib 400 x 8, check_ib_bw_non_gdr 390; its GPU checks are
    # ROCm's (check_gpu_count 8 rocm, check_gpu_bw 48 44, check_rccl_allreduce 314), which the
    # node checks (nvidia-smi, nccl-tests, nvbandwidth) do not run: not gated here.
    ("Standard_ND96isr_MI300X_v5", {
        "gpus": None, "h2d_gbps": None, "allreduce_node_busbw": None, "ib_ports": 8, "ib_rate_gbps": 400.0,
        "ib_bw_gbps": 390.0, "allreduce_cluster_busbw": None, "ecc_sram_correctable_max": None,
        "ib_link_downed_max": 1}),
])
def test_each_size_carries_the_aznhc_figures(size, expected):
    t = health.thresholds_for(size)
    assert {k: t[k] for k in expected} == expected


def test_a_user_overrides_one_figure_of_a_size():
    t = health.thresholds_for("Standard_ND96isr_H200_v5", {"Standard_ND96isr_H200_v5": {"ib_rate_gbps": 200},
                                                           "default": {"nvme_count": None}})
    assert t["ib_rate_gbps"] == 200 and t["nvme_count"] is None and t["ib_bw_gbps"] == 360.0
    with pytest.raises(ValueError, match="unknown keys \\['ib_speed'\\]"):
        health.thresholds_for("Standard_ND96isr_H200_v5", {"default": {"ib_speed": 1}})


# ---------------------------------------------------------------- ibstat / ibv_devinfo
def test_ibstat_lists_every_port_with_state_rate_and_link_layer():
    ports = health_ib.parse_ibstat(fx("ibstat_ndv4_ok.txt"))
    assert len(ports) == 9
    assert ports[0] == {"hca": "mlx5_an0", "port": 1, "state": "Active", "physical_state": "LinkUp",
                        "rate_gbps": 40.0, "link_layer": "Ethernet"}
    assert {p["rate_gbps"] for p in ports[1:]} == {200.0}
    assert [p["hca"] for p in ports[1:]] == [f"mlx5_ib{i}" for i in range(8)]


def test_a_healthy_ndv4_passes_and_the_ethernet_nic_does_not_count():
    t = health.thresholds_for("Standard_ND96asr_v4")
    c = by_name(health_ib.ib_port_checks(health_ib.parse_ibstat(fx("ibstat_ndv4_ok.txt")), t["ib_ports"],
                                         t["ib_rate_gbps"], "ibstat"))
    assert c["ib_ports"]["status"] == "pass" and c["ib_ports"]["value"] == "8 of 8 active"
    assert c["ib_rate"]["status"] == "pass" and c["ib_rate"]["threshold"] == ">= 200 Gb/s"


def test_a_port_down_is_named():
    t = health.thresholds_for("Standard_ND96asr_v4")
    c = by_name(health_ib.ib_port_checks(health_ib.parse_ibstat(fx("ibstat_ndv4_port_down.txt")), t["ib_ports"],
                                         t["ib_rate_gbps"], "ibstat"))
    assert c["ib_ports"]["status"] == "fail"
    assert c["ib_ports"]["value"] == "7 of 8 active"
    assert c["ib_ports"]["reason"] == "port(s) not active: mlx5_ib3:1 (Down/Polling)"
    assert c["ib_rate"]["status"] == "pass"  # the rate of the ports that are up


def test_a_port_at_half_rate_is_named():
    t = health.thresholds_for("Standard_ND96asr_v4")
    c = by_name(health_ib.ib_port_checks(health_ib.parse_ibstat(fx("ibstat_ndv4_half_rate.txt")), t["ib_ports"],
                                         t["ib_rate_gbps"], "ibstat"))
    assert c["ib_ports"]["status"] == "pass"
    assert c["ib_rate"]["status"] == "fail" and c["ib_rate"]["value"] == "100 Gb/s (mlx5_ib5:1)"
    assert c["ib_rate"]["reason"] == "mlx5_ib5:1 runs at 100 Gb/s, below 200 Gb/s"


def test_h200_ndr_ports_pass_the_h200_table_and_fail_a_missing_port():
    t = health.thresholds_for("Standard_ND96isr_H200_v5")
    ports = health_ib.parse_ibstat(fx("ibstat_h200_ok.txt"))
    assert by_name(health_ib.ib_port_checks(ports, t["ib_ports"], t["ib_rate_gbps"], "ibstat"))["ib_rate"]["status"] \
        == "pass"
    c = by_name(health_ib.ib_port_checks(ports[:-1], t["ib_ports"], t["ib_rate_gbps"], "ibstat"))
    assert c["ib_ports"]["status"] == "fail"
    assert c["ib_ports"]["reason"] == "ibstat lists 7 InfiniBand port(s), expected 8"


def test_ibv_devinfo_rate_is_width_times_lane_speed():
    ports = health_ib.parse_ibv_devinfo(fx("ibv_devinfo_h100_ok.txt"))
    assert len(ports) == 8
    assert ports[0] == {"hca": "mlx5_ib0", "port": 1, "state": "Active", "physical_state": "LinkUp",
                        "rate_gbps": 400.0, "link_layer": "InfiniBand"}
    t = health.thresholds_for("Standard_ND96isr_H100_v5")
    c = by_name(health_ib.ib_port_checks(health_ib.parse_ibv_devinfo(fx("ibv_devinfo_h100_2x.txt")), t["ib_ports"],
                                         t["ib_rate_gbps"], "ibv_devinfo"))
    assert c["ib_rate"]["status"] == "fail" and c["ib_rate"]["value"] == "200 Gb/s (mlx5_ib6:1)"


def test_a_cpu_node_without_infiniband_is_skipped_not_failed():
    c = by_name(health_ib.ib_port_checks([], None, None, "ibstat"))
    assert c["ib_ports"]["status"] == "skip" and c["ib_rate"]["status"] == "skip"


# ---------------------------------------------------------------- ib_write_bw
def test_ib_write_bw_figures_in_both_units():
    assert health_ib.parse_ib_write_bw(fx("ib_write_bw_ndr_gdr_ok.txt")) == 392.87
    assert health_ib.parse_ib_write_bw(fx("ib_write_bw_hdr_mbsec.txt")) == pytest.approx(196.46, abs=0.01)
    assert health_ib.parse_ib_write_bw("Couldn't connect to localhost:18515") is None


def test_ib_bw_names_the_slow_hca():
    ok, slow = fx("ib_write_bw_ndr_gdr_ok.txt"), fx("ib_write_bw_ndr_gdr_slow.txt")
    c = health_ib.ib_bw_check({"mlx5_ib0": ok, "mlx5_ib1": slow, "mlx5_ib2": ok}, 380.0)
    assert c["status"] == "fail" and c["value"] == "196.5 Gb/s (min of 3, mlx5_ib1)"
    assert c["reason"] == "mlx5_ib1 ib_write_bw 196.5 Gb/s is below 380 Gb/s"
    assert health_ib.ib_bw_check({"mlx5_ib0": ok}, 380.0)["status"] == "pass"
    broken = health_ib.ib_bw_check({"mlx5_ib0": ok, "mlx5_ib4": "ERROR: unable to open device"}, 380.0)
    assert broken["status"] == "fail" and "mlx5_ib4" in broken["reason"]


# ---------------------------------------------------------------- NVLink, NVMe
def test_nvlink_all_active_passes_and_an_inactive_link_is_named():
    links = health.parse_nvlink_status(fx("nvlink_h100_ok.txt"))
    assert len(links) == 8 and links[0][17] == 26.562
    assert health.nvlink_check(fx("nvlink_a100_ok.txt"))["value"] == "96 of 96 active"
    bad = health.nvlink_check(fx("nvlink_a100_inactive.txt"))
    assert bad["status"] == "fail" and bad["value"] == "94 of 96 active"
    assert bad["reason"] == "inactive: GPU 2 link 10, GPU 2 link 11"
    assert health.nvlink_check(fx("nvlink_pcie_none.txt"))["status"] == "pass"


def test_nvme_count_against_the_size():
    assert health.nvme_check([f"/dev/nvme{i}n1" for i in range(8)], 8)["status"] == "pass"
    c = health.nvme_check([f"/dev/nvme{i}n1" for i in range(7)], 8)
    assert c["status"] == "fail" and c["reason"] == "found 7 NVMe disk(s), expected 8"
    assert health.nvme_check([], None)["status"] == "pass"


def test_each_fault_names_its_check_and_a_fix():
    """A node with an InfiniBand port down: the sentence names the node, the check, the figure,
    the threshold and what to do."""
    t = health.thresholds_for("Standard_ND96asr_v4")
    checks = health_ib.ib_port_checks(health_ib.parse_ibstat(fx("ibstat_ndv4_port_down.txt")), t["ib_ports"],
                                      t["ib_rate_gbps"], "ibstat")
    r = health.report({"nd-0": checks, "nd-1": [health.check("gpu_count", "pass", 8, "== 8")]})
    assert r["sentences"] == [
        "nd-0 failed ib_ports 7 of 8 active (needs 8 active) (port(s) not active: mlx5_ib3:1 (Down/Polling)); "
        "fix: reboot the node to bring the port up; if it stays down leave it out (the inventory's node_filter) "
        "until AmlCompute replaces the VM."]
    assert set(health.FIXES) >= {"gpu_health", "gpu_xid", "nvlink", "ib_ports", "ib_rate", "ib_bw", "nvme_count",
                                 "fs_write", "unreachable", "pair_link"}
    # a check with no fix of its own (another gate's) still gets one
    other = health.node_sentence("nd-3", [health.check("new_check", "fail", "1", "0", "broke")])
    assert other == ("nd-3 failed new_check 1 (needs 0) (broke); fix: repair the node, or leave it out (the "
                     "inventory's node_filter) until AmlCompute replaces the VM.")


# ---------------------------------------------------------------- GPU <-> GPU copies (NVLink bandwidth)
def test_p2p_matrix_and_the_slow_pair_named():
    pairs = health.parse_nvbandwidth_p2p(fx("nvbandwidth_h100_ok.txt"))
    assert len(pairs) == 56 and (0, 0) not in pairs and pairs[(0, 5)] == 376.42
    assert health.parse_nvbandwidth(fx("nvbandwidth_h100_ok.txt"))["host_to_device_memcpy_ce"][7] == 55.17
    t = health.thresholds_for("Standard_ND96isr_H100_v5")
    assert health.p2p_check(fx("nvbandwidth_h100_ok.txt"), t["p2p_gbps"])["status"] == "pass"
    c = health.p2p_check(fx("nvbandwidth_h100_p2p_slow.txt"), t["p2p_gbps"])
    assert c["status"] == "fail" and c["value"] == "121.4 GB/s (min of 56 pairs, GPU 3 <- GPU 6)"
    assert c["reason"] == "GPU 3 <- GPU 6 copy 121.4 GB/s is below 335 GB/s; 2 pairs below: 3<-6, 6<-3"
    assert health.p2p_check(fx("nvbandwidth_ndv4_ok.txt"), 335.0)["status"] == "fail"  # the testcase did not run


def test_p2p_is_judged_only_where_the_size_has_a_figure():
    names = {"nvidia_smi": "nvidia-smi", "nvbandwidth": "nvbandwidth"}
    probe = {"tools": {"nvidia_smi": "/x/nvidia-smi", "nvbandwidth": "/x/nvbandwidth"},
             "gpu_query": {"rc": 0, "stdout": fx("nvsmi_gpu_h100_driver580.csv") * 8, "stderr": ""},
             "nvbandwidth": {"rc": 0, "stdout": fx("nvbandwidth_h100_p2p_slow.txt"), "stderr": ""}}
    h100 = by_name(health.node_checks(probe, health.thresholds_for("Standard_ND96isr_H100_v5"), names)["checks"])
    assert h100["p2p_bandwidth"]["status"] == "fail" and h100["h2d_bandwidth"]["status"] == "pass"
    ndv4 = by_name(health.node_checks(probe, health.thresholds_for("Standard_ND96asr_v4"), names)["checks"])
    assert "p2p_bandwidth" not in ndv4
