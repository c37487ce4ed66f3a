"""Health-check parsers and verdicts on outputs in the shapes the real tools print.

The fixtures (fixtures/health/) reproduce the tools' formats: nccl-tests' column layout
(with the NCCL INFO / Open MPI lines a launcher interleaves, N/A in #wrong, integer times
above 10 ms), nvbandwidth's matrices, both bandwidthTest unit styles, nvidia-smi's
``csv,noheader,nounits`` with Azure NDv4 PCI domains, kernel XID lines, elbencho's result
table and --csvfile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from amlhpc.health import health

FIX = Path(__file__).parent / "fixtures" / "health"


def fx(name: str) -> str:
    return (FIX / name).read_text()


def by_name(checks):
    return {c["check"]: c for c in checks}


# ---------------------------------------------------------------- thresholds
def test_thresholds_of_ndv4_match_azure_node_health_checks():
    t = health.thresholds_for("Standard_ND96asr_v4")
    assert t["gpus"] == 8
    assert t["allreduce_node_busbw"] == 228.0
    assert t["h2d_gbps"] == 20.0
    assert health.thresholds_for("standard_nd96amsr_a100_v4")["allreduce_node_busbw"] == 228.0
    assert health.thresholds_for("Standard_ND96isr_H100_v5")["allreduce_node_busbw"] == 460.0
    assert health.thresholds_for("Standard_ND40rs_v2")["allreduce_node_busbw"] is None


def test_unknown_size_has_no_thresholds_and_overrides_apply():
    t = health.thresholds_for("Standard_D4s_v5")
    assert all(t[k] is None for k in health.THRESHOLD_KEYS)
    t = health.thresholds_for("Standard_ND96asr_v4", {
        "Standard_ND96asr_v4": {"allreduce_node_busbw": 200}, "default": {"fs_read_mbps": 5}})
    assert t["allreduce_node_busbw"] == 200
    assert t["fs_read_mbps"] == 5
    assert t["gpus"] == 8
    with pytest.raises(ValueError, match="unknown keys"):
        health.thresholds_for("x", {"default": {"allreduce_busbw": 1}})


# ---------------------------------------------------------------- nvidia-smi
def test_query_command_lines():
    assert health.nvidia_smi_gpu_args() == [
        "nvidia-smi",
        "--query-gpu=index,name,pci.bus_id,ecc.mode.current,ecc.errors.uncorrected.volatile.total,"
        "retired_pages.pending",
        "--format=csv,noheader,nounits"]
    assert health.nvidia_smi_remap_args("/usr/bin/nvidia-smi")[1] == (
        "--query-remapped-rows=gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,"
        "remapped_rows.pending,remapped_rows.failure")


def test_healthy_ndv4_node_passes():
    rows = health.parse_gpu_query(fx("nvsmi_gpu_ndv4_ok.csv"))
    assert [r["pci.bus_id"] for r in rows][4] == "0000000B:00:00.0"
    checks = by_name(health.gpu_checks(fx("nvsmi_gpu_ndv4_ok.csv"), fx("nvsmi_remap_ndv4_ok.csv"),
                                       fx("dmesg_clean.txt"), 8, "Standard_ND96asr_v4"))
    assert {c["status"] for c in checks.values()} == {"pass"}
    assert checks["gpu_count"]["value"] == "8"


def test_seven_gpus_fail_with_the_count():
    c = by_name(health.gpu_checks(fx("nvsmi_gpu_ndv4_7gpus.csv"), None, None, 8, "Standard_ND96asr_v4"))
    assert c["gpu_count"]["status"] == "fail"
    assert c["gpu_count"]["reason"] == "found 7 GPUs, expected 8 for Standard_ND96asr_v4"
    assert c["gpu_xid"]["status"] == "skip"


def test_uncorrectable_ecc_error_names_the_gpu():
    c = by_name(health.gpu_checks(fx("nvsmi_gpu_ndv4_ecc.csv"), fx("nvsmi_remap_ndv4_ok.csv"), "", 8))
    assert c["gpu_health"]["status"] == "fail"
    assert "GPU 5 (0000000C:00:00.0): 2 uncorrectable ECC error(s)" in c["gpu_health"]["reason"]


@pytest.mark.parametrize(("remap", "words"), [
    ("nvsmi_remap_ndv4_pending.csv", "00000004:00:00.0: row remap pending"),
    ("nvsmi_remap_ndv4_failure.csv", "0000000D:00:00.0: row remapping failed"),
])
def test_row_remap_problems(remap, words):
    c = by_name(health.gpu_checks(fx("nvsmi_gpu_ndv4_na.csv"), fx(remap), "", 8))
    assert c["gpu_health"]["status"] == "fail"
    assert words in c["gpu_health"]["reason"]


def test_retired_pages_na_is_not_a_problem():
    c = by_name(health.gpu_checks(fx("nvsmi_gpu_ndv4_na.csv"), fx("nvsmi_remap_ndv4_ok.csv"), "", 8))
    assert c["gpu_health"]["status"] == "pass"


def test_v100_without_row_remapper_is_judged_on_the_rest():
    c = by_name(health.gpu_checks(fx("nvsmi_gpu_v100.csv"), fx("nvsmi_remap_v100.csv"), "", None))
    assert c["gpu_count"]["status"] == "pass"
    assert c["gpu_health"]["status"] == "pass"


def test_fatal_xid_fails_once_per_gpu_and_code_and_xid_13_does_not():
    xids = health.parse_xids(fx("dmesg_xid.txt"))
    assert [(x["pci"], x["xid"]) for x in xids] == [("0003:00:00", 13), ("000b:00:00", 79), ("000b:00:00", 79)]
    c = by_name(health.gpu_checks(fx("nvsmi_gpu_ndv4_ok.csv"), None, fx("dmesg_xid.txt"), 8))
    assert c["gpu_xid"]["status"] == "fail"
    assert c["gpu_xid"]["reason"] == "Xid 79 on PCI 000b:00:00"
    assert by_name(health.gpu_checks(fx("nvsmi_gpu_ndv4_ok.csv"), None, fx("dmesg_clean.txt"), 8))[
        "gpu_xid"]["status"] == "pass"


def test_garbled_nvidia_smi_output_is_a_failure_not_a_crash():
    c = health.gpu_checks("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
                          None, None, 8)
    assert c[0]["status"] == "fail" and "fields" in c[0]["reason"]


# ---------------------------------------------------------------- host <-> device
def test_nvbandwidth_matrix_parsed_per_gpu():
    p = health.parse_nvbandwidth(fx("nvbandwidth_ndv4_ok.txt"))
    assert p["host_to_device_memcpy_ce"][7] == 24.57
    assert p["device_to_host_memcpy_ce"][3] == 26.03
    assert len(p["device_to_host_memcpy_ce"]) == 8
    assert health.h2d_check("nvbandwidth", [fx("nvbandwidth_ndv4_ok.txt")], 20.0)["status"] == "pass"


def test_nvbandwidth_slow_gpu_is_named():
    c = health.h2d_check("nvbandwidth", [fx("nvbandwidth_ndv4_slow_gpu2.txt")], 20.0)
    assert c["status"] == "fail"
    assert c["reason"] == "GPU 2 D2H bandwidth 12.3 GB/s is below 20 GB/s"


def test_bandwidth_test_both_unit_styles_and_device_all():
    assert health.parse_bandwidth_test(fx("bandwidthtest_a100_gpu0.txt")) == {"h2d": 26.1, "d2h": 25.6, "d2d": 1152.7}
    old = health.parse_bandwidth_test(fx("bandwidthtest_v100_old_mbs.txt"))
    assert old["h2d"] == pytest.approx(11618.3 * 1.048576e-3)
    both = health.parse_bandwidth_test(fx("bandwidthtest_all_2dev.txt"))
    assert both["h2d"] == pytest.approx(26.1)
    c = health.h2d_check("bandwidthTest", [fx("bandwidthtest_a100_gpu0.txt"), fx("bandwidthtest_a100_gpu1_slow.txt")], 20.0)
    assert c["status"] == "fail" and "GPU 1 H2D bandwidth 13.2 GB/s" in c["reason"]


def test_no_bandwidth_figure_fails():
    assert health.h2d_check("nvbandwidth", ["CUDA error: no CUDA-capable device is detected"], 20.0)["status"] == "fail"


# ---------------------------------------------------------------- nccl-tests
def test_nccl_single_size_node_run():
    p = health.parse_nccl_tests(fx("all_reduce_ndv4_node_ok.txt"))
    assert len(p["rows"]) == 1
    assert p["rows"][0]["size"] == 8589934592 and p["rows"][0]["redop"] == "sum"
    assert p["avg_busbw"] == pytest.approx(p["rows"][0]["oop_busbw"])
    assert p["out_of_bounds"] == 0
    assert health.nccl_check("nccl_all_reduce_node", fx("all_reduce_ndv4_node_ok.txt"), 228.0)["status"] == "pass"
    slow = health.nccl_check("nccl_all_reduce_node", fx("all_reduce_ndv4_node_slow.txt"), 228.0)
    assert slow["status"] == "fail"
    assert slow["reason"] == "busbw at 8589934592 B 171.1 GB/s is below 228 GB/s"


@pytest.mark.parametrize("name", ["all_reduce_ndv4_node_ok.txt", "all_reduce_ndv4_node_slow.txt",
                                  "all_reduce_wrong.txt", "alltoall_ndv4_2node_sweep.txt"])
def test_nccl_fixtures_list_their_ranks_as_the_tool_does(name):
    # Each process drives nThread x nGpus ranks: a single `all_reduce_perf -g 8` is one
    # process (one Pid for all eight ranks), never eight.
    run = health.nccl_ranks(fx(name))
    assert run["ranks"] and len(run["ranks"]) == run["processes"] * run["threads"] * run["gpus_per_thread"]
    assert sorted(r["rank"] for r in run["ranks"]) == list(range(len(run["ranks"])))


def test_single_process_node_run_is_one_pid_for_eight_gpus():
    run = health.nccl_ranks(fx("all_reduce_ndv4_node_ok.txt"))
    assert run["gpus_per_thread"] == 8 and run["processes"] == 1
    assert [r["device"] for r in run["ranks"]] == list(range(8))


def test_nccl_sweep_uses_largest_size_and_ignores_launcher_noise():
    p = health.parse_nccl_tests(fx("alltoall_ndv4_2node_sweep.txt"))
    assert len(p["rows"]) == 14
    assert p["rows"][0]["ip_wrong"] == "N/A" and p["wrong"] == 0
    assert p["rows"][-1]["size"] == 8589934592
    assert health.nccl_busbw(p) == p["rows"][-1]["oop_busbw"]
    assert p["avg_busbw"] < health.nccl_busbw(p)  # the sweep's average is not what is gated
    assert health.nccl_check("nccl_alltoall_cluster", fx("alltoall_ndv4_2node_sweep.txt"), 13.9)["status"] == "pass"
    assert health.nccl_check("nccl_alltoall_cluster", fx("alltoall_ndv4_2node_sweep.txt"), 45)["status"] == "fail"


def test_nccl_wrong_results_fail_whatever_the_bandwidth():
    c = health.nccl_check("nccl_all_reduce_node", fx("all_reduce_wrong.txt"), 1.0)
    assert c["status"] == "fail" and "#wrong 6" in c["reason"]


def test_nccl_crash_output_fails():
    c = health.nccl_check("nccl_all_reduce_node", "Test NCCL failure common.cu:1005 'unhandled cuda error'", 228.0)
    assert c["status"] == "fail"


def test_no_threshold_reports_without_gating():
    c = health.nccl_check("nccl_alltoall_node", fx("all_reduce_ndv4_node_slow.txt"), None)
    assert c["status"] == "pass" and "not gated" in c["reason"] and c["value"].startswith("171.1 GB/s")


# ---------------------------------------------------------------- shared mount
def test_elbencho_table_and_csv_agree():
    table = health.parse_elbencho(fx("elbencho_write_read.txt"))
    csvr = health.parse_elbencho(fx("elbencho_results.csv"))
    assert table == csvr
    assert table["WRITE"] == pytest.approx(4045 * 1.048576)
    assert table["READ"] == pytest.approx(7161 * 1.048576)


def test_fs_checks_from_elbencho_and_from_the_reader():
    limits = {"fs_write_mbps": 5000.0, "fs_read_mbps": 1000.0}
    c = by_name(health.fs_checks("elbencho", fx("elbencho_write_read.txt"), limits))
    assert c["fs_write"]["status"] == "fail" and c["fs_read"]["status"] == "pass"
    ok = by_name(health.fs_checks("amlhpc_fs_bench", {"write_mbps": 1500.0, "read_mbps": 2500.0, "errors": []}, limits))
    assert ok["fs_read"]["status"] == "pass" and ok["fs_read"]["value"] == "2500.0 MB/s (amlhpc_fs_bench)"
    bad = by_name(health.fs_checks("amlhpc_fs_bench",
                                   {"write_mbps": 1500.0, "read_mbps": 2500.0, "errors": ["file00003 block 2: ..."]},
                                   limits))
    assert bad["fs_read"]["status"] == "fail" and "differs" in bad["fs_read"]["reason"]


# ---------------------------------------------------------------- verdict
def test_report_names_failing_nodes_and_unreachable_ones():
    results = {
        "nd-0": [health.check("gpu_count", "pass", 8, "== 8"), health.skipped("fs_write", "not mounted")],
        "nd-1": health.gpu_checks(fx("nvsmi_gpu_ndv4_7gpus.csv"), None, "", 8, "Standard_ND96asr_v4"),
        "nd-2": None,
    }
    r = health.report(results)
    assert r["failing_nodes"] == ["nd-1", "nd-2"]
    assert r["failing"][0]["reasons"] == ["gpu_count: found 7 GPUs, expected 8 for Standard_ND96asr_v4"]
    # one sentence per bad node: the node, the check, its figure against the threshold, the fix
    assert r["sentences"] == [
        "nd-1 failed gpu_count 7 (needs == 8) (found 7 GPUs, expected 8 for Standard_ND96asr_v4); fix: a GPU is "
        "missing: reboot the node, and if it still lacks one leave it out (the inventory's node_filter) until "
        "AmlCompute replaces the VM.",
        "nd-2 did not answer: no health check results (host failed or unreachable); fix: check that the node is "
        "running and answers SSH, then rerun; if it does not, leave it out (the inventory's node_filter) until "
        "AmlCompute replaces the VM."]
    assert [f["checks"] for f in r["failing"]] == [["gpu_count"], ["unreachable"]]
    assert r["message"] == ("health check failed on 2 of 3 node(s). " + " ".join(r["sentences"])
                            + " (healthcheck_on_failure: exclude with healthcheck_spare_nodes: N trains on the"
                            " other nodes.)")
    assert r["table"][0].split() == ["NODE", "CHECK", "STATUS", "VALUE", "THRESHOLD", "REASON"]
    assert any(line.startswith("nd-1") and " FAIL " in line and "gpu_count" in line for line in r["table"])
    assert r["counts"] == {"pass": 3, "fail": 1, "skip": 1}


def test_report_all_pass():
    r = health.report({"a": [health.check("fs_write", "pass", "1.0 MB/s")]})
    assert r["failing"] == [] and r["message"] == ""


def test_unreadable_kernel_log_says_what_the_command_answered():
    c = by_name(health.gpu_checks(fx("nvsmi_gpu_ndv4_ok.csv"), None, None, 8, "Standard_ND96asr_v4",
                                  "dmesg: read kernel buffer failed: Operation not permitted\n"))
    assert c["gpu_xid"]["status"] == "skip"
    assert c["gpu_xid"]["reason"] == ("kernel log not readable, XIDs not checked: "
                                      "dmesg: read kernel buffer failed: Operation not permitted")


def test_recorded_h100_answers_pass():
    """nvidia-smi's answers recorded on one H100 80GB HBM3 (driver 580), read-only: ECC on,
    retired pages [N/A] (H100 remaps rows instead), no remapped rows."""
    rows = health.parse_gpu_query(fx("nvsmi_gpu_h100_driver580.csv"))
    assert [(r["name"], r["ecc.mode.current"], r["retired_pages.pending"]) for r in rows] == [
        ("NVIDIA H100 80GB HBM3", "Enabled", "[N/A]")]
    checks = by_name(health.gpu_checks(fx("nvsmi_gpu_h100_driver580.csv"), fx("nvsmi_remap_h100_driver580.csv"),
                                       "", 1))
    assert {n: c["status"] for n, c in checks.items()} == {"gpu_count": "pass", "gpu_health": "pass",
                                                           "gpu_xid": "pass"}


# ---------------------------------------------------------------- one node's probe, judged
NAMES = {"nvidia_smi": "nvidia-smi", "nvbandwidth": "nvbandwidth", "bandwidth_test": "bandwidthTest",
         "all_reduce_perf": "all_reduce_perf", "alltoall_perf": "alltoall_perf", "elbencho": "elbencho",
         "mpirun": "mpirun", "ibstat": "ibstat", "ibv_devinfo": "ibv_devinfo", "ib_write_bw": "ib_write_bw"}
NO_TOOLS = dict.fromkeys(NAMES, "")


def ran(text, rc=0, stderr=""):
    return {"rc": rc, "stdout": text, "stderr": stderr}


def ndv4_probe(**over):
    tools = {k: f"/opt/t/{v}" for k, v in NAMES.items()} | {"bandwidth_test": "", "elbencho": "", "ibv_devinfo": ""}
    probe = {"tools": tools, "gpu_query": ran(fx("nvsmi_gpu_ndv4_ok.csv")),
             "nvlink": ran(fx("nvlink_a100_ok.txt")), "ibstat": ran(fx("ibstat_ndv4_ok.txt")),
             "ib_write_bw": {f"mlx5_ib{i}": ran(fx("ib_write_bw_hdr_mbsec.txt")) for i in range(8)},
             "nvme_devices": [f"/dev/nvme{i}n1" for i in range(8)],
             "remap_query": ran(fx("nvsmi_remap_ndv4_ok.csv")), "kernel_log": ran(fx("dmesg_clean.txt")),
             "ecc_q": ran(fx("nvsmi_q_ecc_ndv4_ok.txt")), "perf_q": ran(fx("nvsmi_q_perf_ndv4_ok.txt")),
             "ib_counters": fx("ib_counters_ndv4_ok.txt"),
             "nvbandwidth": ran(fx("nvbandwidth_ndv4_ok.txt")),
             "nccl_node": [{"check": "nccl_all_reduce_node", **ran(fx("all_reduce_ndv4_node_ok.txt"))},
                           {"check": "nccl_alltoall_node", **ran(fx("alltoall_ndv4_2node_sweep.txt"))}],
             "fs_isdir": True, "fs_bench": {"write_mbps": 2000.0, "read_mbps": 3000.0, "errors": []},
             "nodefile_exists": True}
    probe.update(over)
    return probe


CLUSTER = {"enabled": True, "nodes": 2, "nodefile": "/etc/amlhpc/nodefile", "mpirun_args": "--allow-run-as-root -x A",
           "args": "-b 8G -e 8G -g 1"}


def test_node_checks_of_a_healthy_ndv4_head_in_table_order_with_the_cluster_runs():
    limits = health.thresholds_for("Standard_ND96asr_v4")
    out = health.node_checks(ndv4_probe(), limits, NAMES, vm_size="Standard_ND96asr_v4", fs_path="/mnt/beeond",
                             cluster=CLUSTER)
    assert [c["check"] for c in out["checks"]] == ["gpu_count", "gpu_health", "gpu_xid", "gpu_ecc_counts",
                                                   "gpu_throttle", "nvlink", "h2d_bandwidth",
                                                   "nccl_all_reduce_node", "nccl_alltoall_node", "ib_ports", "ib_rate",
                                                   "ib_bw", "ib_link_flaps", "nvme_count", "fs_write", "fs_read"]
    assert all(c["status"] == "pass" for c in out["checks"]), out["checks"]
    assert out["gpu_count"] == 8
    assert [r["check"] for r in out["cluster_runs"]] == ["nccl_all_reduce_cluster", "nccl_alltoall_cluster"]
    assert out["cluster_runs"][0]["argv"] == [
        "/opt/t/mpirun", "-np", "16", "--hostfile", "/etc/amlhpc/nodefile", "--map-by", "ppr:8:node",
        "--allow-run-as-root", "-x", "A", "/opt/t/all_reduce_perf", "-b", "8G", "-e", "8G", "-g", "1"]
    assert out["cluster_runs"][0]["minimum"] == limits["allreduce_cluster_busbw"]


def test_node_checks_without_any_tool_skip_each_check_with_its_reason():
    probe = {"tools": NO_TOOLS, "fs_isdir": False, "nodefile_exists": False}
    out = health.node_checks(probe, health.thresholds_for(""), NAMES, fs_path="/mnt/scratch", cluster=CLUSTER)
    reasons = {c["check"]: (c["status"], c["reason"]) for c in out["checks"]}
    assert reasons["gpu_count"] == ("skip", "nvidia-smi not found on PATH or in healthcheck_tool_dirs: "
                                            "no NVIDIA driver on this host")
    assert reasons["h2d_bandwidth"] == ("skip", "no GPU (nvidia-smi not found)")
    assert reasons["nccl_all_reduce_node"] == ("skip", "no GPU (nvidia-smi not found)")
    assert reasons["fs_write"] == ("skip", "/mnt/scratch is not a folder (shared file system not mounted?)")
    assert reasons["nccl_all_reduce_cluster"] == ("skip", "no GPU (nvidia-smi not found)")
    assert out["cluster_runs"] == [] and out["gpu_count"] == 0
    # not a head: no cluster rows at all
    assert "nccl_all_reduce_cluster" not in {c["check"] for c in health.node_checks(probe, {}, NAMES)["checks"]}


@pytest.mark.parametrize(("cluster", "probe", "reason"), [
    ({**CLUSTER, "enabled": False}, {}, "turned off (healthcheck_nccl_cluster: false)"),
    ({**CLUSTER, "nodes": 1}, {}, "single-node cluster"),
    (CLUSTER, {"tools": {**{k: f"/opt/t/{v}" for k, v in NAMES.items()}, "mpirun": ""}}, "mpirun not found"),
    (CLUSTER, {"tools": {**{k: f"/opt/t/{v}" for k, v in NAMES.items()}, "alltoall_perf": ""}},
     "alltoall_perf (nccl-tests) not found"),
    (CLUSTER, {"nodefile_exists": False}, "nodefile /etc/amlhpc/nodefile does not exist"),
])
def test_cluster_run_skipped_with_the_first_reason_that_applies(cluster, probe, reason):
    out = health.node_checks(ndv4_probe(**probe), health.thresholds_for("Standard_ND96asr_v4"), NAMES,
                             fs_path="/x", cluster=cluster)
    skipped = {c["check"]: c["reason"] for c in out["checks"] if c["status"] == "skip"}
    assert skipped["nccl_alltoall_cluster"] == reason


def test_node_checks_judge_failures_and_check_mode():
    limits = health.thresholds_for("Standard_ND96asr_v4")
    bad = ndv4_probe(gpu_query=ran(fx("nvsmi_gpu_ndv4_7gpus.csv")),
                     kernel_log=ran("", rc=1, stderr="dmesg: read kernel buffer failed: Operation not permitted"),
                     nccl_node=[{"check": "nccl_all_reduce_node", **ran(fx("all_reduce_ndv4_node_slow.txt"))}],
                     fs_bench={"error": "file system benchmark under /x failed: [Errno 28] No space left on device"})
    out = by_name(health.node_checks(bad, limits, NAMES, vm_size="Standard_ND96asr_v4", fs_path="/x")["checks"])
    assert out["gpu_count"]["reason"] == "found 7 GPUs, expected 8 for Standard_ND96asr_v4"
    assert out["gpu_xid"]["status"] == "skip" and "Operation not permitted" in out["gpu_xid"]["reason"]
    assert out["nccl_all_reduce_node"]["status"] == "fail"
    assert out["fs_write"]["status"] == "fail" and "No space left" in out["fs_read"]["reason"]
    checked = by_name(health.node_checks(ndv4_probe(), limits, NAMES, fs_path="/x", check_mode=True)["checks"])
    assert checked["fs_read"]["reason"] == "check mode: the test writes files"
    assert checked["gpu_count"]["status"] == "pass"  # the read-only probes still count


def test_bandwidth_test_per_gpu_when_there_is_no_nvbandwidth():
    tools = {k: f"/opt/t/{v}" for k, v in NAMES.items()} | {"nvbandwidth": ""}
    runs = [ran(fx("bandwidthtest_a100_gpu0.txt")), ran(fx("bandwidthtest_a100_gpu1_slow.txt"))]
    probe = ndv4_probe(tools=tools, bandwidth_test=runs)
    out = by_name(health.node_checks(probe, health.thresholds_for("Standard_ND96asr_v4"), NAMES, fs_path="")["checks"])
    assert out["h2d_bandwidth"]["status"] == "fail"
    assert out["fs_write"]["reason"] == "no path (healthcheck_fs_path is empty)"


def test_cluster_checks_are_the_heads_from_the_registered_loop():
    results = [{"item": {"head": "nd-0", "check": "nccl_all_reduce_cluster", "minimum": 148.0}, "rc": 0,
                "stdout": fx("all_reduce_ndv4_node_ok.txt"), "stderr": ""},
               {"item": {"head": "nd-0", "check": "nccl_alltoall_cluster", "minimum": None}, "rc": 1,
                "stdout": "", "stderr": "mpirun: connection refused"},
               {"item": {"check": "old-style"}, "stdout": "x"}]
    out = health.cluster_checks(results)
    assert list(out) == ["nd-0"]
    assert [(c["check"], c["status"]) for c in out["nd-0"]] == [("nccl_all_reduce_cluster", "pass"),
                                                                ("nccl_alltoall_cluster", "fail")]


def test_with_cluster_checks_appends_each_cluster_to_its_head_and_keeps_missing_nodes():
    results = [{"item": {"head": "nd-0", "check": "nccl_all_reduce_cluster", "minimum": None}, "rc": 0,
                "stdout": fx("all_reduce_ndv4_node_ok.txt"), "stderr": ""}]
    mine = [health.skipped("fs_write", "x")]
    out = health.with_cluster_checks({"nd-0": mine, "nd-1": mine, "nd-2": None}, results)
    assert [c["check"] for c in out["nd-0"]] == ["fs_write", "nccl_all_reduce_cluster"]
    assert out["nd-1"] == mine and out["nd-2"] is None
