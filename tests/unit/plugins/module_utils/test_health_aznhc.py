"""Issue 42, item 7: AzNHC's checks the gate lacked, on outputs in the tools' own formats
(fixtures/health/README.md says where each format comes from): correctable ECC counts and rows
remapped for uncorrectable errors (check_gpu_ecc 20000000 10000), hardware clock slowdowns
(check_gpu_clock_throttling), InfiniBand link flaps (check_ib_link_flapping 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amlhpc.health import health, health_probe

FIX = Path(__file__).parent / "fixtures" / "health"


def text(name: str) -> str:
    return (FIX / name).read_text()


NDV4 = health.thresholds_for("Standard_ND96asr_v4")


def test_per_size_thresholds_are_aznhcs():
    for size in ("Standard_ND96asr_v4", "Standard_ND96amsr_A100_v4", "Standard_ND96isr_H100_v5",
                 "Standard_ND96isr_H200_v5"):
        t = health.thresholds_for(size)
        assert (t["ecc_sram_correctable_max"], t["ecc_dram_correctable_max"], t["remap_uncorrectable_max"]) == (
            10000, 20000000, 512), size
        assert t["gpu_slowdown_max"] == 0 and t["ib_link_downed_max"] == 1
    v100 = health.thresholds_for("Standard_ND40rs_v2")
    assert v100["ecc_sram_correctable_max"] is None and v100["gpu_slowdown_max"] == 0
    assert health.thresholds_for("Standard_D4s_v3")["ib_link_downed_max"] is None


def test_nvidia_smi_q_sections():
    gpus = health.parse_nvidia_smi_q(text("nvsmi_q_ecc_h100_driver550.txt"))
    assert len(gpus) == 8
    first = gpus["00000001:00:00.0"]
    assert first["ECC Errors/Aggregate/SRAM Correctable"] == "3"
    assert first["ECC Errors/Aggregate Uncorrectable SRAM Sources/SRAM L2"] == "0"
    assert first["ECC Mode/Current"] == "Enabled"


def test_correctable_ecc_and_row_remap_counts():
    ok = health.ecc_counts_check(text("nvsmi_q_ecc_ndv4_ok.txt"), text("nvsmi_remap_ndv4_ok.csv"), NDV4)
    assert ok["status"] == "pass" and ok["value"] == "SRAM 0, DRAM 12, remaps 0"
    assert ok["threshold"] == "SRAM <= 10000, DRAM <= 20000000, remaps <= 512"
    sram = health.ecc_counts_check(text("nvsmi_q_ecc_ndv4_sram_high.txt"), text("nvsmi_remap_ndv4_ok.csv"), NDV4)
    assert sram["status"] == "fail"
    assert sram["reason"] == "GPU 00000004:00:00.0: 12000 correctable SRAM ECC error(s) (more than 10000)"
    remap = health.ecc_counts_check(text("nvsmi_q_ecc_ndv4_ok.txt"), text("nvsmi_remap_ndv4_uncorrectable_high.csv"),
                                    NDV4)
    assert remap["status"] == "fail" and "0000000D:00:00.0: 600 row(s) remapped for uncorrectable errors" in remap["reason"]
    h100 = health.ecc_counts_check(text("nvsmi_q_ecc_h100_driver550.txt"), text("nvsmi_remap_h100_driver580.csv"),
                                   health.thresholds_for("Standard_ND96isr_H100_v5"))
    assert h100["status"] == "pass" and h100["value"].startswith("SRAM 3, DRAM 0")
    # A V100 reports single/double-bit counts and no row remapper: not checked, and says so.
    v100 = health.ecc_counts_check(text("nvsmi_q_ecc_v100.txt"), text("nvsmi_remap_v100.csv"),
                                   health.thresholds_for("Standard_ND40rs_v2"))
    assert v100["status"] == "skip" and "V100" in v100["reason"]
    assert health.ecc_counts_check(None, None, NDV4, "nvidia-smi: unknown display ECC")["status"] == "skip"


def test_hardware_slowdown():
    ok = health.throttle_check(text("nvsmi_q_perf_ndv4_ok.txt"), NDV4)
    assert ok["status"] == "pass" and ok["value"] == "0 GPU(s) slowed" and ok["threshold"] == "<= 0 GPU(s)"
    slow = health.throttle_check(text("nvsmi_q_perf_ndv4_hw_slowdown.txt"), NDV4)
    assert slow["status"] == "fail" and slow["value"] == "1 GPU(s) slowed"
    assert slow["reason"] == "GPU 0000000D:00:00.0: HW Slowdown, HW Thermal Slowdown active"
    # Before driver 535.54.03 the section is "Clocks Throttle Reasons": read the same way.
    old = health.throttle_check(text("nvsmi_q_perf_v100_throttle_reasons.txt"), health.thresholds_for("Standard_ND40rs_v2"))
    assert old["status"] == "pass"
    assert health.throttle_check("", NDV4)["status"] == "skip"


def test_ib_link_flaps():
    ok = health.ib_flaps_check(text("ib_counters_ndv4_ok.txt"), 1)
    # mlx5_an0 (Ethernet, 7 downs) is not counted; mlx5_ib5 went down once: under the limit.
    assert ok["status"] == "pass" and ok["value"] == "1 link-down(s) on the worst of 8 port(s)"
    flapping = health.ib_flaps_check(text("ib_counters_ndv4_flapping.txt"), 1)
    assert flapping["status"] == "fail" and flapping["reason"].startswith("mlx5_ib2:1 went down 3 times since boot")
    assert health.ib_flaps_check("", 1)["status"] == "skip"


def test_the_probe_reads_the_counters_as_grep_prints_them(tmp_path):
    for hca, layer, downs in (("mlx5_ib0", "InfiniBand", 2), ("mlx5_an0", "Ethernet", 0)):
        port = tmp_path / hca / "ports" / "1"
        (port / "counters").mkdir(parents=True)
        (port / "link_layer").write_text(f"{layer}\n")
        (port / "counters" / "link_downed").write_text(f"{downs}\n")
    out = health_probe.read_ib_counters(str(tmp_path))
    assert f"{tmp_path}/mlx5_ib0/ports/1/counters/link_downed:2\n" in out
    assert health.parse_ib_counters(out) == {"mlx5_an0:1": {"link_layer": "Ethernet", "link_downed": "0"},
                                             "mlx5_ib0:1": {"link_layer": "InfiniBand", "link_downed": "2"}}
    assert health.ib_flaps_check(out, 1)["status"] == "fail"


@pytest.mark.parametrize("ecc, perf, counters, failed", [
    ("nvsmi_q_ecc_ndv4_ok.txt", "nvsmi_q_perf_ndv4_ok.txt", "ib_counters_ndv4_ok.txt", []),
    ("nvsmi_q_ecc_ndv4_sram_high.txt", "nvsmi_q_perf_ndv4_hw_slowdown.txt", "ib_counters_ndv4_flapping.txt",
     ["gpu_ecc_counts", "gpu_throttle", "ib_link_flaps"]),
])
def test_node_checks_run_them_from_the_probe(ecc, perf, counters, failed):
    def ran(name):
        return {"rc": 0, "stdout": text(name), "stderr": ""}
    probe = {"tools": {"nvidia_smi": "/usr/bin/nvidia-smi"}, "gpu_query": ran("nvsmi_gpu_ndv4_ok.csv"),
             "remap_query": ran("nvsmi_remap_ndv4_ok.csv"), "kernel_log": ran("dmesg_clean.txt"),
             "ecc_q": ran(ecc), "perf_q": ran(perf), "ib_counters": text(counters), "nvme_devices": []}
    checks = health.node_checks(probe, NDV4, {})["checks"]
    names = [c["check"] for c in checks]
    assert {"gpu_ecc_counts", "gpu_throttle", "ib_link_flaps"} <= set(names)
    assert sorted(c["check"] for c in checks if c["status"] == "fail" and c["check"] in
                  ("gpu_ecc_counts", "gpu_throttle", "ib_link_flaps")) == failed
    if failed:
        sentence = health.node_sentence("n1", checks)
        assert "gpu_ecc_counts SRAM 12000" in sentence and "ib_link_flaps" in sentence
