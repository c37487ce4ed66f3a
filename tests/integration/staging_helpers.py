"""Helpers shared by the staging integration tests: a data set uploaded gzip-encoded to Azurite."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "workload"
if str(WORKLOAD) not in sys.path:
    sys.path.insert(0, str(WORKLOAD))

from amlhpc.data.dataset_prep import compress_all, upload_prepared  # noqa: E402


@dataclass
class Uploaded:
    container: str
    prefix: str
    raw_root: Path  # the originals: <raw_root>/<split>/<name>.tfrecord
    names: list[str]  # relative names of the originals (what a stage must produce)


def upload_dataset(azurite, raw_root: Path, work: Path, container: str, prefix: str) -> Uploaded:
    prepared = compress_all(str(raw_root), str(work), prefix=prefix)
    upload_prepared(prepared, azurite.endpoint, container, azurite.service().credential, create_container=True)
    names = sorted(os.path.relpath(p.source, raw_root).replace(os.sep, "/") for p in prepared)
    return Uploaded(container, prefix, raw_root, names)


def staged_files(stage_dir: Path) -> dict[str, Path]:
    """Data files under ``stage_dir``, outside the stage's own hidden folders."""
    out = {}
    for dirpath, dirs, files in os.walk(stage_dir):
        dirs[:] = [d for d in dirs if not d.startswith(".amlhpc-")]
        for name in files:
            path = Path(dirpath) / name
            out[path.relative_to(stage_dir).as_posix()] = path
    return out


def assert_identical_subset(stage_dir: Path, data: Uploaded) -> dict[str, Path]:
    """Every staged data file is an original, byte for byte; returns them."""
    files = staged_files(stage_dir)
    unknown = sorted(set(files) - set(data.names))
    assert not unknown, f"unexpected files staged: {unknown[:5]}"
    for rel, path in files.items():
        assert path.read_bytes() == (data.raw_root / rel).read_bytes(), f"{rel} differs from the original"
    return files
