"""CosmoFlow TFRecords -> PyTorch: a checked reader that hands int16 cubes to the device.

Each record is a ``tf.train.Example`` with ``x`` (int16 bytes of a D x D x D x 4 cube of
particle counts) and ``y`` (4 float32 parameters). The MLPerf reference ``_parse_data(apply_log=True)``
does ``decode_raw(int16) -> reshape -> cast(float32) -> log(x + 1)`` on the CPU. Here the split is:

* DataLoader workers (:class:`CosmoFlowDataset`) read the file, inflate gzip (ISA-L when the
  ``isal`` package is installed, zlib otherwise), check every record's length and data CRC32C,
  parse the Example and copy the **int16** cube (half the bytes of float32) straight into its
  place in a reusable shared batch slot (:class:`SlotBatches`, pinned once on CUDA): one copy a
  sample, no collation into fresh shared memory, no pinning copy in the training process. On
  GPU ranks NVIDIA DALI reads plain training files instead (:mod:`cosmoflow.dali_input`);
* :func:`to_model_input` casts and takes ``log1p`` where the model runs: on the GPU inside the
  training step, or on CPU-only runs with torch's vectorised kernel (SLEEF; numpy's float32
  ``log1p`` is scalar on AVX2 machines).

Framing errors raise :class:`amlhpc.data.tfrecord.TFRecordError` naming the file and the offset; a
truncated or corrupt gzip file names the file, and a file read to its end has its gzip trailer
(CRC-32, size) checked.

Layout as the dataset ships it: ``<data_dir>/train/*.tfrecord[.gz]`` and
``<data_dir>/validation/*.tfrecord[.gz]``; one sample a file in the MLPerf data set
(``records_per_file`` when files hold more).
"""

from __future__ import annotations

import os
import queue
import warnings
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from amlhpc.data.tfrecord import TFRecordError, decode_example, iter_records, open_maybe_gzip
from torch.utils.data import DataLoader, Dataset, Sampler

SPLITS = ("train", "validation")
SUFFIXES = (".tfrecord", ".tfrecord.gz", ".tfrecords", ".tfrecords.gz")


def preprocess(x: np.ndarray, apply_log: bool = True) -> np.ndarray:
    """int16 counts -> float32 (``log1p`` when ``apply_log``) with numpy: the reference's
    transform, kept for comparisons (training uses :func:`to_model_input`)."""
    out = x.astype(np.float32)
    if apply_log:
        with np.errstate(divide="ignore", invalid="ignore"):  # -1 -> -inf, < -1 -> nan, as TF does
            np.log1p(out, out=out)
    return out


def to_model_input(x: torch.Tensor, device: torch.device | None = None, apply_log: bool = True,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """int16 counts (any shape) -> float32 ``log1p(counts)`` on ``device`` (default: where ``x`` is).

    The int16 tensor crosses to the device (non-blocking from pinned memory) and is cast and
    log-transformed there, in place: one float32 buffer, no temporary. ``out`` (same shape,
    float32, on the device) is reused instead of a fresh buffer: on CPU-only runs that saves the
    page faults of a new 32 MiB buffer per sample, which cost more than the cast and log1p."""
    if device is not None:
        x = x.to(device, non_blocking=True)
    if out is None or out.shape != x.shape or out.device != x.device:
        out = x.to(torch.float32)
    else:
        out.copy_(x)
    return out.log1p_() if apply_log else out


def _int16_view(raw: memoryview | bytes, shape: tuple[int, ...]) -> torch.Tensor:
    # The record's bytes are immutable; the tensor is only ever read (collated, copied), so
    # torch's warning about non-writable buffers does not apply.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(raw, dtype=torch.int16).view(shape)


def parse_sample(record: bytes | memoryview, cube: int, channels: int = 4,
                 name: str = "<record>") -> tuple[torch.Tensor, torch.Tensor]:
    """One serialized Example -> ``(x int16 (D, D, D, C), y float32 (4,))``, x without a copy."""
    example = decode_example(record)
    try:
        raw, y = example["x"], example["y"]
    except KeyError as exc:
        raise TFRecordError(f"{name}: Example has no feature {exc.args[0]!r}") from None
    expected = cube ** 3 * channels * 2
    if len(raw) != expected:  # type: ignore[arg-type]
        raise TFRecordError(f"{name}: x holds {len(raw)} bytes, expected {expected} "  # type: ignore[arg-type]
                            f"for a {cube}^3 x {channels} int16 cube (check --cube)")
    if np.little_endian:
        x = _int16_view(raw, (cube, cube, cube, channels))  # type: ignore[arg-type]
    else:  # pragma: no cover - no big-endian hosts here
        x = torch.from_numpy(np.frombuffer(raw, dtype="<i2").astype(np.int16))  # type: ignore[arg-type]
        x = x.view(cube, cube, cube, channels)
    return x, torch.tensor(y, dtype=torch.float32)


def decode_sample(record: bytes | memoryview, cube: int, channels: int = 4, apply_log: bool = True,
                  name: str = "<record>") -> tuple[np.ndarray, np.ndarray]:
    """One serialized Example -> ``(x float32 (D, D, D, C), y float32 (4,))``: the whole CPU
    transform (parse, cast, ``log1p`` with torch's vectorised kernel)."""
    x, y = parse_sample(record, cube, channels, name)
    return to_model_input(x, apply_log=apply_log).numpy(), y.numpy()


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
    """Every record of a plain or gzip TFRecord file, CRCs checked (and the gzip trailer, at
    the end)."""
    with open_maybe_gzip(path) as stream:
        for _unused, data in iter_records(stream, path):
            yield data


class CosmoFlowDataset(Dataset):
    """Map-style dataset over TFRecord files; item ``i`` is record ``i % records_per_file`` of
    file ``i // records_per_file``, as ``(x int16 (D, D, D, C), y float32 (4,))``: pass x through
    :func:`to_model_input` on the device (``raw=False`` gives float32 ``log1p`` here instead)."""

    def __init__(self, files: Sequence[str], cube: int, channels: int = 4, apply_log: bool = True,
                 records_per_file: int = 1, raw: bool = True) -> None:
        self.files = list(files)
        self.cube, self.channels, self.apply_log = cube, channels, apply_log
        self.records_per_file, self.raw = records_per_file, raw

    def __len__(self) -> int:
        return len(self.files) * self.records_per_file

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        path = self.files[index // self.records_per_file]
        want = index % self.records_per_file
        found = None
        count = 0
        for k, record in enumerate(read_file(path)):
            count = k + 1
            if k == want:
                found = parse_sample(record, self.cube, self.channels, path)
                if want < self.records_per_file - 1:
                    break  # the last record reads on to the end: the gzip trailer is checked
        if found is None or count != self.records_per_file and want == self.records_per_file - 1:
            raise TFRecordError(f"{path}: holds {count} records, "
                                f"expected {self.records_per_file} (--records-per-file)")
        if self.raw:
            return found
        x, y = found
        return to_model_input(x, apply_log=self.apply_log), y


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


@dataclass(frozen=True)
class LoaderPlan:
    """How many DataLoader workers, batches in flight per worker, and pinning threads a rank uses."""

    workers: int
    prefetch_factor: int
    pin_threads: int


def cores_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def plan_loader(cores: int, ranks_per_node: int, gpu: bool, *, workers: int | None = None,
                prefetch_factor: int | None = None, pin_threads: int | None = None) -> LoaderPlan:
    """Workers, prefetch depth and pinning threads from the node's cores per rank; any of them
    can be given (``None``: chosen).

    GPU ranks keep one core for the training process and one per pinning thread, the rest read
    (an ND96 node: 96 cores / 8 GPUs -> 9 workers + 2 pinning threads + the rank), with at least 8 batches
    in flight. CPU-only ranks compute on their cores, so few workers feed them."""
    per_rank = max(1, cores // max(1, ranks_per_node))
    if pin_threads is None:
        pin_threads = (2 if per_rank >= 8 else 1) if gpu else 0
    if workers is None:
        workers = max(1, per_rank - 1 - pin_threads) if gpu else max(1, min(4, per_rank // 4))
    if prefetch_factor is None:
        prefetch_factor = max(2, -(-8 // max(1, workers)))
    return LoaderPlan(workers, prefetch_factor, pin_threads)


class PinnedBatches:
    """Iterate a loader's batches, pinned by ``threads`` threads with ``depth`` batches ahead, in
    the loader's order (DataLoader's own ``pin_memory`` uses one thread)."""

    def __init__(self, loader: DataLoader, threads: int, depth: int) -> None:
        self.loader, self.threads, self.depth = loader, max(1, threads), max(1, depth)
        self.sampler = loader.sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[list[torch.Tensor]]:
        from concurrent.futures import ThreadPoolExecutor

        def pin(batch):
            return [t.pin_memory() for t in batch]

        with ThreadPoolExecutor(self.threads, thread_name_prefix="pin") as pool:
            ahead: queue.SimpleQueue = queue.SimpleQueue()
            pending = 0
            for batch in self.loader:
                ahead.put(pool.submit(pin, batch))
                pending += 1
                if pending > self.depth:
                    pending -= 1
                    yield ahead.get().result()
            while pending:
                pending -= 1
                yield ahead.get().result()


class SlotPool:
    """Which of ``count`` batch slots are free. A slot is taken when its batch is sent to a
    worker and given back when the training loop asks for the batch after it; on CUDA it is
    free again once the copy to the GPU, queued before that, has run (a CUDA event)."""

    def __init__(self, count: int, cuda: bool = False) -> None:
        self.count, self.cuda = count, cuda
        self.free: deque[int] = deque(range(count))
        self.pending: deque[tuple[int, Any]] = deque()

    def reset(self) -> None:
        """A new epoch: no batch of the last one is in a worker or in use any more."""
        for _slot, event in self.pending:
            event.synchronize()
        self.pending.clear()
        self.free = deque(range(self.count))

    def take(self) -> int:
        if self.free:
            return self.free.popleft()
        if self.pending:
            slot, event = self.pending.popleft()
            event.synchronize()
            return slot
        raise RuntimeError(f"all {self.count} batch slots are in use: hold no batch past the next one "
                           "(copy it if it must live longer)")

    def give_back(self, slot: int) -> None:
        if self.cuda:
            event = torch.cuda.Event()
            event.record()  # after the step's copy from this slot on the current stream
            self.pending.append((slot, event))
        else:
            self.free.append(slot)


class SlotSampler(Sampler[tuple[int, list[int]]]):
    """Batches of ``sampler``'s indices, each with the slot its worker decodes into."""

    def __init__(self, sampler: ShardSampler, batch_size: int, pool: SlotPool) -> None:
        self.sampler, self.batch_size, self.pool = sampler, batch_size, pool

    def __len__(self) -> int:
        return len(self.sampler) // self.batch_size

    def __iter__(self) -> Iterator[tuple[int, list[int]]]:
        # The body runs when the DataLoader asks for the first batch, after persistent workers
        # have finished the last epoch's work, so every slot is free again.
        self.pool.reset()
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield self.pool.take(), batch
                batch = []


class _FillSlots(Dataset):
    """A worker's side: decode a batch's samples straight into its slot; hand back the slot."""

    def __init__(self, dataset: CosmoFlowDataset, xs: torch.Tensor, ys: torch.Tensor) -> None:
        self.dataset, self.xs, self.ys = dataset, xs, ys

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):  # pragma: no cover - DataLoader calls __getitems__
        raise TypeError("_FillSlots is read a batch at a time")

    def __getitems__(self, task: tuple[int, list[int]]) -> int:
        slot, indices = task
        for j, index in enumerate(indices):
            x, y = self.dataset[index]
            self.xs[slot, j].copy_(x)
            self.ys[slot, j].copy_(y)
            # Free the record before the next read: malloc then hands the same 16 MiB back,
            # instead of growing the heap by a second buffer and trimming it (fresh pages, a
            # page fault each, every other sample).
            del x, y
        return slot


def _the_slot(slot: int) -> int:
    return slot


def _pin_shared(t: torch.Tensor) -> bool:
    """Page-lock ``t``'s (shared) memory for asynchronous copies to the GPU."""
    try:
        rc = int(torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0))
    except (RuntimeError, AttributeError):
        return False
    return rc == 0


class SlotBatches:
    """This rank's batches, decoded by ``workers`` processes straight into reusable shared
    memory slots (pinned on CUDA): no collation into fresh shared memory, one copy a sample.

    Yields ``(x int16 (B, D, D, D, C), y float32 (B, 4))`` views of a slot, valid until the
    next batch is asked for (train.py's step copies x to the GPU or into its float32 buffer
    first). Same order and samples as a DataLoader over :class:`ShardSampler`."""

    def __init__(self, dataset: CosmoFlowDataset, sampler: ShardSampler, batch_size: int, *,
                 workers: int = 2, prefetch_factor: int = 2, cuda: bool = False) -> None:
        self.sampler, self.batch_size = sampler, batch_size
        count = (workers * prefetch_factor if workers > 0 else 0) + 2
        shape = (dataset.cube, dataset.cube, dataset.cube, dataset.channels)
        self.xs = torch.empty((count, batch_size, *shape), dtype=torch.int16)
        self.ys = torch.empty((count, batch_size, 4), dtype=torch.float32)
        if workers > 0:
            self.xs.share_memory_()
            self.ys.share_memory_()
        self.pinned = cuda and _pin_shared(self.xs) and _pin_shared(self.ys)
        self.pool = SlotPool(count, cuda)
        kwargs: dict = {"prefetch_factor": prefetch_factor, "persistent_workers": True} if workers > 0 else {}
        self.loader = DataLoader(_FillSlots(dataset, self.xs, self.ys),
                                 batch_sampler=SlotSampler(sampler, batch_size, self.pool),
                                 collate_fn=_the_slot, num_workers=workers, **kwargs)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # The DataLoader's iterator now, as iter(DataLoader) does: it draws its workers' seed from
        # torch's RNG at this point (train.py seeds the step's RNG after it).
        return self._hand_over(iter(self.loader))

    def _hand_over(self, batches: Iterator[int]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        held = None
        while True:
            if held is not None:  # the loop asks for the next batch: it is done with this one
                self.pool.give_back(held)
                held = None
            try:
                held = next(batches)
            except StopIteration:
                return
            yield self.xs[held], self.ys[held]


def make_loader(dataset: CosmoFlowDataset, batch_size: int, shard: int, num_shards: int, *,
                shuffle: bool, seed: int = 0, num_samples: int | None = None, workers: int = 2,
                pin_memory: bool = False, prefetch_factor: int = 2, pin_threads: int = 1,
                slots: bool = True):
    """This rank's shard read by ``workers`` processes into reusable batch slots
    (:class:`SlotBatches`, pinned with ``pin_memory``); ``slots=False``: a DataLoader that
    collates each batch into fresh shared memory, pinned by ``pin_threads`` threads
    (:class:`PinnedBatches`) with ``pin_memory``: the path before slots, kept for comparison."""
    sampler = ShardSampler(len(dataset), shard, num_shards, shuffle, seed, num_samples)
    if slots:
        return SlotBatches(dataset, sampler, batch_size, workers=workers, prefetch_factor=prefetch_factor,
                           cuda=pin_memory)
    kwargs: dict = {}
    if workers > 0:
        kwargs = {"prefetch_factor": prefetch_factor, "persistent_workers": True}
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                        pin_memory=pin_memory and pin_threads <= 1, drop_last=True, **kwargs)
    if pin_memory and pin_threads > 1:
        return PinnedBatches(loader, pin_threads, prefetch_factor)
    return loader
