"""The stage's line in the report names the files it fetched, repaired, found gone and removed."""

from __future__ import annotations

from amlhpc.staging.azcopy_sync import stage_result
from amlhpc.staging.stage_read import summary_line


def test_each_fetched_and_removed_file_is_named_with_a_count_for_the_rest():
    result = stage_result({"train/a_000.tfrecord": 1}, seconds=2.0, verify="size", progress=[],
                          fetched=7, fetched_files=[f"train/f{i}.tfrecord" for i in range(5)],
                          repaired=["train/f0.tfrecord (size 100, plan 200)"], repaired_count=1,
                          gone=["train/old.tfrecord"], gone_count=1, removed=1, removed_files=["train/old.tfrecord"])
    line = summary_line(result)
    assert line.startswith("1 files, 7 fetched (1 repaired), 1 gone (1 removed); 2 s measured")
    assert ("; fetched: train/f0.tfrecord, train/f1.tfrecord, train/f2.tfrecord, train/f3.tfrecord, "
            "train/f4.tfrecord and 2 more") in line
    assert "; repaired: train/f0.tfrecord (size 100, plan 200)" in line
    assert "; gone: train/old.tfrecord" in line and line.endswith("; removed: train/old.tfrecord")


def test_a_run_with_nothing_to_do_names_nothing():
    line = summary_line(stage_result({"a": 1}, seconds=0.5, verify="size", progress=[]))
    assert line == "1 files, 0 fetched (0 repaired), 0 gone (0 removed); 0.5 s measured"
    assert stage_result({}, seconds=0, verify="size", progress=[])["fetched_files"] == []
