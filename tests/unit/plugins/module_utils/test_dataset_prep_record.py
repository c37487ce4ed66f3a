"""dataset_prep.compress_all on a rerun (module_utils/amlhpc/data/dataset_prep.py): a file whose
compressed copy is current is neither read nor gzipped again; any change to a source, its
copy or the level compresses that file again, with the bytes a first run makes."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from amlhpc.data import dataset_prep
from amlhpc.data.dataset_prep import RECORD, compress_all


@pytest.fixture()
def data(tmp_path) -> tuple[Path, Path]:
    src, work = tmp_path / "src", tmp_path / "work"
    for i in range(4):
        (src / "train").mkdir(parents=True, exist_ok=True)
        (src / "train" / f"f{i}.tfrecord").write_bytes(os.urandom(2000) + b"\0" * 30000)
    return src, work


def run(src: Path, work: Path, level: int = 6) -> tuple[list, dict, list[str]]:
    """compress_all, with the files it gzipped (the copies it wrote)."""
    stats: dict[str, int] = {}
    before = {p: p.stat().st_mtime_ns for p in work.rglob("*.gz")} if work.exists() else {}
    out = compress_all(str(src), str(work), prefix="v1", level=level, workers=1, stats=stats)
    written = sorted(str(p.relative_to(work)) for p in work.rglob("*.gz") if before.get(p) != p.stat().st_mtime_ns)
    return out, stats, written


def test_a_rerun_reads_and_compresses_nothing_and_gives_the_same_plan(data, monkeypatch):
    src, work = data
    first, stats, written = run(src, work)
    assert stats == {"compressed": 4, "reused": 0} and len(written) == 4
    assert json.loads((work / RECORD).read_text())["level"] == 6

    def no_gzip(job):
        raise AssertionError(f"compressed again: {job[0]}")

    monkeypatch.setattr(dataset_prep, "_gzip_one", no_gzip)
    again, stats, written = run(src, work)
    assert again == first and stats == {"compressed": 0, "reused": 4} and written == []


def test_each_kind_of_change_compresses_that_file_again(data):
    src, work = data
    first, _stats, _written = run(src, work)
    f0, f1, f2 = (src / "train" / f"f{i}.tfrecord" for i in range(3))
    f0.write_bytes(f0.read_bytes()[:-1] + b"x")  # same size, new content
    st = f1.stat()
    os.utime(f1, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # only touched
    (work / "train" / "f2.tfrecord.gz").write_bytes(b"truncated")  # the copy damaged
    again, stats, written = run(src, work)
    assert stats == {"compressed": 3, "reused": 1}
    assert written == ["train/f0.tfrecord.gz", "train/f1.tfrecord.gz", "train/f2.tfrecord.gz"]
    by_blob = {p.blob: p for p in again}
    assert gzip.decompress((work / "train" / "f0.tfrecord.gz").read_bytes()) == f0.read_bytes()
    assert by_blob["v1/train/f0.tfrecord.gz"].md5 != next(p for p in first if p.blob.endswith("f0.tfrecord.gz")).md5
    # f1 and f2 unchanged in content: the same bytes as the first run made
    for name in ("f1", "f2", "f3"):
        assert by_blob[f"v1/train/{name}.tfrecord.gz"] == next(p for p in first if p.blob.endswith(f"{name}.tfrecord.gz"))


def test_another_level_a_new_file_or_a_lost_record_compresses_as_needed(data):
    src, work = data
    run(src, work)
    _out, stats, _written = run(src, work, level=9)
    assert stats == {"compressed": 4, "reused": 0}
    (src / "train" / "new.tfrecord").write_bytes(b"new" * 100)
    _out, stats, _written = run(src, work, level=9)
    assert stats == {"compressed": 1, "reused": 4}
    (src / "train" / "f3.tfrecord").unlink()
    out, stats, _written = run(src, work, level=9)
    assert stats == {"compressed": 0, "reused": 4} and len(out) == 4
    assert "train/f3.tfrecord" not in json.loads((work / RECORD).read_text())["files"]
    (work / RECORD).write_text("{broken")
    _out, stats, _written = run(src, work, level=9)
    assert stats == {"compressed": 4, "reused": 0}
