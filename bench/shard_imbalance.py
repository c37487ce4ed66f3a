"""Shard imbalance (max/mean bytes per node) for every node count 1..512, suffix vs balanced.

The listing is shaped like the CosmoFlow v0.7 set: 262,144 training + 65,536 validation
files (4,096 + 1,024 universes x 64 sub-volumes) of ~16 MiB, sizes varying a few percent
(normal, sigma 2 %; gzip-encoded sizes vary more in the real set, this is the shape that
matters for balance). Suffix mode above 64 nodes leaves nodes idle: its imbalance there is
N/64 at best, shown for comparison. Prints a compact table and the time one plan takes.
"""

from __future__ import annotations

import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins", "module_utils"))

from amlhpc.staging.shards import SUFFIXES, Blob, balanced_loads, imbalance, plan_shards  # noqa: E402

MIB = 1024 * 1024


def cosmoflow_v07_listing(seed: int = 0, train_universes: int = 4096, val_universes: int = 1024) -> list[Blob]:
    rng = random.Random(seed)
    blobs = []
    u = 0
    for split, count in (("train", train_universes), ("validation", val_universes)):
        for _ in range(count):
            for s in range(SUFFIXES):
                size = max(1, int(rng.gauss(16 * MIB, 0.02 * 16 * MIB)))
                blobs.append(Blob(f"{split}/univ_ics_2019-03_a{u:06d}_{s:03d}.tfrecord", size))
            u += 1
    return blobs


def suffix_imbalance(blobs: list[Blob], n: int) -> float:
    """Bytes per node in suffix mode without building 327,680-entry shards for each n."""
    per_suffix = [0] * SUFFIXES
    for b in blobs:
        per_suffix[int(b.name[-12:-9])] += b.size
    active = min(n, SUFFIXES)
    loads = [sum(per_suffix[(i * SUFFIXES) // active:((i + 1) * SUFFIXES) // active]) for i in range(active)]
    return imbalance(loads + [0] * (n - active))


_SIZES: list[int] = []


def _balanced(n: int) -> float:
    return imbalance(balanced_loads(_SIZES, n))


def main() -> int:
    # --step K: every count up to 64, then every multiple of K (default 4, to stay under two
    # minutes on two cores; --step 1 plans every count 1..512, about 3 CPU-minutes).
    step = int(sys.argv[sys.argv.index("--step") + 1]) if "--step" in sys.argv else 4
    blobs = cosmoflow_v07_listing()
    total = sum(b.size for b in blobs)
    print(f"listing: {len(blobs)} files, {total / 1e12:.3f} TB (CosmoFlow v0.7 shape)")
    t = time.perf_counter()
    shards = plan_shards([f"n{i}" for i in range(512)], "balanced", blobs)
    print(f"one full balanced plan (names and all) for 512 nodes: {time.perf_counter() - t:.2f} s, "
          f"imbalance {imbalance([s.bytes for s in shards]):.5f}")
    _SIZES[:] = sorted((b.size for b in blobs), reverse=True)
    counts = sorted(set(range(step, 513, step)) | set(range(1, 66)) | {70, 100, 127, 300, 500, 511, 512})
    t = time.perf_counter()
    with ProcessPoolExecutor() as pool:  # forked workers inherit _SIZES
        balanced = list(pool.map(_balanced, counts, chunksize=8))
    rows = [(n, suffix_imbalance(blobs, n), bal) for n, bal in zip(counts, balanced)]
    print(f"{len(rows)} node counts (1..65, then every {step} to 512) planned in {time.perf_counter() - t:.1f} s "
          f"on {os.cpu_count()} CPUs\n")
    print(f"{'nodes':>5} {'suffix':>9} {'balanced':>9}   (max/mean bytes per node; 1.0 is perfect)")
    show = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 63, 64, 65, 70, 96, 100, 127, 128, 192, 256, 300, 384,
            500, 511, 512}
    for n, suf, bal in rows:
        if n in show:
            print(f"{n:>5} {suf:>9.4f} {bal:>9.5f}")
    worst_bal = max(rows, key=lambda r: r[2])
    worst_suf = max((r for r in rows if r[0] <= SUFFIXES), key=lambda r: r[1])
    print(f"\nworst balanced over all counts: {worst_bal[2]:.5f} at {worst_bal[0]} nodes")
    print(f"worst suffix up to 64 nodes:    {worst_suf[1]:.4f} at {worst_suf[0]} nodes "
          f"(64 suffixes do not split evenly); above 64 suffix mode leaves nodes idle (N/64)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
