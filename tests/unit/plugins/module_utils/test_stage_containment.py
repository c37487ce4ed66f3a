"""Issue 40, item 1: a path built from a blob name or a node listing stays inside its folder.

The two cases the review found, at the planner (controller) and at the stage (node): a blob
``<prefix>//etc/<file>.gz`` (the name below the prefix starts with ``/``) and a blob
``../outside_000.tfrecord``. Both are refused before anything changes, and the files around
the stage folder come out byte for byte the same.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from amlhpc.staging.azcopy import ExpectedFile, ShardPlan, StageError, StageSource, stage_shard
from amlhpc.sdk.blob_listing import blob_from
from amlhpc.staging.shards import ShardError, plan_shards

SOURCE = StageSource(azcopy="/nonexistent/azcopy", source_url="http://127.0.0.1:1/a/c")  # nothing answers


def sentinel_tree(root: Path) -> dict[Path, bytes]:
    """Files around the stage folder ``root/stage`` (and one inside a sibling) that must not change."""
    files = {
        root / "outside_000.tfrecord": b"outside, next to the stage folder\n",
        root / "etc" / "victim_000.tfrecord": b"root-owned in real life\n",
        root / "stage-sibling" / "x_001.tfrecord": b"a sibling folder's file\n",
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "stage").mkdir(exist_ok=True)
    return files


def assert_unchanged(files: dict[Path, bytes]) -> None:
    for path, data in files.items():
        assert path.is_file(), f"{path} was removed"
        assert path.read_bytes() == data, f"{path} was changed"


@pytest.mark.parametrize("listed", ["v07//etc/passwd_000.tfrecord.gz", "v07/../outside_000.tfrecord",
                                    "v07/train/../../outside_000.tfrecord"])
def test_the_plan_refuses_a_blob_that_would_land_outside_the_stage_folder(listed):
    blob = blob_from(listed, 100, "gzip" if listed.endswith(".gz") else "", {}, "v07")
    ok = blob_from("v07/train/u_a1_000.tfrecord.gz", 100, "gzip", {}, "v07")
    with pytest.raises(ShardError) as err:
        plan_shards(["n0", "n1"], "balanced", [ok, blob])
    said = str(err.value)
    assert repr(blob.name) in said and "stage_prefix" in said


def test_the_stage_never_removes_a_file_outside_its_folder(tmp_path):
    """``os.path.join(stage_dir, '/abs')`` is ``/abs``: a planned name that is absolute or climbs
    out named a file outside, which the survey found of the wrong size and removed."""
    files = sentinel_tree(tmp_path)
    victim = tmp_path / "etc" / "victim_000.tfrecord"
    expected = [ExpectedFile(f"{victim}.gz", 5, True), ExpectedFile("../outside_000.tfrecord", 5, False),
                ExpectedFile("train/u_a1_000.tfrecord.gz", 5, True)]
    with pytest.raises(StageError) as err:
        stage_shard(SOURCE, ShardPlan(stage_dir=str(tmp_path / "stage"), rank=0, blobs=[e.blob for e in expected],
                                      expected=expected, prune=True, shared=False))
    assert f"{victim}.gz" in str(err.value)
    assert_unchanged(files)
    assert os.listdir(tmp_path / "stage") in ([], [".amlhpc-staged"])


def test_a_folder_where_a_planned_file_goes_is_refused_with_the_fix(tmp_path):
    """Issue 49 item 6 (red on 2.2.0): a blob whose file name is a folder in the stage folder
    (an earlier data set's, a user's) ended in a raw ``[Errno 21] Is a directory`` on every run.
    Refused before anything is fetched or removed, naming the folder and the fix; the folder
    and what it holds stay."""
    stage = tmp_path / "stage"
    (stage / "train" / "u_a1_000.tfrecord").mkdir(parents=True)
    (stage / "train" / "u_a1_000.tfrecord" / "keep.txt").write_text("the user's")
    expected = [ExpectedFile("train/u_a1_000.tfrecord.gz", 5, True), ExpectedFile("train/u_a1_001.tfrecord", 5, False)]
    with pytest.raises(StageError) as err:
        stage_shard(SOURCE, ShardPlan(stage_dir=str(stage), rank=0, blobs=[e.blob for e in expected], expected=expected,
                                      prune=True, shared=False))
    text = str(err.value)
    assert "train/u_a1_000.tfrecord" in text and "is a folder" in text, text
    assert "Errno" not in text and "azcopy was not found" not in text, text
    assert "remove or move that folder" in text, text
    assert (stage / "train" / "u_a1_000.tfrecord" / "keep.txt").read_text() == "the user's"
