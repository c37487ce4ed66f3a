"""CosmoFlow TFRecords -> PyTorch: a checked, vectorised reader and a rank-sharded DataLoader.

Each record is a ``tf.train.Example`` with ``x`` (int16 bytes of a D x D x D x 4 cube of
particle counts) and ``y`` (4 float32 parameters). Decoding follows the MLPerf reference
``_parse_data(apply_log=True)``: ``decode_raw(int16) -> reshape -> cast(float32) -> log(x + 1)``,
here vectorised with numpy: one int16 -> float32 cast into a fresh buffer and ``log1p`` in place
on it (no second 32 MiB temporary; ``bench/reader_bench.py`` measures it against alternatives).

Framing (length and data CRC32C) is checked for every record by :mod:`amlhpc.tfrecord`; a
corrupt record raises :class:`amlhpc.tfrecord.TFRecordError` naming the file and the offset.
gzip-compressed files are recognised by their magic bytes.

Layout as the dataset ships it: ``<data_dir>/train/*.tfrecord[.gz]`` and
``<data_dir>/validation/*.tfrecord[.gz]``; one sample a file in the MLPerf data set
(``records_per_file`` when files hold more).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from amlhpc.tfrecord import TFRecordError, decode_example, iter_records, open_maybe_gzip

SPLITS = ("train", "validation")
SUFFIXES = (".tfrecord", ".tfrecord.gz", ".tfrecords", ".tfrecords.gz")


def preprocess(x: np.ndarray, apply_log: bool = True) -> np.ndarray:
    """int16 counts -> float32 (``log1p`` when ``apply_log``), vectorised."""
    out = x.astype(np.float32)
    if apply_log:
        with np.errstate(divide="ignore", invalid="ignore"):  # -1 -> -inf, < -1 -> nan, as TF does
            np.log1p(out, out=out)
    return out


def decode_sample(record: bytes | memoryview, cube: int, channels: int = 4, apply_log: bool = True,
                  name: str = "<record>") -> tuple[np.ndarray, np.ndarray]:
    """One serialized Example -> ``(x float32 (D, D, D, C), y float32 (4,))``."""
    example = decode_example(record)
    try:
        raw, y = example["x"], example["y"]
    except KeyError as exc:
        raise TFRecordError(f"{name}: Example has no feature {exc.args[0]!r}") from None
    expected = cube ** 3 * channels * 2
    if len(raw) != expected:  # type: ignore[arg-type]
        raise TFRecordError(f"{name}: x holds {len(raw)} bytes, expected {expected} "  # type: ignore[arg-type]
                            f"for a {cube}^3 x {channels} int16 cube (check --cube)")
    counts = np.frombuffer(raw, dtype="<i2").reshape(cube, cube, cube, channels)  # type: ignore[arg-type]
    return preprocess(counts, apply_log), np.asarray(y, dtype=np.float32)


def list_files(data_dir: str, split: str) -> list[str]:
    """The split's TFRecord files, sorted by name."""
    folder = os.path.join(data_dir, split)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder} does not exist: the data set needs {'/ and '.join(SPLITS)}/ "
                                f"folders under {data_dir}")
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(SUFFIXES))
    if not files:
        raise FileNotFoundError(f"{folder} holds no *.tfrecord or *.tfrecord.gz files")
    return files


def read_file(path: str) -> Iterator[bytes]:
    """Every record of a plain or gzip TFRecord file, CRCs checked."""
    with open_maybe_gzip(path) as stream:
        for _unused, data in iter_records(stream, path):
            yield data


class CosmoFlowDataset(Dataset):
    """Map-style dataset over TFRecord files; item ``i`` is record ``i % records_per_file`` of
    file ``i // records_per_file``."""

    def __init__(self, files: Sequence[str], cube: int, channels: int = 4, apply_log: bool = True,
                 records_per_file: int = 1) -> None:
        self.files = list(files)
        self.cube, self.channels, self.apply_log = cube, channels, apply_log
        self.records_per_file = records_per_file

    def __len__(self) -> int:
        return len(self.files) * self.records_per_file

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        path = self.files[index // self.records_per_file]
        want = index % self.records_per_file
        count = 0
        for k, record in enumerate(read_file(path)):
            count = k + 1
            if k == want:
                x, y = decode_sample(record, self.cube, self.channels, self.apply_log, path)
                return torch.from_numpy(x), torch.from_numpy(y)
        raise TFRecordError(f"{path}: holds {count} records, "
                            f"expected {self.records_per_file} (--records-per-file)")


class ShardSampler(Sampler[int]):
    """Each of ``num_shards`` ranks gets ``num_samples`` distinct indices of a per-epoch
    permutation (same seed everywhere); the remainder is dropped so every rank runs the same
    number of steps, which DDP needs."""

    def __init__(self, size: int, shard: int, num_shards: int, shuffle: bool = True, seed: int = 0,
                 num_samples: int | None = None) -> None:
        if not 0 <= shard < num_shards:
            raise ValueError(f"shard {shard} is outside 0..{num_shards - 1}")
        self.size, self.shard, self.num_shards = size, shard, num_shards
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        per_shard = size // num_shards
        self.num_samples = per_shard if num_samples is None else min(num_samples, per_shard)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=g).tolist()
        else:
            order = list(range(self.size))
        return iter(order[self.shard::self.num_shards][:self.num_samples])


def make_loader(dataset: CosmoFlowDataset, batch_size: int, shard: int, num_shards: int, *,
                shuffle: bool, seed: int = 0, num_samples: int | None = None, workers: int = 2,
                pin_memory: bool = False, prefetch_factor: int = 2) -> DataLoader:
    """A DataLoader reading this rank's shard with ``workers`` processes."""
    sampler = ShardSampler(len(dataset), shard, num_shards, shuffle, seed, num_samples)
    kwargs: dict = {}
    if workers > 0:
        kwargs = {"prefetch_factor": prefetch_factor, "persistent_workers": True}
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                      pin_memory=pin_memory, drop_last=True, **kwargs)
