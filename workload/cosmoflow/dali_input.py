"""The GPU input path: NVIDIA DALI reads the TFRecords and hands int16 batches to the GPU.

What the fastest MLPerf HPC CosmoFlow entries used. DALI's TFRecord reader (``fn.readers.tfrecord``)
reads the files with its own threads and assembles each batch without a Python copy per sample;
the ``x`` bytes go to the GPU, are reinterpreted there as the int16 ``(D, D, D, C)`` cube, and
the training step casts and takes ``log1p`` on the GPU (:func:`cosmoflow.data.to_model_input`,
the same code as the CPU path, so both give identical tensors; ``tests/workload/test_dali_input.py``
compares them on files TensorFlow wrote, with DALI's CPU pipeline).

Limits, and what happens then (:func:`unavailable` names the reason; ``train.py --input auto``
prints it in one line and reads with the CPU path, :class:`cosmoflow.data.SlotBatches`):

* DALI reads plain TFRecord files only: it seeks to each record by an index (``offset size``
  a line, ``tfrecord2idx``'s format) and cannot seek inside gzip. Gzip data sets use the CPU path.
* The index is made at first read, from the record headers only (one 12-byte read a record, the
  length CRC checked), into ``index_dir``; a later run reuses it while it still covers the file.
* DALI's reader does not check the records' data CRC32C (the CPU path does).
* train.py reads the training split with it; validation keeps the CPU path, which reads the
  same samples in the same order every epoch.
* ``--input auto`` reads with DALI on GPU ranks only; ``--input dali`` on a rank without a GPU
  runs DALI's CPU pipeline (the reinterpretation and the copy into torch on the host).
* The order is the CPU path's: every epoch each rank reads its share of a fresh permutation of
  the whole file list (:class:`cosmoflow.data.ShardSampler`, seeded with ``seed + epoch``, the
  same on every rank), as the reference reshuffles its whole file list every epoch
  (``data/cosmo.py``: ``shuffle(len(filenames), reshuffle_each_iteration=True)``, then
  ``shard``). DALI's reader is given that list, in that order, with its own shuffle off: a new
  pipeline an epoch (built when the epoch's iterator is asked for; the indexes are made once).
  DALI's shuffle buffer instead keeps a rank on a fixed contiguous part of the name-sorted files
  and only mixes what the buffer holds. Every rank runs ``num_batches`` steps.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import struct
import tempfile
from collections.abc import Iterator, Sequence

from amlhpc.data.tfrecord import TFRecordError, masked_crc32c

DALI_VERSION = "2.4.0"  # workload/requirements.txt and requirements-workload.txt pin the same
INSTALL = f"pip install nvidia-dali-cuda120=={DALI_VERSION}"


def unavailable(files: Sequence[str], cuda: bool, need_gpu: bool = True) -> str | None:
    """Why DALI cannot read ``files`` here (one phrase), or None when it can; ``need_gpu=False``:
    its CPU pipeline will do on a rank without a GPU."""
    if importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.dali") is None:
        return f"NVIDIA DALI is not installed ({INSTALL})"
    if not cuda and need_gpu:
        return "DALI feeds GPUs and this rank has none"
    gz = [f for f in files if f.endswith(".gz")]
    if gz:
        return f"DALI reads plain TFRecords only and {len(gz)} file(s) are gzip ({os.path.basename(gz[0])})"
    return None


def index_lines(path: str) -> list[tuple[int, int]]:
    """``(offset, size)`` of each record of a plain TFRecord file, from the headers alone."""
    out = []
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        offset = 0
        while offset < size:
            f.seek(offset)
            header = f.read(12)
            if len(header) < 12:
                raise TFRecordError(f"{path}: truncated record header at offset {offset}")
            length, length_crc = struct.unpack("<QI", header)
            if masked_crc32c(header[:8]) != length_crc:
                raise TFRecordError(f"{path}: corrupt record at offset {offset}: length CRC mismatch")
            if offset + 16 + length > size:
                raise TFRecordError(f"{path}: truncated record at offset {offset}: expected {length} bytes")
            out.append((offset, 16 + length))
            offset += 16 + length
    return out


def default_index_dir(files: Sequence[str]) -> str:
    """A node-local folder for the indexes of this folder of files (the data may be read-only)."""
    folder = os.path.dirname(os.path.abspath(files[0])) if files else ""
    tag = hashlib.sha256(folder.encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), "cosmoflow-dali-index", tag)


def _covers(index: str, size: int) -> bool:
    try:
        with open(index, encoding="ascii") as f:
            lines = f.read().split()
        return len(lines) >= 2 and int(lines[-2]) + int(lines[-1]) == size
    except (OSError, ValueError):
        return False


def ensure_indexes(files: Sequence[str], index_dir: str) -> list[str]:
    """One index a file under ``index_dir``, made where missing or stale (written to a
    temporary name, then renamed: the ranks of a node may race)."""
    os.makedirs(index_dir, exist_ok=True)
    out = []
    for path in files:
        index = os.path.join(index_dir, os.path.basename(path) + ".idx")
        if not _covers(index, os.path.getsize(path)):
            text = "".join(f"{o} {n}\n" for o, n in index_lines(path))
            tmp = f"{index}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="ascii") as f:
                f.write(text)
            os.replace(tmp, index)
        out.append(index)
    return out


class DaliBatches:
    """``num_batches`` batches an epoch of ``(x int16 (B, D, D, D, C), y float32 (B, 4))``, read
    by DALI from this rank's share of ``files`` (``shard`` of ``num_shards``), in the order
    :class:`cosmoflow.data.ShardSampler` deals for the epoch set on :attr:`sampler`; on GPU
    ``device_id`` (``None``: DALI's CPU pipeline, for machines without a GPU)."""

    def __init__(self, files: Sequence[str], cube: int, channels: int, batch_size: int, *, shard: int,
                 num_shards: int, shuffle: bool, seed: int, num_batches: int, device_id: int | None,
                 threads: int = 2, index_dir: str | None = None, prefetch: int = 2,
                 records_per_file: int = 1) -> None:
        from cosmoflow.data import ShardSampler

        self.files = list(files)
        self.indexes = ensure_indexes(self.files, index_dir or default_index_dir(self.files))
        self.shape = [cube, cube, cube, channels]
        self.batch_size, self.num_batches, self.device_id = batch_size, num_batches, device_id
        self.threads, self.prefetch = max(1, threads), max(1, prefetch)
        # Whole files a rank reads an epoch (DALI reads every record of a file it opens).
        wanted = -(-num_batches * batch_size // records_per_file)
        self.sampler = ShardSampler(len(self.files), shard, num_shards, shuffle, seed, wanted)
        self._pipeline = None

    def __len__(self) -> int:
        return self.num_batches

    def epoch_files(self) -> list[int]:
        """Indexes into ``files`` of what this rank reads in the sampler's epoch, in order."""
        return list(self.sampler)

    def _build(self, order: Sequence[int]):
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali import tfrecord as tfrec
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        paths = [self.files[i] for i in order]
        indexes = [self.indexes[i] for i in order]
        shape, gpu = self.shape, self.device_id is not None

        @pipeline_def(batch_size=self.batch_size, num_threads=self.threads, device_id=self.device_id,
                      prefetch_queue_depth=self.prefetch)
        def pipeline():
            record = fn.readers.tfrecord(
                path=paths, index_path=indexes, name="reader", random_shuffle=False,
                features={"x": tfrec.FixedLenFeature((), tfrec.string, ""),
                          "y": tfrec.FixedLenFeature([4], tfrec.float32, 0.0)})
            x, y = record["x"], record["y"]
            if gpu:
                x, y = x.gpu(), y.gpu()
            return fn.reinterpret(x, dtype=types.INT16, shape=shape), y

        return DALIGenericIterator([pipeline()], ["x", "y"], size=-1)  # batches counted here

    def __iter__(self) -> Iterator[tuple]:
        # The epoch's pipeline is built here, where train.py asks for the epoch's iterator (under
        # its watchdog), not at the first batch; the last epoch's goes first.
        self._pipeline = None
        self._pipeline = self._build(self.epoch_files())
        return self._batches(self._pipeline)

    def _batches(self, iterator) -> Iterator[tuple]:
        for _step, (batch,) in zip(range(self.num_batches), iterator):
            yield batch["x"], batch["y"]
