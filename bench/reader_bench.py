#!/usr/bin/env python3
"""CosmoFlow TFRecord reader throughput, CPU-time MB/s per core, beside the MLPerf reference tf.data pipeline.

Writes CosmoFlow-format files (128^3 x 4 int16 cubes, the real sample size; counts drawn like
amlhpc.data.cosmoflow_data's, with numpy for speed) as plain and gzip TFRecords, then measures, in
one run and on the same files, each in its own process on ONE thread, in CPU time
(``time.process_time``: the machine's cores may be shared):

* worker    - what a DataLoader worker does per sample (workload/cosmoflow/data.py): read,
              inflate gzip (ISA-L when ``isal`` is installed), length + data CRC32C, Example
              parse, and the int16 copy into the collated batch; cast + log1p run on the GPU
* whole     - the whole CPU transform, for CPU-only runs: worker + int16 -> float32 -> log1p
              (torch's vectorised kernel), what the reference's CPU pipeline does
* tf.data   - the reference: TFRecordDataset -> parse_single_example -> decode_raw(int16) ->
              reshape -> cast(float32) -> log(x + 1), intra/inter-op threads = 1

MB/s counts the samples' int16 payload (16 MiB a sample), so every column measures the same
data. The tf.data column needs tensorflow-cpu in ``.venv-bench`` (or the Python named by
``$AMLHPC_BENCH_PYTHON``); build it once with::

    python3.12 -m venv .venv-bench && .venv-bench/bin/pip install -r requirements-bench-tf.txt

Without it the column says so and how to build it.

    python bench/reader_bench.py [--files 6] [--cube 128] [--repeat 2] [--no-tf]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD_PY = os.path.join(ROOT, ".venv-workload", "bin", "python")
BENCH_VENV = os.path.join(ROOT, ".venv-bench")
REQUIREMENTS = os.path.join(ROOT, "requirements-bench-tf.txt")
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


# --- parts run in the workload venv / the bench venv ---------------------------------------

def part_generate(out: str, files: int, cube: int) -> None:
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))
    import gzip

    from amlhpc.data.tfrecord import encode_example, encode_record
    rng = np.random.default_rng(0)
    for split_gzip in (False, True):
        folder = os.path.join(out, "gzip" if split_gzip else "plain")
        os.makedirs(folder, exist_ok=True)
        for i in range(files):
            y = rng.uniform(-1, 1, 4)
            means = 1.0 + 1.5 * (y + 1.0)
            counts = np.minimum(rng.geometric(1.0 / (1.0 + means), size=(cube, cube, cube, 4)) - 1, 48)
            rec = encode_example({"x": counts.astype("<i2").tobytes(), "y": [float(v) for v in y]})
            name = f"univ_ics_2019-03_a{i:06d}_000.tfrecord" + (".gz" if split_gzip else "")
            # gzip level 6: zlib's default, what TFRecordWriter's GZIP option writes.
            with open(os.path.join(folder, name), "wb") as raw:
                if split_gzip:
                    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
                        gz.write(encode_record(rec))
                else:
                    raw.write(encode_record(rec))


def part_ours(folder: str, cube: int, repeat: int) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "workload"))
    import torch
    from amlhpc.data.tfrecord import GZIP_BACKEND
    from cosmoflow import data as cdata
    torch.set_num_threads(1)
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
    ds = cdata.CosmoFlowDataset(files, cube)
    batch = torch.empty((1, cube, cube, cube, 4), dtype=torch.int16)  # the collated batch (shared memory)
    ds[0]  # warm the page cache and the code paths
    worker = whole = float("inf")
    out = None
    for _ in range(repeat):
        t0 = time.process_time()
        for i in range(len(ds)):
            x, _ = ds[i]
            batch[0].copy_(x)
        t1 = time.process_time()
        for i in range(len(ds)):
            x, _ = ds[i]
            batch[0].copy_(x)
            out = cdata.to_model_input(batch, out=out)  # the buffer train.py reuses on CPU
        t2 = time.process_time()
        worker, whole = min(worker, t1 - t0), min(whole, t2 - t1)
    payload = len(files) * cube ** 3 * 4 * 2
    # Where the time goes, on the first file: read + inflate + CRC, Example parse, cast + log1p.
    from amlhpc.data.tfrecord import decode_example
    t0 = time.process_time()
    (record,) = list(cdata.read_file(files[0]))
    t1 = time.process_time()
    x, _ = cdata.parse_sample(record, cube)
    decode_example(record)
    t2 = time.process_time()
    cdata.to_model_input(x)
    t3 = time.process_time()
    return {"worker": payload / worker / 1e6, "whole": payload / whole / 1e6, "gzip": GZIP_BACKEND,
            "split_ms": {"read+crc": (t1 - t0) * 1e3, "parse": (t2 - t1) * 1e3, "cast+log1p": (t3 - t2) * 1e3}}


def part_tf(folder: str, cube: int, repeat: int) -> dict:
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
    compression = "GZIP" if files[0].endswith(".gz") else None
    shape = [cube, cube, cube, 4]
    spec = {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([4], tf.float32)}

    def parse(proto):  # mlcommons/hpc cosmoflow data/cosmo.py _parse_data, apply_log=True
        ex = tf.io.parse_single_example(proto, features=spec)
        x = tf.reshape(tf.io.decode_raw(ex["x"], tf.int16), shape)
        x = tf.math.log(tf.cast(x, tf.float32) + tf.constant(1.0))
        return x, ex["y"]

    ds = tf.data.TFRecordDataset(files, compression_type=compression).map(parse, num_parallel_calls=1)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    ds = ds.with_options(options)
    for _ in ds.take(1):
        pass
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        n = 0
        for x, _ in ds:
            n += 1
        best = min(best, time.process_time() - t0)
    payload = n * cube ** 3 * 4 * 2
    return {"mbps": payload / best / 1e6, "samples_per_s": n / best, "tf": tf.__version__}


# --- orchestration (any Python) ---------------------------------------------------------

def _run_part(python: str, *args: str, timeout: int = 600) -> dict:
    env = {**os.environ, **ONE_THREAD}
    proc = subprocess.run([python, os.path.abspath(__file__), "--part", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1] or "{}")


def bench_python() -> tuple[str | None, str]:
    """The interpreter with tensorflow-cpu for the tf.data column, or (None, why not)."""
    py = os.environ.get("AMLHPC_BENCH_PYTHON") or os.path.join(BENCH_VENV, "bin", "python")
    how = ("build it once: python3.12 -m venv .venv-bench && .venv-bench/bin/pip install -r "
           "requirements-bench-tf.txt (or point AMLHPC_BENCH_PYTHON at a Python with tensorflow-cpu)")
    if not os.path.exists(py):
        return None, f"{py} is missing; {how}"
    proc = subprocess.run([py, "-c", "import tensorflow as tf; print(tf.__version__)"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, check=False)
    if proc.returncode != 0:
        return None, f"{py} has no tensorflow; {how}"
    return py, f"tensorflow-cpu {proc.stdout.strip()} from {py}"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info = f.read()
    except OSError:
        return "unknown"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{name}, {simd}, {os.cpu_count()} cores"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=6, help="samples per format")
    p.add_argument("--cube", type=int, default=128)
    p.add_argument("--repeat", type=int, default=2, help="passes over the files; the best one counts")
    p.add_argument("--no-tf", action="store_true", help="skip the tf.data column")
    p.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.part:
        kind, *rest = a.part
        if kind == "generate":
            part_generate(rest[0], int(rest[1]), int(rest[2]))
            print("{}")
        else:
            fn = part_ours if kind == "ours" else part_tf
            print(json.dumps(fn(rest[0], int(rest[1]), int(rest[2]))))
        return 0

    if not os.path.exists(WORKLOAD_PY):
        print(f"{WORKLOAD_PY} is missing: run `make setup`")
        return 1
    work = tempfile.mkdtemp(prefix="reader-bench-", dir=os.path.join(ROOT, ".cache") if os.path.isdir(
        os.path.join(ROOT, ".cache")) else None)
    try:
        t0 = time.perf_counter()
        _run_part(WORKLOAD_PY, "generate", work, str(a.files), str(a.cube))
        sizes = {k: sum(os.path.getsize(os.path.join(work, k, f)) for f in os.listdir(os.path.join(work, k)))
                 for k in ("plain", "gzip")}
        print(f"{a.files} samples of {a.cube}^3 x 4 int16 ({a.cube ** 3 * 8 / 2 ** 20:.0f} MiB each) per format; "
              f"files: plain {sizes['plain'] / 2 ** 20:.0f} MiB, gzip {sizes['gzip'] / 2 ** 20:.0f} MiB "
              f"(written in {time.perf_counter() - t0:.0f}s)")
        tf_py, why = (None, "skipped (--no-tf)") if a.no_tf else bench_python()
        print(f"CPU: {_cpu_name()}; one thread per column, CPU time")
        print(f"{'format':7} {'worker':>8} {'whole':>8} {'tf.data':>8}  {'worker/tf':>9} {'whole/tf':>8}  "
              f"(MB/s per core)  whole: read+crc / parse / cast+log1p (ms)")
        for fmt in ("plain", "gzip"):
            folder = os.path.join(work, fmt)
            ours = _run_part(WORKLOAD_PY, "ours", folder, str(a.cube), str(a.repeat))
            ref = None
            if tf_py:
                try:
                    ref = _run_part(tf_py, "tf", folder, str(a.cube), str(a.repeat))["mbps"]
                except (RuntimeError, subprocess.SubprocessError) as exc:
                    why = f"tf.data failed: {exc}"
            ratios = (f"{ours['worker'] / ref:8.2f}x {ours['whole'] / ref:7.2f}x" if ref else f"{'n/a':>9} {'n/a':>8}")
            split = " / ".join(f"{v:.0f}" for v in ours["split_ms"].values())
            label = fmt + (f" ({ours['gzip']})" if fmt == "gzip" else "")
            print(f"{label:7} {ours['worker']:8.0f} {ours['whole']:8.0f} "
                  f"{(f'{ref:8.0f}' if ref else 'n/a'):>8}  {ratios}  {split}")
        print(f"tf.data: {why}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
