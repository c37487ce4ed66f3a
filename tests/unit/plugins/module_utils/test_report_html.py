"""The HTML report (amlhpc.report.report_html) on results in the shapes the run registers.

Inputs are made the way the run makes them: checks by amlhpc.health.health's own functions from the
recorded tool outputs in fixtures/health/, nccl-tests and elbencho output as the role
registers it (``results[].stdout`` with ``item.check``), azcopy_stage results with today's
progress samples (``seconds``/``bytes_over_wire``) and the ``{t, bytes}`` shape, the job's
metrics as amlhpc.azure.job_spec.read_metrics returns them. The page and its SVG plots are read back
with tests/report_reader.py (stdlib HTML and XML parsers): what each plot shows is checked
against the data (bars, markers, steps, ticks, legends), in pixels mapped back through the
plot's own tick labels.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from report_reader import SVG_URI, axis_value, decode_svg, image_bytes, read_report, read_svg, table_dicts

from amlhpc.health import health
from amlhpc.azure import job_spec
from amlhpc.report import report_html, report_plots

FIX = Path(__file__).parent / "fixtures" / "health"


def fx(name: str) -> str:
    return (FIX / name).read_text()


def data_points(panel, points, digits=2):
    """Pixels (to 0.1 px) back to data through the panel's tick labels (linear axes), rounded."""
    return [(round(axis_value(panel["xticks"], x), digits), round(axis_value(panel["yticks"], y), digits))
            for x, y in points]


def dedup(points):
    return [p for i, p in enumerate(points) if i == 0 or p != points[i - 1]]


def bar_value(panel, rect):
    """The value a bar stands for: its top (or bottom, below 0) on the y axis."""
    zero = next(y for y, label in panel["yticks"] if label == "0")
    edge = rect["y"] if rect["y"] < zero - 0.05 else rect["y"] + rect["height"]
    return axis_value(panel["yticks"], edge)


def stage_result(progress, **over):
    r = {"files": 64, "bytes": 64 * 2**20, "bytes_over_wire": 20_000_000, "seconds": 4.0,
         "throughput_mb_s": 5.0, "skipped_existing": 0, "changed": True, "azcopy_runs": 1,
         "progress": progress, "sas_warnings": []}
    r.update(over)
    return r


# azcopy_stage today: one sample per 10 % (run_azcopy's progress dicts).
TODAY_PROGRESS = [
    {"status": "InProgress", "percent": 12.5, "completed": 8, "failed": 0, "skipped": 0, "total": 64,
     "bytes_over_wire": 2_000_000, "seconds": 1.0, "final": False},
    {"status": "InProgress", "percent": 50.0, "completed": 32, "failed": 0, "skipped": 0, "total": 64,
     "bytes_over_wire": 10_000_000, "seconds": 2.0, "final": False},
    {"status": "Completed", "percent": 100.0, "completed": 64, "failed": 0, "skipped": 0, "total": 64,
     "bytes_over_wire": 20_000_000, "seconds": 4.0, "final": True},
]
# The shape the staging work moves to: {t, bytes} per sample.
TB_PROGRESS = [{"t": 1.0, "bytes": 2_000_000}, {"t": 2.0, "bytes": 10_000_000}, {"t": 4.0, "bytes": 20_000_000}]


def ndv4_checks(*, slow_nccl: bool = False) -> list[dict]:
    limits = health.thresholds_for("Standard_ND96asr_v4")
    checks = health.gpu_checks(fx("nvsmi_gpu_ndv4_ok.csv"), fx("nvsmi_remap_ndv4_ok.csv"), fx("dmesg_clean.txt"),
                               limits["gpus"], "Standard_ND96asr_v4")
    checks.append(health.h2d_check("nvbandwidth", [fx("nvbandwidth_ndv4_ok.txt")], limits["h2d_gbps"]))
    text = fx("all_reduce_ndv4_node_slow.txt" if slow_nccl else "all_reduce_ndv4_node_ok.txt")
    checks.append(health.nccl_check("nccl_all_reduce_node", text, limits["allreduce_node_busbw"]))
    checks += health.fs_checks("elbencho", fx("elbencho_write_read.txt"), limits)
    return checks


def local_checks() -> list[dict]:
    """What the role records on the local default: no GPU tools, fs measured without thresholds."""
    limits = health.thresholds_for("")
    reason = "nvidia-smi not found on PATH or in healthcheck_tool_dirs: no NVIDIA driver on this host"
    checks = [health.skipped(n, reason) for n in ("gpu_count", "gpu_health", "gpu_xid")]
    checks.append(health.skipped("h2d_bandwidth", "no GPU (nvidia-smi not found)"))
    checks += [health.skipped(n, "no GPU (nvidia-smi not found)")
               for n in ("nccl_all_reduce_node", "nccl_alltoall_node")]
    checks += [health.skipped(n, "single-node cluster") for n in ("nccl_all_reduce_cluster", "nccl_alltoall_cluster")]
    checks += health.fs_checks("amlhpc_fs_bench", {"write_mbps": 312.4, "read_mbps": 1543.9, "errors": []}, limits)
    return checks


def registered_nccl(check: str, text: str) -> dict:
    return {"results": [{"item": {"check": check, "tool": "all_reduce_perf"}, "stdout": text, "stderr": "",
                         "rc": 0, "changed": False}]}


def registered_nccl_skipped() -> dict:
    return {"results": [{"item": {"check": "nccl_all_reduce_node"}, "skipped": True,
                         "skip_reason": "Conditional result was False"}], "skipped": True}


# ---------------------------------------------------------------- staging
@pytest.mark.parametrize("progress", [TODAY_PROGRESS, TB_PROGRESS], ids=["seconds-bytes_over_wire", "t-bytes"])
def test_progress_points_and_rates_from_either_shape(progress):
    r = stage_result(progress)
    assert report_html.progress_points(r) == [(1.0, 2_000_000), (2.0, 10_000_000), (4.0, 20_000_000)]
    # 2 MB in the first second, 8 MB in the next, 10 MB over the last two seconds.
    assert report_html.rate_points(report_html.progress_points(r)) == [(1.0, 2.0), (2.0, 8.0), (4.0, 5.0)]


def test_rates_skip_samples_with_no_time_between_them():
    assert report_html.rate_points([(1.0, 100), (1.0, 200), (3.0, 400)]) == [(1.0, 100e-6), (3.0, 150e-6)]


def test_staging_section_table_matches_the_results_and_plots_progress():
    sec = report_html.staging_section({
        "node-1": stage_result(TB_PROGRESS, files=60, bytes_over_wire=19_000_000, seconds=3.5, throughput_mb_s=5.429),
        "node-0": stage_result(TODAY_PROGRESS, prediction={"seconds": 4.4, "bottleneck": "account egress"}),
    })
    rows = {r[0]: r for r in sec["tables"][0]["rows"]}
    assert list(rows) == ["node-0", "node-1"]
    assert rows["node-0"] == ["node-0", "64", "", str(64 * 2**20), "20000000", "4.00", "5.00", "0", "", "", "4.4",
                              "account egress"]
    assert rows["node-1"][1:7] == ["60", "", str(64 * 2**20), "19000000", "3.50", "5.43"]
    assert rows["node-1"][8:] == ["", "", "", ""]  # not in that result: empty, not made up
    assert "39000000 bytes over the wire in 4.00 s" in sec["summary"][0]
    total, rate = read_svg(sec["plot"])["panels"]
    assert (total["title"], total["xlabel"], total["ylabel"]) == ("Bytes over the wire", "seconds", "MB")
    assert (rate["title"], rate["ylabel"]) == ("Throughput between progress samples", "MB/s")
    assert total["legend"] == rate["legend"] == ["node-0", "node-1"]
    assert [s["label"] for s in total["series"]] == ["node-0", "node-1"]
    assert total["series"][0]["colours"] != total["series"][1]["colours"]
    # Bytes over the wire: from (0 s, 0 MB), a marker at every sample, joined by straight lines.
    node0 = total["series"][0]
    assert data_points(total, node0["markers"]) == [(0, 0), (1, 2), (2, 10), (4, 20)]
    assert data_points(total, node0["lines"][0]) == [(0, 0), (1, 2), (2, 10), (4, 20)]
    # The rate as steps: 2 MB/s over (0, 1], 8 over (1, 2], 5 over (2, 4]; vertical at each sample.
    path = dedup(data_points(rate, rate["series"][0]["lines"][0]))
    assert path == [(0, 2), (1, 2), (1, 8), (2, 8), (2, 5), (4, 5)]
    assert all((a[0] == b[0]) != (a[1] == b[1]) for a, b in zip(path, path[1:]))  # only H and V segments
    assert data_points(rate, rate["series"][0]["markers"]) == [(0, 2), (1, 2), (2, 8), (4, 5)]


def test_staging_section_names_repaired_and_gone_files():
    # The sync result (fetched, repaired up to five names plus a count, gone, removed) and
    # progress that starts at the module's start with 0 bytes.
    r = stage_result([{"t": 0.0, "bytes": 0, "files": 0}, {"t": 2.0, "bytes": 4_000_000, "files": 9}],
                     fetched=9, repaired=["train/a_001.tfrecord (checksum)", "train/a_002.tfrecord (size 10, plan 20)"],
                     repaired_count=7, gone=["train/a_063.tfrecord"], gone_count=1, removed=0, verify="checksum",
                     prediction={"seconds": 0.0412, "minutes": 0.0007, "bottleneck": "NIC", "limits_s": {"NIC": 0.0412}})
    sec = report_html.staging_section({"nd-0": r})
    row = table_dicts(sec["tables"][0])[0]
    assert (row["fetched"], row["repaired"], row["gone"], row["predicted s"], row["bottleneck"]) == (
        "9", "7", "1", "0.0412", "NIC")
    assert ("nd-0: 7 file(s) fetched again (wrong on disk): train/a_001.tfrecord (checksum), "
            "train/a_002.tfrecord (size 10, plan 20) (+5 more)") in sec["summary"]
    assert "nd-0: 1 file(s) whose blob is gone from the container: train/a_063.tfrecord; removed 0" in sec["summary"]
    total, rate = read_svg(sec["plot"])["panels"]
    assert data_points(total, total["series"][0]["markers"]) == [(0, 0), (2, 4)]  # no second start at 0 s
    assert data_points(rate, rate["series"][0]["markers"]) == [(0, 2), (2, 2)]


def test_staging_section_names_the_files_handed_to_other_nodes():
    r = stage_result([], gone=["train/a_063.tfrecord"], gone_count=1, handed=["train/a_020.tfrecord"],
                     handed_count=4, removed=4)
    sec = report_html.staging_section({"nd-1": r})
    assert "nd-1: 1 file(s) whose blob is gone from the container: train/a_063.tfrecord; removed 0" in sec["summary"]
    assert ("nd-1: 4 file(s) handed to other nodes (the nodes changed; removed from node-local scratch): "
            "train/a_020.tfrecord (+3 more)") in sec["summary"]


def test_staging_section_without_progress_says_nothing_was_fetched():
    sec = report_html.staging_section({"local-0": stage_result([], files=192, bytes_over_wire=0, seconds=0.0,
                                                               skipped_existing=192, changed=False)})
    assert sec["plot"] is None
    assert any("azcopy fetched nothing in this run (192 file(s) were already staged)" in s for s in sec["summary"])
    assert sec["tables"][0]["rows"][0][1] == "192"


def test_staging_section_when_staging_did_not_run():
    sec = report_html.staging_section({"local-0": {"skipped": True, "changed": False}, "local-1": None})
    assert sec["plot"] is None and not sec["tables"]
    assert sec["summary"][0].startswith("No data: staging did not run")


# ---------------------------------------------------------------- health
def test_health_section_gates_against_thresholds_and_names_the_failing_node():
    checks = {"nd-0": ndv4_checks(), "nd-1": ndv4_checks(slow_nccl=True)}
    sec = report_html.health_section(checks)
    rows = table_dicts(sec["tables"][0])
    assert len(rows) == len(checks["nd-0"]) + len(checks["nd-1"])
    by = {(r["node"], r["check"]): r for r in rows}
    for node, node_checks in checks.items():
        for c in node_checks:
            r = by[(node, c["check"])]
            assert (r["status"], r["value"], r["threshold"], r["reason"]) == (
                c["status"], c["value"], c["threshold"], c["reason"])
    assert by[("nd-1", "nccl_all_reduce_node")]["status"] == "fail"
    assert by[("nd-1", "nccl_all_reduce_node")]["threshold"] == ">= 228 GB/s"
    assert any(s.startswith("Failing: nd-1 (nccl_all_reduce_node: busbw") for s in sec["summary"])
    (plot,) = read_svg(sec["plot"])["panels"]
    gated = [(n, c) for n in ("nd-0", "nd-1") for c in checks[n]
             if c["status"] in ("pass", "fail") and c["threshold"].startswith(">=")]
    bars = plot["series"][0]["bars"]
    assert len(bars) == len(gated) == 8 and plot["xticks_rotated"]
    ticks = dict((label, x) for x, label in plot["xticks"])
    assert list(ticks) == [f"{n}\n{c['check']}" for n, c in gated]
    failing = [b for b in bars if b["fill"] == report_plots.FAIL_COLOUR]
    assert len(failing) == 1 and all(b["fill"] == report_plots.PASS_COLOUR for b in bars if b not in failing)
    assert failing[0]["x"] + failing[0]["width"] / 2 == pytest.approx(ticks["nd-1\nnccl_all_reduce_node"], abs=0.1)
    for rect, (node, c) in zip(bars, gated):
        percent = 100 * report_html.first_number(c["value"]) / report_html.first_number(c["threshold"])
        assert bar_value(plot, rect) == pytest.approx(percent, rel=0.01, abs=0.5), (node, c["check"])
    assert bar_value(plot, failing[0]) < 100
    (hline,) = plot["hlines"]
    assert hline["dashed"] and hline["stroke"] == report_plots.FAIL_COLOUR
    assert axis_value(plot["yticks"], hline["y"]) == pytest.approx(100, abs=0.5)
    assert plot["legend"] == ["threshold"] and plot["ylabel"] == "% of threshold"


def test_percent_of_threshold_is_what_the_health_plot_draws(monkeypatch):
    drawn = {}
    monkeypatch.setattr(report_plots, "bars", lambda groups, series, **kw: drawn.update(
        groups=groups, series=series, **kw) or b"<svg/>")
    report_html.health_section({"nd-0": ndv4_checks(slow_nccl=True)})
    checks = {c["check"]: c for c in ndv4_checks(slow_nccl=True)}
    values = dict(zip(drawn["groups"], drawn["series"][0]["values"]))
    nccl = checks["nccl_all_reduce_node"]
    assert values["nd-0\nnccl_all_reduce_node"] == pytest.approx(
        100 * report_html.first_number(nccl["value"]) / 228.0)
    assert values["nd-0\nnccl_all_reduce_node"] < 100  # the slow fixture is below the floor
    assert drawn["hline"][0] == 100.0
    # Only checks with a ">=" threshold are drawn: not gpu_count (==) nor gpu_health (0 problems).
    assert {g.split("\n")[1] for g in drawn["groups"]} == {"h2d_bandwidth", "nccl_all_reduce_node", "fs_write",
                                                           "fs_read"}


def test_health_section_on_the_local_default_counts_checks_and_says_why():
    sec = report_html.health_section({"local-0": local_checks()})
    (plot,) = read_svg(sec["plot"])["panels"]
    assert plot["legend"] == ["pass", "fail", "skip"] and [x[1] for x in plot["xticks"]] == ["local-0"]
    assert [s["colours"] for s in plot["series"]] == [[report_plots.PASS_COLOUR], [report_plots.FAIL_COLOUR],
                                                      [report_plots.SKIP_COLOUR]]
    assert [round(bar_value(plot, s["bars"][0]), 3) for s in plot["series"]] == [2, 0, 8]
    assert all(label.isdigit() for _unused, label in plot["yticks"])  # whole-number ticks for counts
    assert not plot["xticks_rotated"]
    assert any("No check had a threshold" in s for s in sec["summary"])
    assert sec["summary"][0] == "1 node(s): 2 passed, 0 failed, 8 skipped checks"


def test_health_section_when_the_health_check_did_not_run():
    sec = report_html.health_section({"local-0": None})
    assert sec["plot"] is None and sec["summary"][0].startswith("No data: the health check did not run")


# ---------------------------------------------------------------- NCCL
def test_nccl_section_has_bus_bandwidth_by_message_size():
    node_vars = [{"inventory_hostname": "nd-0",
                  "healthcheck_nccl_node_run": registered_nccl("nccl_all_reduce_node", fx("all_reduce_ndv4_node_ok.txt")),
                  "healthcheck_nccl_cluster_run": registered_nccl("nccl_alltoall_cluster",
                                                                  fx("alltoall_ndv4_2node_sweep.txt"))},
                 {"inventory_hostname": "nd-1", "healthcheck_nccl_node_run": registered_nccl_skipped()}]
    runs = report_html.nccl_runs(node_vars)
    assert [(r["node"], r["test"]) for r in runs] == [("nd-0", "nccl_all_reduce_node"),
                                                      ("nd-0", "nccl_alltoall_cluster")]
    sec = report_html.nccl_section(runs, {})
    rows = table_dicts(sec["tables"][0])
    sweep = health.parse_nccl_tests(fx("alltoall_ndv4_2node_sweep.txt"))["rows"]
    assert len(sweep) > 3
    got = [(int(r["size (B)"]), float(r["busbw"]), float(r["algbw"])) for r in rows
           if r["test"] == "nccl_alltoall_cluster"]
    assert got == [(s["size"], pytest.approx(s["oop_busbw"], abs=0.005), pytest.approx(s["oop_algbw"], abs=0.005))
                   for s in sweep]
    ok = [r for r in rows if r["test"] == "nccl_all_reduce_node"]
    assert [(r["size (B)"], r["busbw"], r["in-place busbw"]) for r in ok] == [("8589934592", "236.29", "237.12")]
    (plot,) = read_svg(sec["plot"])["panels"]
    assert plot["legend"] == ["nd-0 nccl_all_reduce_node", "nd-0 nccl_alltoall_cluster"]
    assert plot["xlabel"] == "message size (bytes)" and plot["ylabel"] == "GB/s"
    # log2 axis: ticks at powers of two, labelled with binary suffixes, 1M to 8G here.
    labels = [label for _unused, label in plot["xticks"]]
    assert {"1M", "64M", "1G", "8G"} <= set(labels)
    ticks = dict((label, x) for x, label in plot["xticks"])
    assert ticks["2M"] - ticks["1M"] == pytest.approx(ticks["8G"] - ticks["4G"], abs=0.2)  # equal per doubling
    node, cluster = plot["series"]
    assert len(node["markers"]) == 1 and not node["lines"]  # one point: a marker, no line
    assert node["markers"][0][0] == pytest.approx(ticks["8G"], abs=0.1)
    assert len(cluster["markers"]) == len(sweep) and len(cluster["lines"]) == 1
    by_size = {s["size"]: m for s, m in zip(sweep, cluster["markers"])}
    assert by_size[2**20][0] == pytest.approx(ticks["1M"], abs=0.1)
    assert by_size[2**30][0] == pytest.approx(ticks["1G"], abs=0.1)
    for s, (_unused, y) in zip(sweep, cluster["markers"]):
        assert axis_value(plot["yticks"], y) == pytest.approx(s["oop_busbw"], abs=0.2)


def test_nccl_section_without_runs_gives_the_skip_reasons():
    sec = report_html.nccl_section([], {"local-0": local_checks()})
    assert sec["plot"] is None and not sec["tables"]
    assert sec["summary"] == ["No data: no NCCL test ran: no GPU (nvidia-smi not found) (local-0); "
                              "single-node cluster (local-0)."]


def test_nccl_section_reports_a_run_that_printed_no_rows():
    runs = [{"node": "nd-0", "test": "nccl_all_reduce_node", "text": "mpirun: command failed\n"}]
    sec = report_html.nccl_section(runs, {})
    assert "nd-0 nccl_all_reduce_node: nccl-tests printed no result row." in sec["summary"]
    assert sec["plot"] is None


# ---------------------------------------------------------------- shared mount
def test_fsbench_section_from_the_project_reader_and_elbencho():
    fs_bench = {"path": "/mnt/scratch", "files": 16, "file_size": 256 * 2**20, "parallel": 8,
                "write_mbps": 2210.5, "read_mbps": 5120.0, "errors": [], "changed": False}
    node_vars = [{"inventory_hostname": "nd-0", "healthcheck_fs_bench_run": fs_bench,
                  "healthcheck_elbencho_run": {"skipped": True, "changed": False}},
                 {"inventory_hostname": "nd-1", "healthcheck_elbencho_run": {"stdout": fx("elbencho_write_read.txt"),
                                                                             "rc": 0},
                  "healthcheck_fs_bench_run": {"skipped": True}}]
    results = report_html.fs_results(node_vars)
    limits = health.thresholds_for("Standard_ND96asr_v4")
    checks = {"nd-0": health.fs_checks("amlhpc_fs_bench", fs_bench, limits),
              "nd-1": health.fs_checks("elbencho", fx("elbencho_write_read.txt"), limits)}
    sec = report_html.fsbench_section(results, checks)
    rows = {r["node"]: r for r in table_dicts(sec["tables"][0])}
    assert rows["nd-0"] == {"node": "nd-0", "tool": "amlhpc_fs_bench", "write": "2210.5", "read": "5120.0",
                            "write threshold": "1000.0", "read threshold": "1000.0",
                            "files": "16 x 256 MiB, 8 threads"}
    eb = health.parse_elbencho(fx("elbencho_write_read.txt"))
    assert (rows["nd-1"]["tool"], float(rows["nd-1"]["write"]), float(rows["nd-1"]["read"])) == (
        "elbencho", pytest.approx(eb["WRITE"], abs=0.05), pytest.approx(eb["READ"], abs=0.05))
    assert "thresholds: write >= 1000.0, read >= 1000.0" in sec["summary"][0]
    (plot,) = read_svg(sec["plot"])["panels"]
    assert plot["legend"] == ["write", "read", "threshold"] and [x[1] for x in plot["xticks"]] == ["nd-0", "nd-1"]
    write, read = plot["series"]
    assert [bar_value(plot, b) for b in write["bars"]] == pytest.approx([2210.5, eb["WRITE"]], abs=5)
    assert [bar_value(plot, b) for b in read["bars"]] == pytest.approx([5120, eb["READ"]], abs=5)
    assert axis_value(plot["yticks"], plot["hlines"][0]["y"]) == pytest.approx(1000, abs=5)
    # The two bars of a node side by side around its label.
    assert write["bars"][0]["x"] + write["bars"][0]["width"] <= read["bars"][0]["x"]


def test_fsbench_section_without_a_run_gives_the_reason():
    checks = {"local-0": [health.skipped("fs_write", "path /mnt/scratch does not exist"),
                          health.skipped("fs_read", "path /mnt/scratch does not exist")]}
    sec = report_html.fsbench_section({}, checks)
    assert sec["summary"] == ["No data: no shared-mount test ran: path /mnt/scratch does not exist (local-0)."]


# ---------------------------------------------------------------- training
def write_metrics(folder: Path, epochs: int = 3) -> dict:
    """A metrics.jsonl as workload/cosmoflow/train.py's Recorder writes it, read back by read_metrics."""
    lines = []
    for e in range(epochs):
        for s in range(2):
            lines.append({"kind": "step", "step": e * 2 + s, "time": 1.7e9, "loss": 0.4 - 0.03 * (e * 2 + s), "lr": 0.01})
        lines.append({"kind": "epoch", "step": e * 2 + 1, "time": 1.7e9, "epoch": e, "train_loss": 0.35 - 0.03 * e,
                      "val_loss": 0.33 - 0.02 * e, "val_mae": 0.49 - 0.041 * e, "epoch_time_s": 3.2 + e,
                      "samples_per_s": 20.0 + e})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return job_spec.read_metrics(str(folder))


def test_training_section_has_loss_and_mae_per_epoch(tmp_path):
    metrics = write_metrics(tmp_path)
    job = {"run_id": "cosmoflow-local", "status": "Completed", "outputs_dir": str(tmp_path), "metrics": metrics}
    sec = report_html.training_section(job)
    rows = table_dicts(sec["tables"][0])
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    for r, e in zip(rows, metrics["epochs"]):
        for key in ("train_loss", "val_loss", "val_mae"):
            assert float(r[key]) == pytest.approx(e[key], abs=5e-5)
    assert sec["summary"] == ["run cosmoflow-local: Completed"]
    loss, mae = read_svg(sec["plot"])["panels"]
    assert loss["legend"] == ["train loss", "validation loss"] and mae["legend"] == ["validation MAE"]
    assert [label for _unused, label in loss["xticks"]] == ["0", "1", "2"]  # whole epochs
    train = data_points(loss, loss["series"][0]["markers"], digits=4)
    assert [x for x, _unused in train] == [0, 1, 2]
    assert [y for _unused, y in train] == pytest.approx([e["train_loss"] for e in metrics["epochs"]], abs=0.001)
    assert [y for _unused, y in data_points(mae, mae["series"][0]["markers"], digits=4)] == pytest.approx(
        [e["val_mae"] for e in metrics["epochs"]], abs=0.001)


def test_training_section_without_a_job_or_without_epochs():
    assert report_html.training_section({})["summary"][0].startswith("No data: no training job ran")
    assert report_html.training_section({"skipped": True, "changed": False})["plot"] is None
    sec = report_html.training_section({"run_id": "r1", "status": "Failed", "metrics": {"steps": [], "epochs": []}})
    assert sec["summary"] == ["run r1: Failed",
                              "No data: the job recorded no finished epoch (metrics.jsonl has no epoch record)."]


# ---------------------------------------------------------------- the page
def full_node_vars(tmp_path):
    return [{"inventory_hostname": "nd-0", "stage_result": stage_result(TODAY_PROGRESS),
             "healthcheck_checks": ndv4_checks(),
             "healthcheck_nccl_node_run": registered_nccl("nccl_all_reduce_node", fx("all_reduce_ndv4_node_ok.txt")),
             "healthcheck_fs_bench_run": {"write_mbps": 2210.5, "read_mbps": 5120.0, "files": 16,
                                          "file_size": 256 * 2**20, "parallel": 8}}]


def test_page_has_every_section_with_a_decodable_plot_and_nothing_external(tmp_path):
    job = {"run_id": "cosmoflow-local", "status": "Completed", "metrics": write_metrics(tmp_path)}
    page = report_html.report_html(full_node_vars(tmp_path), job, ["nodes: 1 (nd-0)"])
    doc = read_report(page)
    assert list(doc["sections"]) == ["summary", *report_html.SECTION_IDS]
    for sid in report_html.SECTION_IDS:
        sec = doc["sections"][sid]
        assert len(sec["images"]) == 1, sid
        width, height = decode_svg(image_bytes(sec["images"][0]))
        assert width >= 300 and height >= 200
        assert sec["tables"] and sec["tables"][0]["rows"], sid
        assert not sec["nodata"], sid
    # Self-contained: every image is inline, nothing is loaded from anywhere.
    assert doc["srcs"] and all(src.startswith(SVG_URI) for src in doc["srcs"])
    assert "<link" not in page and "<script" not in page and "@import" not in page
    assert "<title>amlhpc run report: cosmoflow-local</title>" in page


def test_page_with_no_data_says_why_in_every_section():
    doc = read_report(report_html.report_html([{"inventory_hostname": "local-0"}], None))
    for sid in report_html.SECTION_IDS:
        sec = doc["sections"][sid]
        assert not sec["images"] and not sec["tables"], sid
        assert sec["nodata"] and sec["nodata"][0].startswith("No data: "), sid


def test_page_escapes_what_it_shows():
    checks = [health.check("fs_write", "fail", "1.0 MB/s", ">= 1000 MB/s", "<script>alert(1)</script> & more")]
    page = report_html.report_html([{"inventory_hostname": "n<0>", "healthcheck_checks": checks}], None)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert read_report(page)["sections"]["health"]["tables"][0]["rows"][0][0] == "n<0>"


def test_page_never_carries_a_sas_from_a_result():
    sas = "sv=2024-08-04&sr=c&sp=rl&sig=FAKEFAKEFAKE%3D"
    result = stage_result(TODAY_PROGRESS, sas_warnings=[f"token {sas}"], msg=f"copied with ?{sas}",
                          cmd=["azcopy", "copy", f"http://x/c?{sas}"])
    page = report_html.report_html([{"inventory_hostname": "nd-0", "stage_result": result}], None)
    assert "sig=" not in page and "FAKEFAKE" not in page


def test_a_plot_that_cannot_be_drawn_leaves_the_tables_and_says_why(monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise ValueError("no plot for this")
    monkeypatch.setattr(report_plots, "lines", broken)
    monkeypatch.setattr(report_plots, "bars", broken)
    job = {"run_id": "r", "status": "Completed", "metrics": write_metrics(tmp_path)}
    doc = read_report(report_html.report_html(full_node_vars(tmp_path), job))
    for sid in report_html.SECTION_IDS:
        sec = doc["sections"][sid]
        assert not sec["images"] and sec["tables"], sid
        assert sec["nodata"] == ["plot not drawn: ValueError: no plot for this"], sid


def test_the_page_is_drawn_without_matplotlib(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # any import of it fails
    job = {"run_id": "r", "status": "Completed", "metrics": write_metrics(tmp_path)}
    page = report_html.report_html(full_node_vars(tmp_path), job, cache_dir=str(tmp_path / "mpl"))
    doc = read_report(page)
    assert all(len(doc["sections"][sid]["images"]) == 1 for sid in report_html.SECTION_IDS)
    assert not (tmp_path / "mpl").exists()  # cache_dir is accepted and not used


def test_same_data_gives_the_same_svg():
    panel = [{"title": "t", "xlabel": "x", "ylabel": "y", "series": [{"label": "a", "x": [0, 1], "y": [1, 2]}]}]
    assert report_plots.lines(panel) == report_plots.lines(panel)
    job = {"run_id": "r", "status": "Completed", "metrics": {"epochs": [{"epoch": 0, "train_loss": 0.3}]}}
    node_vars = [{"inventory_hostname": "nd-0", "stage_result": stage_result(TODAY_PROGRESS),
                  "healthcheck_checks": ndv4_checks()}]
    assert report_html.report_html(node_vars, job) == report_html.report_html(node_vars, job)
