"""The project's shared-mount benchmark, run for real on small sizes."""

from __future__ import annotations

import os

import pytest

from amlhpc.health import fsbench


def test_writes_reads_verifies_and_cleans_up(tmp_path):
    r = fsbench.run(str(tmp_path), files=6, file_size=3 * 2**20 + 123, parallel=3, block_size=256 * 1024)
    assert r["bytes_written"] == r["bytes_read"] == 6 * (3 * 2**20 + 123)
    assert r["errors"] == []
    assert r["write_mbps"] > 0 and r["read_mbps"] > 0
    assert os.path.dirname(r["folder"]) == str(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_keep_leaves_the_files(tmp_path):
    r = fsbench.run(str(tmp_path), files=2, file_size=100_000, parallel=2, block_size=4096, keep=True)
    names = sorted(p.name for p in (tmp_path / os.path.basename(r["folder"])).iterdir())
    assert names == ["file00000", "file00001"]
    assert (tmp_path / os.path.basename(r["folder"]) / "file00001").stat().st_size == 100_000


def test_corrupted_block_is_reported(tmp_path, monkeypatch):
    # Overwrite one block of one file between the write and the read phase.
    real_read = fsbench._read_file

    def tamper(path, file_no, file_size, block_size, tag):
        if file_no == 1:
            with open(path, "r+b") as f:
                f.seek(2 * block_size)
                f.write(b"\0" * fsbench.HEADER.size)
        return real_read(path, file_no, file_size, block_size, tag)

    monkeypatch.setattr(fsbench, "_read_file", tamper)
    r = fsbench.run(str(tmp_path), files=3, file_size=5 * 8192, parallel=2, block_size=8192)
    assert r["errors"] == ["file00001 block 2: found file 0 block 0 (magic 0x0, run 0x0)"]


def test_truncated_file_is_reported(tmp_path, monkeypatch):
    real_read = fsbench._read_file

    def truncate(path, file_no, file_size, block_size, tag):
        if file_no == 0:
            os.truncate(path, file_size - 10)
        return real_read(path, file_no, file_size, block_size, tag)

    monkeypatch.setattr(fsbench, "_read_file", truncate)
    r = fsbench.run(str(tmp_path), files=1, file_size=20000, parallel=1, block_size=4096)
    assert r["errors"] == ["file00000: read 19990 bytes, wrote 20000"]


def test_missing_path_and_bad_sizes(tmp_path):
    with pytest.raises(FileNotFoundError, match="is the shared file system mounted"):
        fsbench.run(str(tmp_path / "nope"))
    with pytest.raises(ValueError):
        fsbench.run(str(tmp_path), block_size=8)
