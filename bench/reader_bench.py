#!/usr/bin/env python3
"""CosmoFlow TFRecord reader throughput, MB/s per core, beside the MLPerf reference tf.data pipeline.

Writes CosmoFlow-format files (128^3 x 4 int16 cubes, the real sample size; counts drawn like
amlhpc.cosmoflow_data's, with numpy for speed) as plain and gzip TFRecords, then measures on
ONE core (one process, one thread):

* ours      - workload/cosmoflow/data.py: read, length + data CRC32C, Example parse,
              int16 -> float32 -> log1p (what each DataLoader worker does per sample)
* tf.data   - the reference: TFRecordDataset -> parse_single_example -> decode_raw(int16) ->
              reshape -> cast(float32) -> log(x + 1), intra/inter-op threads = 1

MB/s counts the samples' int16 payload (16 MiB a sample), so both columns measure the same
work. The tf.data column needs tensorflow-cpu, installed on demand into .venv-bench (Python
3.12; a few hundred MB, once); when it cannot be installed the column says why.

    python bench/reader_bench.py [--files 6] [--cube 128] [--repeat 2] [--no-tf]
"""

from __future__ import annotations

import argparse
import glob
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
TF_REQUIREMENT = "tensorflow-cpu==2.21.0"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


# --- parts run in the workload venv / the bench venv ---------------------------------------

def part_generate(out: str, files: int, cube: int) -> None:
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))
    import gzip

    from amlhpc.tfrecord import encode_example, encode_record
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
    import numpy as np
    from cosmoflow import data as cdata
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
    ds = cdata.CosmoFlowDataset(files, cube)
    ds[0]  # warm the page cache and the code paths
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for i in range(len(ds)):
            x, _ = ds[i]
        best = min(best, time.perf_counter() - t0)
    # Where the time goes, on the first file: framing + CRC, Example parse, cast + log1p.
    from amlhpc.tfrecord import decode_example
    t0 = time.perf_counter()
    (record,) = list(cdata.read_file(files[0]))
    t1 = time.perf_counter()
    raw = decode_example(record)["x"]
    counts = np.frombuffer(raw, dtype="<i2").reshape(cube, cube, cube, 4)
    t2 = time.perf_counter()
    cdata.preprocess(counts)
    t3 = time.perf_counter()
    payload = len(files) * cube ** 3 * 4 * 2
    return {"mbps": payload / best / 1e6, "samples_per_s": len(files) / best,
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
        t0 = time.perf_counter()
        n = 0
        for x, _ in ds:
            n += 1
        best = min(best, time.perf_counter() - t0)
    payload = n * cube ** 3 * 4 * 2
    return {"mbps": payload / best / 1e6, "samples_per_s": n / best, "tf": tf.__version__}


# --- orchestration (any Python) ---------------------------------------------------------

def _run_part(python: str, *args: str, timeout: int = 600) -> dict:
    env = {**os.environ, **ONE_THREAD}
    proc = subprocess.run([python, os.path.abspath(__file__), "--part", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1] or "{}")


def _python312() -> str | None:
    """A Python 3.12 to build .venv-bench from (never a venv's own: its base interpreter)."""
    candidates = [getattr(sys, "_base_executable", ""), *sorted(glob.glob(os.path.expanduser(
        "~/.pyenv/versions/3.12.*/bin/python3.12"))), "/usr/local/bin/python3.12", "/usr/bin/python3.12",
        shutil.which("python3.12") or ""]
    for c in filter(None, candidates):
        try:
            out = subprocess.run([c, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.stdout.strip() == "True":
            return c
    return None


def bench_python(timeout: int = 900) -> tuple[str | None, str]:
    """The .venv-bench interpreter with tensorflow-cpu, created on demand; or (None, why)."""
    py = os.path.join(BENCH_VENV, "bin", "python")
    stamp = os.path.join(BENCH_VENV, ".bench-stamp")
    if os.path.exists(stamp) and open(stamp).read().strip() == TF_REQUIREMENT:
        return py, "ready"
    base = _python312()
    if not base:
        return None, "no python3.12 to build .venv-bench with"
    try:
        if not os.path.exists(py):
            subprocess.run([base, "-m", "venv", BENCH_VENV], check=True, capture_output=True, timeout=120)
        print(f"installing {TF_REQUIREMENT} into .venv-bench (once; it is large)...", flush=True)
        proc = subprocess.run([py, "-m", "pip", "install", "-q", TF_REQUIREMENT], capture_output=True, text=True,
                              timeout=timeout)
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"could not install {TF_REQUIREMENT}: {exc}"
    if proc.returncode != 0:
        last = [line for line in proc.stderr.splitlines() if line.strip() and "WARNING" not in line][-1:]
        return None, f"could not install {TF_REQUIREMENT}: {' '.join(last) or 'pip failed'}"
    with open(stamp, "w") as f:
        f.write(TF_REQUIREMENT + "\n")
    return py, "installed"


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
        print(f"{'format':8} {'ours MB/s/core':>15} {'tf.data MB/s/core':>18}  ours: read+crc / parse / cast+log1p (ms)")
        for fmt in ("plain", "gzip"):
            folder = os.path.join(work, fmt)
            ours = _run_part(WORKLOAD_PY, "ours", folder, str(a.cube), str(a.repeat))
            if tf_py:
                try:
                    ref = f"{_run_part(tf_py, 'tf', folder, str(a.cube), str(a.repeat))['mbps']:18.0f}"
                except (RuntimeError, subprocess.SubprocessError) as exc:
                    ref = f"{'failed':>18}"
                    why = str(exc)
            else:
                ref = f"{'n/a':>18}"
            split = " / ".join(f"{v:.0f}" for v in ours["split_ms"].values())
            print(f"{fmt:8} {ours['mbps']:15.0f} {ref}  {split}")
        if not tf_py or why not in ("ready", "installed"):
            print(f"tf.data: {why}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
