# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""A small CosmoFlow-format dataset generator, for tests and the local default.

Files are named and laid out as the MLPerf HPC CosmoFlow dataset is::

    <root>/train/univ_ics_2019-03_a<UUUUUU>_<SSS>.tfrecord[.gz]
    <root>/validation/univ_ics_2019-03_a<UUUUUU>_<SSS>.tfrecord[.gz]

one universe split in 64 sub-volumes (SSS = 000..063), one sample a file. Each sample is a
``tf.train.Example`` with ``x`` = int16 bytes of a D x D x D x 4 cube of particle counts and
``y`` = 4 float32 cosmological parameters, normalised to [-1, 1].

The counts depend on the parameters (each channel's mean count grows with one of them), so
a model can learn something from a tiny data set: enough for a short training run whose
loss goes down. The output is deterministic for a given seed.

Run: ``python -m amlhpc.data.cosmoflow_data --out DIR [--train-universes 2] [--val-universes 1]
[--cube 32] [--subvolumes 64] [--gzip]`` with ``plugins/module_utils`` on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import array
import json
import os
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from .tfrecord import encode_example, write_tfrecord

SUBVOLUMES = 64
CHANNELS = 4
NAME_FORMAT = "univ_ics_2019-03_a{universe:06d}_{subvolume:03d}.tfrecord"
_MAX_COUNT = 48


def sample_name(universe: int, subvolume: int, gzip: bool = False) -> str:
    """The dataset's file name for one sub-volume of one universe."""
    if not 0 <= subvolume < SUBVOLUMES:
        raise ValueError(f"sub-volume {subvolume} is outside 0..{SUBVOLUMES - 1}")
    return NAME_FORMAT.format(universe=universe, subvolume=subvolume) + (".gz" if gzip else "")


def _cum_weights(mean: float) -> list[float]:
    """Cumulative weights of a geometric distribution with the given mean, cut at _MAX_COUNT."""
    p = 1.0 / (1.0 + mean)
    total, out = 0.0, []
    for k in range(_MAX_COUNT + 1):
        total += p * (1.0 - p) ** k
        out.append(total)
    return out


def make_sample(rng: random.Random, cube: int) -> tuple[bytes, list[float]]:
    """One sample: (x bytes, channel-last int16 cube; y, 4 parameters in [-1, 1])."""
    y = [rng.uniform(-1.0, 1.0) for _unused in range(CHANNELS)]
    n = cube ** 3
    population = range(_MAX_COUNT + 1)
    channels = [rng.choices(population, cum_weights=_cum_weights(1.0 + 1.5 * (y[c] + 1.0)), k=n)
                for c in range(CHANNELS)]
    values = array.array("h", bytes(2 * n * CHANNELS))
    for c in range(CHANNELS):
        values[c::CHANNELS] = array.array("h", channels[c])
    if sys.byteorder != "little":  # pragma: no cover
        values.byteswap()
    return values.tobytes(), y


@dataclass(frozen=True)
class GeneratedFile:
    path: str
    split: str
    universe: int
    subvolume: int
    y: tuple[float, ...]


def generate(root: str, train_universes: int = 2, val_universes: int = 1, cube: int = 32,
             subvolumes: int = SUBVOLUMES, gzip: bool = False, seed: int = 0) -> list[GeneratedFile]:
    """Write the data set under ``root``; return one entry per file written."""
    if not 1 <= subvolumes <= SUBVOLUMES:
        raise ValueError(f"subvolumes must be 1..{SUBVOLUMES}, got {subvolumes}")
    if cube < 1:
        raise ValueError(f"cube must be >= 1, got {cube}")
    rng = random.Random(seed)
    written: list[GeneratedFile] = []
    universe = 0
    for split, count in (("train", train_universes), ("validation", val_universes)):
        os.makedirs(os.path.join(root, split), exist_ok=True)
        for _unused in range(count):
            for sub in range(subvolumes):
                x, y = make_sample(rng, cube)
                path = os.path.join(root, split, sample_name(universe, sub, gzip))
                write_tfrecord(path, [encode_example({"x": x, "y": y})], compress=gzip)
                written.append(GeneratedFile(path, split, universe, sub, tuple(y)))
            universe += 1
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--out", required=True, help="root folder of the data set")
    parser.add_argument("--train-universes", type=int, default=2)
    parser.add_argument("--val-universes", type=int, default=1)
    parser.add_argument("--cube", type=int, default=32, help="cube edge (the real data set: 128)")
    parser.add_argument("--subvolumes", type=int, default=SUBVOLUMES, help="files per universe (<= 64)")
    parser.add_argument("--gzip", action="store_true", help="gzip each file (.tfrecord.gz)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    files = generate(args.out, args.train_universes, args.val_universes, args.cube, args.subvolumes,
                     args.gzip, args.seed)
    size = sum(os.path.getsize(f.path) for f in files)
    # A command-line entry point (python -m amlhpc.data.cosmoflow_data), never module code.
    print(json.dumps({"files": len(files), "bytes": size, "root": args.out}))  # pylint: disable=ansible-bad-function
    return 0


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
