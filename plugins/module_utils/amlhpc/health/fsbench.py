# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The project's own shared-mount throughput test (used when elbencho is not installed).

Writes ``files`` files of ``file_size`` bytes with ``parallel`` writer threads, then reads
them back with ``parallel`` reader threads and checks every block, and reports MB/s
(10^6 bytes/s) for each phase, measured from the first open to the last close.

* Each block starts with a header (magic, file number, block number), so a read that returns
  another file's data, a stale block or a short file is an error, not a fast read.
* Every file is fsync'ed before the write phase ends: the write figure includes getting the
  data to the file system, not just into the page cache.
* Reads should come from the file system, not from this node's page cache. Dropping the whole
  cache (``echo 3 > /proc/sys/vm/drop_caches``) needs root, so instead each file is evicted
  after its fsync with ``posix_fadvise(POSIX_FADV_DONTNEED)``, which any user may do for a
  file they can open. Linux drops the clean pages of that file on local file systems and on
  kernel clients such as BeeGFS; a file system that ignores the hint (some FUSE ones) will
  show cache speed on read. ``evicted`` in the result says whether the call was available.
* Everything is written in one new folder under ``path`` and removed at the end; nothing is
  written anywhere else.

Threads are enough for parallel I/O from Python: ``os.write`` and ``readinto`` release the
GIL for the system call, and the per-block work in Python is a 24-byte header.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MAGIC = 0x414D4C48  # "AMLH"
HEADER = struct.Struct("<IIQQ")  # magic, file, block, run tag
FOLDER_PREFIX = ".amlhpc-fsbench-"


def _write_file(path: str, file_no: int, file_size: int, block_size: int, tag: int, filler: bytes) -> int:
    buf = bytearray(filler[:block_size])
    view = memoryview(buf)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    written = 0
    try:
        block = 0
        while written < file_size:
            n = min(block_size, file_size - written)
            HEADER.pack_into(buf, 0, MAGIC, file_no, block, tag)
            done = 0
            while done < n:
                done += os.write(fd, view[done:n])
            written += n
            block += 1
        os.fsync(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return written


def _read_file(path: str, file_no: int, file_size: int, block_size: int, tag: int) -> tuple[int, str | None]:
    buf = bytearray(block_size)
    view = memoryview(buf)
    total = 0
    error = None
    with open(path, "rb", buffering=0) as f:
        block = 0
        while True:
            n = f.readinto(view)
            if not n:
                break
            # A short read mid-block is legal; top the block up before checking it.
            while n < block_size and total + n < file_size:
                more = f.readinto(view[n:])
                if not more:
                    break
                n += more
            if error is None and n >= HEADER.size:
                magic, fno, bno, rtag = HEADER.unpack_from(buf, 0)
                if (magic, fno, bno, rtag) != (MAGIC, file_no, block, tag):
                    error = (f"{os.path.basename(path)} block {block}: found file {fno} block {bno} "
                             f"(magic {magic:#x}, run {rtag:#x})")
            total += n
            block += 1
    if error is None and total != file_size:
        error = f"{os.path.basename(path)}: read {total} bytes, wrote {file_size}"
    return total, error


def run(path: str, files: int = 16, file_size: int = 256 * 2**20, parallel: int = 8,
        block_size: int = 2**20, keep: bool = False) -> dict[str, Any]:
    """Write then read ``files`` files under a new folder in ``path``; return the figures."""
    if files < 1 or file_size < 1 or parallel < 1 or block_size < HEADER.size:
        raise ValueError(f"files, file_size and parallel must be >= 1 and block_size >= {HEADER.size}")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path} is not a folder (is the shared file system mounted?)")
    tag = uuid.uuid4().int & 0xFFFFFFFFFFFFFFFF
    folder = os.path.join(path, f"{FOLDER_PREFIX}{socket.gethostname()}-{os.getpid()}-{tag:016x}")
    os.mkdir(folder, 0o700)
    names = [os.path.join(folder, f"file{i:05d}") for i in range(files)]
    filler = os.urandom(block_size)
    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            written = sum(pool.map(lambda i: _write_file(names[i], i, file_size, block_size, tag, filler),
                                   range(files)))
        write_s = time.perf_counter() - start

        # Readers take the files in another order than the writers did, so a reader does not
        # simply follow the writer that just left a file behind.
        order = list(range(files))[::-1]
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            results = list(pool.map(lambda i: _read_file(names[i], i, file_size, block_size, tag), order))
        read_s = time.perf_counter() - start
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    read = sum(n for n, _unused in results)
    errors = [e for _unused, e in results if e]
    return {
        "path": path, "folder": folder, "kept": keep, "files": files, "file_size": file_size,
        "parallel": parallel, "block_size": block_size, "bytes_written": written, "bytes_read": read,
        "write_seconds": round(write_s, 4), "read_seconds": round(read_s, 4),
        "write_mbps": round(written / write_s / 1e6, 1) if write_s > 0 else None,
        "read_mbps": round(read / read_s / 1e6, 1) if read_s > 0 else None,
        "evicted": hasattr(os, "posix_fadvise"), "errors": errors,
    }
