#!/usr/bin/env python3
"""Controller CPU of the data set preparation on a rerun (dataset_upload's compress step).

``dataset_prep.compress_all`` gzips every file of the data set into ``work_dir``. Up to round
11 a rerun of site.yml compressed the whole data set again only to find every blob already
uploaded; now the record in ``work_dir`` shows which copies are current and those files are
neither read nor compressed. This prints, in one run on the same files (random-looking
TFRecord-sized files, gzip level 6): the first run, a rerun the old way (the record removed,
so everything is compressed again) and a rerun now. CPU is user+sys of this process and its
compress workers (cpumeter), the figure that matters on a shared controller.

    .venv/bin/python bench/prepare_rerun_bench.py [--files 256] [--mb 4] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "plugins" / "module_utils")]

import cpumeter  # noqa: E402
from amlhpc.data.dataset_prep import RECORD, compress_all  # noqa: E402


def measure(label: str, fn) -> None:
    cpu0, wall0 = cpumeter.snapshot(), time.monotonic()
    stats = fn()
    print(f"{label:<28} wall {time.monotonic() - wall0:7.2f} s   CPU {cpumeter.snapshot() - cpu0:7.2f} s   "
          f"compressed {stats['compressed']:>5}, unchanged {stats['reused']:>5}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--mb", type=float, default=4.0, help="size of each file (MB)")
    ap.add_argument("--workers", type=int, default=0, help="compress processes (0: one per core)")
    args = ap.parse_args()
    print(f"controller: {cpumeter.cpu_name()}; {args.files} files of {args.mb} MB")
    size = int(args.mb * 1e6)
    with tempfile.TemporaryDirectory(prefix="amlhpc-prep-") as tmp:
        src, work = Path(tmp) / "src", Path(tmp) / "work"
        (src / "train").mkdir(parents=True)
        for i in range(args.files):  # half random (incompressible), half zeros: about CosmoFlow's ratio
            (src / "train" / f"univ_{i:06d}.tfrecord").write_bytes(os.urandom(size // 2) + bytes(size - size // 2))

        def run() -> dict[str, int]:
            stats: dict[str, int] = {}
            compress_all(str(src), str(work), prefix="v1", workers=args.workers or None, stats=stats)
            return stats

        measure("first run", run)

        def old_way() -> dict[str, int]:
            (work / RECORD).unlink()
            return run()

        measure("rerun, compressing again", old_way)
        measure("rerun, now", run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
