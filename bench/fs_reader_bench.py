"""Throughput of the project's shared-mount test (amlhpc.health.fsbench) on this machine.

Writes and reads 16 files of 64 MiB (1 GiB) with 1, 4 and 8 parallel writers/readers in a
scratch folder under the project (.scratch/, removed afterwards) and prints MB/s
(10^6 bytes/s). Reads come after fsync + posix_fadvise(DONTNEED) of every file, so they
measure the disk, not the page cache, where the file system honours the hint.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from amlhpc.health import fsbench  # noqa: E402


def main() -> None:
    base = ROOT / ".scratch"
    base.mkdir(exist_ok=True)
    files, size = 16, 64 * 2**20
    print(f"amlhpc fs bench: {files} files x {size // 2**20} MiB, 1 MiB blocks, in {base}")
    with tempfile.TemporaryDirectory(dir=base, prefix="fsbench-") as folder:
        for parallel in (1, 4, 8):
            r = fsbench.run(folder, files=files, file_size=size, parallel=parallel)
            assert not r["errors"], r["errors"]
            print(f"  parallel {parallel:2d}: write {r['write_mbps']:8.1f} MB/s  read {r['read_mbps']:8.1f} MB/s"
                  f"  (evicted from page cache: {r['evicted']}, cpus: {os.cpu_count()})")


if __name__ == "__main__":
    main()
