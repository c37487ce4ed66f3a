"""The text report that ends a run (amlhpc.report), on azcopy_stage results in today's shape
and in the sync shape (fetched, repaired, gone, prediction)."""

from __future__ import annotations

from amlhpc import report


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


def test_staging_summary_when_nothing_staged():
    assert report.staging_summary([{"skipped": True}]) == ["stage: no staging ran"]
