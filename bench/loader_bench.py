#!/usr/bin/env python3
"""Host CPU per sample through the real input loader, the way train.py builds it, beside the
loader before batch slots, DALI's CPU pipeline and the MLPerf reference's tf.data pipeline, in
one run, like for like: decoding to the int16 cube, and the whole transform.

What moved to the GPU: the reference's tf.data pipeline decodes the int16 cube, casts it to
float32 and takes log(x + 1) on the CPU (mlcommons/hpc cosmoflow ``data/cosmo.py``
``_parse_data``). train.py's loaders stop at the int16 cube (half the bytes); the cast and
``log1p`` run on the GPU (``cosmoflow.data.to_model_input`` in the training step). So each path
is measured twice:

* decode - to the int16 cube the loaders hand over (tf.data: parse -> decode_raw -> reshape);
* whole  - the same plus the cast and log1p on the CPU (the loaders: ``to_model_input`` on each
           batch in the training process, as a CPU-only run does; tf.data: the reference's own
           pipeline). What a GPU node no longer pays on the host is the difference.

Writes CosmoFlow-format files (128^3 x 4 int16, the real sample size, as bench/reader_bench.py
writes them), plain and gzip, then for each format runs, each in its own process:

* slots    - train.py's CPU path now: ``cosmoflow.data.make_loader`` with train.py's arguments
             (``plan_loader``'s prefetch depth, ``--workers`` processes): workers decode each
             sample straight into a reusable shared batch slot
* collate  - the loader train.py used before batch slots (``make_loader(..., slots=False)``):
             workers return each sample, the DataLoader collates the batch into fresh shared
             memory, the training process maps it
* dali-cpu - DALI's CPU pipeline on plain files (cosmoflow.dali_input, ``device_id=None``): its
             reader, the int16 reinterpretation and the batch copy into torch all on the host. On a
             GPU node the reinterpretation runs on the GPU; that pipeline's host share was not
             measured here (no GPU), this column bounds it from above
* tf.data  - the reference: TFRecordDataset -> parse -> decode_raw (-> cast -> log(x + 1)), one
             thread (bench/reader_bench.py's pipeline)

An epoch reads the ``--files`` files ``--repeat`` times over (192 samples by default, from the
page cache: a longer epoch on the same disk space), so what a loader pays once an epoch (DALI
builds a pipeline an epoch for that epoch's order) weighs about as little as in a real epoch of
thousands of samples; that cost is also shown on its own (``start``: the CPU time from asking
for the epoch's iterator to its first batch, per epoch). Each loader reads ``--warmup`` epochs
(workers started, every slot mapped in every worker, files in the page cache), then
``--epochs`` measured ones; the figure is the CPU time of the training process (all its threads)
and of its worker processes over those, per sample, with their minor page faults (tf.data: the
CPU time of its one thread over the best of 2 passes over the same list). CPU time, not wall
time: the cores are shared. ``--runs`` repeats every measurement and prints the median and the
range.
``cores/GPU`` is that CPU time at 224 samples/s per GPU (the MLPerf HPC target rate of one
H100 here). The training process only takes the batches: on a GPU node the collate path also
pins each batch (a copy into page-locked memory, not counted here: no CUDA), the slot path's
slots are pinned once. Nothing here measures GPU samples/s.

    python bench/loader_bench.py [--files 24] [--repeat 8] [--batch-size 4] [--workers 2] [--warmup 1]
                                [--epochs 2] [--runs 1] [--no-tf] [--no-dali]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reader_bench  # noqa: E402  (file generation, the tf.data column, the CPU's name)

ROOT = reader_bench.ROOT
TICK = os.sysconf("SC_CLK_TCK")
TARGET_RATE = 224  # samples/s per GPU


# --- the part run in the workload venv --------------------------------------------------

def _children() -> list[int]:
    pids: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as fh:
                pids.extend(int(p) for p in fh.read().split())
        except OSError:
            continue
    return pids


def _usage() -> tuple[float, int]:
    """(CPU seconds, minor faults) of this process's threads and its live children so far."""
    t = os.times()
    cpu, faults = t.user + t.system, resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for pid in _children():
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        faults += int(fields[7])  # minflt (field 10)
        cpu += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)
    return cpu, faults


def part_loader(folder: str, mode: str, batch_size: int, workers: int, warmup: int, epochs: int,
                whole: int, repeat: int) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "workload"))
    sys.path.insert(1, os.path.join(ROOT, "plugins", "module_utils"))
    import torch
    from cosmoflow import data as cdata
    torch.set_num_threads(1)
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder)) * repeat
    ds = cdata.CosmoFlowDataset(files, cube=128)
    plan = cdata.plan_loader(cdata.cores_available(), 1, gpu=True, workers=workers)
    if mode == "dali-cpu":
        from cosmoflow import dali_input
        loader = dali_input.DaliBatches(files, 128, 4, batch_size, shard=0, num_shards=1, shuffle=True, seed=0,
                                        num_batches=len(ds) // batch_size, device_id=None, threads=plan.workers,
                                        index_dir=folder + "-index", prefetch=plan.prefetch_factor)
    else:
        loader = cdata.make_loader(ds, batch_size, 0, 1, shuffle=True, seed=0, workers=plan.workers,
                                   prefetch_factor=plan.prefetch_factor, pin_memory=False,
                                   pin_threads=plan.pin_threads, slots=mode == "slots")
    samples, buffer, start = 0, None, 0.0
    for epoch in range(warmup + epochs):
        loader.sampler.set_epoch(epoch)
        if epoch == warmup:
            cpu0, faults0, wall0 = *_usage(), time.monotonic()
        before = _usage()[0]
        batches = iter(loader)
        for k, (x, _y) in enumerate(batches):
            if k == 0 and epoch >= warmup:
                start += _usage()[0] - before
            if whole:  # what the GPU does now: cast + log1p, here on the CPU into a reused buffer
                buffer = cdata.to_model_input(x, apply_log=True, out=buffer)
            samples += x.shape[0] if epoch >= warmup else 0
    cpu1, faults1 = _usage()
    wall = time.monotonic() - wall0
    return {"ms": (cpu1 - cpu0) / samples * 1e3, "faults": (faults1 - faults0) / samples, "samples": samples,
            "start_ms": start / epochs * 1e3, "wall_per_sample_ms": wall / samples * 1e3,
            "workers": plan.workers, "prefetch": plan.prefetch_factor}


def part_tf(folder: str, whole: int, repeat: int) -> dict:
    """The reference's tf.data pipeline on one thread, to the int16 cube or (``whole``) with the
    cast and log: CPU time a sample, best of 2 passes after one to warm up."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder)) * repeat
    compression = "GZIP" if files[0].endswith(".gz") else None
    spec = {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([4], tf.float32)}

    def parse(proto):  # mlcommons/hpc cosmoflow data/cosmo.py _parse_data, apply_log=True
        ex = tf.io.parse_single_example(proto, features=spec)
        x = tf.reshape(tf.io.decode_raw(ex["x"], tf.int16), [128, 128, 128, 4])
        if whole:
            x = tf.math.log(tf.cast(x, tf.float32) + tf.constant(1.0))
        return x, ex["y"]

    ds = tf.data.TFRecordDataset(files, compression_type=compression).map(parse, num_parallel_calls=1)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    ds = ds.with_options(options)
    for _ in ds:
        pass
    best = float("inf")
    for _ in range(2):
        t0 = time.process_time()
        n = sum(1 for _ in ds)
        best = min(best, time.process_time() - t0)
    return {"ms": best / n * 1e3, "tf": tf.__version__}


# --- orchestration ------------------------------------------------------------------------

def _run(python: str, *args: str) -> dict:
    env = {**os.environ, **reader_bench.ONE_THREAD}
    proc = subprocess.run([python, os.path.abspath(__file__), "--part", *args], env=env, capture_output=True,
                          text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cell(values: list[float]) -> str:
    """``median (min-max)`` of a measurement's runs, in ms a sample, and cores per GPU."""
    if not values:
        return f"{'-':>22}"
    values = sorted(values)
    mid = _median(values)
    spread = f" ({values[0]:.1f}-{values[-1]:.1f})" if len(values) > 1 else ""
    return f"{mid:6.1f}{spread:13} {mid * TARGET_RATE / 1e3:5.2f}"


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if len(values) % 2 else sum(values[len(values) // 2 - 1:][:2]) / 2


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=24, help="samples per format (one epoch)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (train.py's --workers)")
    p.add_argument("--repeat", type=int, default=8, help="times an epoch reads the files (a longer epoch)")
    p.add_argument("--warmup", type=int, default=1,
                   help="epochs read before measuring (workers started, every slot mapped, files cached)")
    p.add_argument("--epochs", type=int, default=2, help="epochs measured")
    p.add_argument("--runs", type=int, default=1, help="times each measurement runs (median and range shown)")
    p.add_argument("--no-tf", action="store_true", help="skip the tf.data rows")
    p.add_argument("--no-dali", action="store_true", help="skip the DALI CPU pipeline row")
    p.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.part:
        if a.part[0] == "tf":
            print(json.dumps(part_tf(a.part[1], int(a.part[2]), int(a.part[3]))))
        else:
            print(json.dumps(part_loader(a.part[0], a.part[1], *(int(v) for v in a.part[2:8]))))
        return 0
    py = reader_bench.WORKLOAD_PY
    if not os.path.exists(py):
        print(f"{py} is missing: run `make setup`")
        return 1
    cache = os.path.join(ROOT, ".cache")
    work = tempfile.mkdtemp(prefix="loader-bench-", dir=cache if os.path.isdir(cache) else None)
    try:
        t0 = time.perf_counter()
        reader_bench._run_part(py, "generate", work, str(a.files), "128")
        tf_py, why = (None, "skipped (--no-tf)") if a.no_tf else reader_bench.bench_python()
        print(f"{a.files} samples of 128^3 x 4 int16 (16 MiB) per format, read {a.repeat} times an epoch "
              f"({a.files * a.repeat} samples), batch {a.batch_size}, {a.workers} workers (written in "
              f"{time.perf_counter() - t0:.0f}s)")
        print(f"CPU: {reader_bench._cpu_name()}, load average {os.getloadavg()[0]:.1f}; host CPU time a sample "
              f"over {a.epochs} epoch(s) after {a.warmup} warm-up epoch(s), {a.runs} run(s): median (range)")
        print("decode: to the int16 cube (what train.py's loaders hand over; the cast to float32 and log1p "
              "run on the GPU); whole: plus the cast and log1p on the CPU (the reference's tf.data pipeline)")
        print(f"{'format':13} {'path':8} {'decode ms/sample (range)':>24} {'c/GPU':>5} {'whole ms/sample (range)':>23} "
              f"{'c/GPU':>5} {'faults/sample':>13} {'start ms':>8}   (c/GPU: cores per GPU at {TARGET_RATE} "
              f"samples/s; start: CPU per epoch to its first batch, decode)")
        for fmt in ("plain", "gzip"):
            folder = os.path.join(work, fmt)
            rows: dict[str, tuple[list[float], list[float], list[float], list[float]]] = {}
            modes = ("slots", "collate") + (("dali-cpu",) if fmt == "plain" and not a.no_dali else ())
            for mode in modes + (("tf.data",) if tf_py else ()):
                decode, whole, faults, starts = rows.setdefault(mode, ([], [], [], []))
                for _run_number in range(a.runs):
                    for is_whole, into in ((0, decode), (1, whole)):
                        try:
                            if mode == "tf.data":
                                r = _run(tf_py, "tf", folder, str(is_whole), str(a.repeat))
                            else:
                                r = _run(py, folder, mode, str(a.batch_size), str(a.workers), str(a.warmup),
                                         str(a.epochs), str(is_whole), str(a.repeat))
                                if not is_whole:
                                    faults.append(r["faults"])
                                    starts.append(r["start_ms"])
                        except (RuntimeError, subprocess.SubprocessError) as exc:
                            print(f"{fmt:13} {mode:8} failed: {exc}")
                            continue
                        into.append(r["ms"])
                print(f"{fmt:13} {mode:8} {_cell(decode)} {_cell(whole)} "
                      f"{(f'{_median(faults):13.0f}' if faults else ''):>13} "
                      f"{(f'{_median(starts):8.0f}' if starts else ''):>8}", flush=True)
            if "tf.data" in rows and rows["tf.data"][0] and rows["slots"][0]:
                td, tw = rows["tf.data"][:2]
                sd, sw = rows["slots"][:2]
                print(f"{fmt:13} tf.data / slots: decode {_median(td) / _median(sd):.1f}x, whole "
                      f"{_median(tw) / _median(sw):.1f}x")
        print(f"tf.data: {why}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
