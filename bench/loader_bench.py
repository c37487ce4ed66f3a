#!/usr/bin/env python3
"""Host CPU per sample through the real input loader, the way train.py builds it, beside the
loader before batch slots and the MLPerf reference's tf.data pipeline, in one run.

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
* tf.data  - the reference: TFRecordDataset -> parse -> decode_raw -> cast -> log(x + 1), one
             thread (bench/reader_bench.py's column; it also does the cast and log on the CPU,
             which the two loaders leave to the GPU)

Each loader reads ``--warmup`` epochs (workers started, every slot mapped in every worker, files
in the page cache), then ``--epochs`` measured ones; the figure is the CPU time of the training
process (all its threads) and of its worker processes over those, per sample, with their minor
page faults.
``cores/GPU`` is that CPU time at 224 samples/s per GPU (the MLPerf HPC target rate of one
H100 here). The training process only takes the batches: on a GPU node the collate path also
pins each batch (a copy into page-locked memory, not counted here: no CUDA), the slot path's
slots are pinned once. Nothing here measures GPU samples/s.

    python bench/loader_bench.py [--files 24] [--batch-size 4] [--workers 2] [--warmup 2] [--epochs 2]
                                [--no-tf] [--no-dali]
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


def part_loader(folder: str, mode: str, batch_size: int, workers: int, warmup: int, epochs: int) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "workload"))
    sys.path.insert(1, os.path.join(ROOT, "plugins", "module_utils"))
    import torch
    from cosmoflow import data as cdata
    torch.set_num_threads(1)
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
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
    samples = 0
    for epoch in range(warmup + epochs):
        loader.sampler.set_epoch(epoch)
        if epoch == warmup:
            cpu0, faults0, wall0 = *_usage(), time.monotonic()
        for x, _y in loader:
            samples += x.shape[0] if epoch >= warmup else 0
    cpu1, faults1 = _usage()
    wall = time.monotonic() - wall0
    return {"ms": (cpu1 - cpu0) / samples * 1e3, "faults": (faults1 - faults0) / samples, "samples": samples,
            "wall_per_sample_ms": wall / samples * 1e3, "workers": plan.workers,
            "prefetch": plan.prefetch_factor}


# --- orchestration ------------------------------------------------------------------------

def _run(python: str, *args: str) -> dict:
    env = {**os.environ, **reader_bench.ONE_THREAD}
    proc = subprocess.run([python, os.path.abspath(__file__), "--part", *args], env=env, capture_output=True,
                          text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=24, help="samples per format (one epoch)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (train.py's --workers)")
    p.add_argument("--warmup", type=int, default=2,
                   help="epochs read before measuring (workers started, every slot mapped, files cached)")
    p.add_argument("--epochs", type=int, default=2, help="epochs measured")
    p.add_argument("--no-tf", action="store_true", help="skip the tf.data column")
    p.add_argument("--no-dali", action="store_true", help="skip the DALI CPU pipeline column")
    p.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.part:
        print(json.dumps(part_loader(a.part[0], a.part[1], *(int(v) for v in a.part[2:6]))))
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
        print(f"{a.files} samples of 128^3 x 4 int16 (16 MiB) per format, batch {a.batch_size}, "
              f"{a.workers} workers (written in {time.perf_counter() - t0:.0f}s)")
        print(f"CPU: {reader_bench._cpu_name()}, load average {os.getloadavg()[0]:.1f}; host CPU time per "
              f"sample over {a.epochs} epoch(s) after {a.warmup} warm-up epoch(s)")
        print(f"{'format':13} {'path':8} {'ms/sample':>9} {'cores/GPU':>9} {'faults/sample':>13}  (cores/GPU at "
              f"{TARGET_RATE} samples/s)")
        for fmt in ("plain", "gzip"):
            folder = os.path.join(work, fmt)
            for mode in ("slots", "collate") + (("dali-cpu",) if fmt == "plain" and not a.no_dali else ()):
                try:
                    r = _run(py, folder, mode, str(a.batch_size), str(a.workers), str(a.warmup), str(a.epochs))
                except (RuntimeError, subprocess.SubprocessError) as exc:
                    print(f"{fmt:13} {mode:8} failed: {exc}")
                    continue
                print(f"{fmt:13} {mode:8} {r['ms']:9.1f} {r['ms'] * TARGET_RATE / 1e3:9.2f} {r['faults']:13.0f}")
            if tf_py:
                try:
                    ref = reader_bench._run_part(tf_py, "tf", folder, "128", "2")
                    ms = 1e3 / ref["samples_per_s"]
                    print(f"{fmt:13} {'tf.data':8} {ms:9.1f} {ms * TARGET_RATE / 1e3:9.2f} {'':>13}  "
                          f"(with cast + log1p)")
                except (RuntimeError, subprocess.SubprocessError) as exc:
                    why = f"tf.data failed: {exc}"
        print(f"tf.data: {why}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
