"""The text report that ends a run (amlhpc.report.report), on azcopy_stage results in today's shape
and in the sync shape (fetched, repaired, gone, prediction)."""

from __future__ import annotations

from amlhpc.report import report


def result(**over):
    r = {"files": 96, "bytes": 3 * 2**20, "bytes_over_wire": 2**20, "seconds": 2.0, "throughput_mb_s": 0.52,
         "skipped_existing": 0, "progress": []}
    r.update(over)
    return r


def test_staging_summary_of_todays_result():
    assert report.staging_summary([result(), result(seconds=3.0)]) == [
        "stage: 192 files, 6.0 MiB on disk (2.0 MiB over the wire) on 2 node(s) in 3.0 s: 2.1 MB/s on disk"]


def test_staging_summary_prints_the_prediction_beside_the_measurement():
    lines = report.staging_summary([
        result(prediction={"seconds": 0.0412, "bottleneck": "NIC"}),
        result(prediction={"seconds": 1.93, "bottleneck": "decompression CPU"})])
    assert lines[0].endswith("in 2.0 s: 3.1 MB/s on disk; predicted 1.93 s (decompression CPU)")


def test_staging_summary_names_wrong_and_gone_files_then_counts():
    lines = report.staging_summary([
        result(repaired=[f"train/a_{i:03d}.tfrecord (checksum)" for i in range(5)], repaired_count=8),
        result(repaired=["train/b_001.tfrecord (size 10, plan 20)"], repaired_count=1, gone=["train/b_063.tfrecord"],
               gone_count=1, removed=0)])
    assert lines[1] == ("stage: 9 file(s) fetched again (wrong on disk): train/a_000.tfrecord (checksum), "
                        "train/a_001.tfrecord (checksum), train/a_002.tfrecord (checksum), "
                        "train/a_003.tfrecord (checksum), train/a_004.tfrecord (checksum) (+4 more)")
    assert lines[2] == "stage: 1 file(s) whose blob is gone from the container: train/b_063.tfrecord; removed 0 (stage_prune)"


def test_staging_summary_tells_files_handed_to_other_nodes_from_gone_ones():
    # removed counts both: 2 handed over (always, node-local scratch) and 1 gone (stage_prune)
    lines = report.staging_summary([
        result(gone=["train/b_063.tfrecord"], gone_count=1, handed=["train/b_010.tfrecord", "train/b_011.tfrecord"],
               handed_count=2, removed=3)])
    assert lines[1] == "stage: 1 file(s) whose blob is gone from the container: train/b_063.tfrecord; removed 1 (stage_prune)"
    assert lines[2] == ("stage: 2 file(s) handed to other nodes (the nodes changed; removed from node-local scratch): "
                        "train/b_010.tfrecord, train/b_011.tfrecord")


def test_staging_summary_when_nothing_staged():
    assert report.staging_summary([{"skipped": True}]) == ["stage: no staging ran"]


def nodes(n: int, **switches) -> list[dict]:
    return [{"inventory_hostname": f"nd-{i}", **switches} for i in range(n)]


def test_nothing_is_skipped_where_every_switch_has_its_roles_default():
    # BeeOND is opt-in: its default (off) is reported; every other role is on by default.
    assert report.skipped_phases(nodes(2), {"inventory_hostname": "localhost"}) == [
        "beeond: skipped on nd-0, nd-1: beeond_enabled is false"]
    assert report.skipped_phases(nodes(2, beeond_enabled=True), {}) == []


def test_each_skip_names_its_switch_and_only_the_hosts_where_it_is_off():
    hosts = nodes(3, beeond_enabled=True)
    hosts[1]["nccl_enabled"] = False
    hosts[2]["nccl_enabled"] = "no"  # as -e or an INI inventory gives it
    hosts[0]["gpu_clocks_enabled"] = "false"
    hosts[2]["gpu_clocks_enabled"] = "yes"
    assert report.skipped_phases(hosts, {"inventory_hostname": "localhost", "aml_cluster_manage": 0}) == [
        "cluster: skipped on localhost: aml_cluster_manage is false",
        "gpu_clocks: skipped on nd-0: gpu_clocks_enabled is false",
        "nccl: skipped on nd-1, nd-2: nccl_enabled is false",
    ]


def test_a_big_cluster_names_the_first_hosts_then_counts():
    (line,) = report.skipped_phases(nodes(32, beeond_enabled=True, ssh_trust_enabled=False), {})
    assert line == ("ssh_trust: skipped on nd-0, nd-1, nd-2, nd-3, nd-4, nd-5, nd-6, nd-7 (+24 more): "
                    "ssh_trust_enabled is false")


def test_run_report_puts_the_skips_after_the_nodes_line():
    lines = report.run_report(nodes(1, nvme_raid_enabled=False, beeond_enabled=True),
                              {"inventory_hostname": "localhost"}, None)
    assert lines == ["nodes: 1 (nd-0)", "nvme_raid: skipped on nd-0: nvme_raid_enabled is false",
                     "stage: no staging ran", "submit: no job ran"]


def test_run_report_has_the_health_verdicts_section_where_nodes_were_left_out():
    from amlhpc.health.health_verdict import report_lines, verdict
    fail = [{"check": "gpu_xid", "status": "fail", "value": "1 critical", "threshold": "0 critical",
             "reason": "Xid 79 on PCI 0001:00:00.0"}]
    v = verdict({"nd-0": fail, "nd-1": []}, ["nd-0", "nd-1"], on_failure="exclude", spares=1,
                addresses={"nd-1": "10.0.0.5"})
    v["report_lines"] = report_lines(v)
    lines = report.run_report(nodes(2), {"inventory_hostname": "localhost", "healthcheck_verdict": v}, None)
    assert [line for line in lines if line.startswith("healthcheck: ")] == [
        "healthcheck: health verdict: exclude (excluding 1 of 2 node(s) (healthcheck_spare_nodes: 1): nd-0 "
        "(gpu_xid: Xid 79 on PCI 0001:00:00.0). Training goes on with the 1 other node(s): nd-1.)",
        "healthcheck: the job trains on 1 node(s) (nd-1), rendezvous 10.0.0.5:29400; left out: nd-0"]


def test_the_report_says_where_the_run_failed():
    from amlhpc.report.report import run_report
    failed = {"phase": "stage", "task": "Stage | Plan each node's shard", "message": "listing failed: refused"}
    nodes = [{"inventory_hostname": f"n{i}", "report_failed_at": failed} for i in range(2)] + [{"inventory_hostname": "n2"}]
    lines = run_report(nodes, {"report_failed_at": {"phase": "submit", "task": "Submit | Run", "message": "no quota"}})
    assert lines[1:3] == ["failed at stage: 'Stage | Plan each node's shard' on n0, n1: listing failed: refused",
                          "failed at submit: 'Submit | Run' on localhost: no quota"]
