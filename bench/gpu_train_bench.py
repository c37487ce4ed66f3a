#!/usr/bin/env python3
"""CosmoFlow training throughput on one GPU: samples/s per GPU, synthetic and from staged files.

Runs the training step of workload/cosmoflow/train.py (the reference model, kernel 3 by default;
int16 cubes cast and log-transformed on the GPU; channels-last 3D, bf16 autocast,
cudnn.benchmark, Keras SGD) for ``--steps`` steps after ``--warmup`` steps, and prints
samples/s per GPU:

* synthetic - an int16 batch already on the GPU: the model's ceiling;
* files     - from ``--data-dir`` (``train/*.tfrecord[.gz]``, e.g. a staged data set) through the
              input path ``--input`` names (workers, prefetch and pinning from the node's cores per
              GPU, as train.py chooses them): what the input pipeline lets through.

The target is 224 samples/s on one H100 (the best MLPerf HPC per-GPU CosmoFlow rate, which
decoded on the GPU). Without a GPU it says so and exits 0.

    .venv-workload/bin/python bench/gpu_train_bench.py [--batch-size 4] [--compile] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "workload"))
# The shared code (package amlhpc) as workload/train.py finds it in the repository.
sys.path.insert(1, os.path.join(ROOT, "plugins", "module_utils"))

TARGET = 224.0


def run(model, opt, batches, steps: int, warmup: int, device, amp) -> float:
    """Samples/s of ``steps`` steps after ``warmup``: the training step, or with ``model`` None
    the input pipeline alone (batches to the device, cast and log1p there)."""
    import torch
    from cosmoflow import data as cdata
    loss_fn = torch.nn.MSELoss()
    it = iter(batches)
    t0 = None
    n = 0
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            t0, n = time.perf_counter(), 0
        x, y = next(it)
        x = cdata.to_model_input(x, device)
        n += x.shape[0]
        if model is None:
            continue
        y = y.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--model-shape", choices=("reference", "v0.7"), default="reference")
    p.add_argument("--no-amp", dest="amp", action="store_false")
    p.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--data-dir", help="a data set with train/*.tfrecord[.gz] (staged files)")
    p.add_argument("--ranks-per-node", type=int, default=None, help="GPUs sharing this node's cores "
                                                                    "(default: the GPUs seen)")
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: train.py's plan)")
    p.add_argument("--pin-threads", type=int, default=None, help="pinning threads (default: train.py's plan)")
    p.add_argument("--input", choices=("slots", "collate", "dali"), default="slots",
                   help="from files: train.py's CPU path (workers decode into pinned batch slots), the "
                        "collating DataLoader before it (pinned by --pin-threads threads), or NVIDIA DALI "
                        "(plain files)")
    p.add_argument("--loader-only", action="store_true",
                   help="from files: time the input pipeline alone (read, pin, copy to the GPU, cast and "
                        "log1p there), no model step")
    a = p.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_train_bench: torch is not installed here (use .venv-workload); nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("gpu_train_bench: no CUDA GPU here; nothing measured (run it where a GPU is lent)")
        return 0
    from cosmoflow import data as cdata
    from cosmoflow.model import SHAPES, CosmoFlow
    from cosmoflow.schedule import KerasSGD

    device = torch.device("cuda", 0)
    torch.backends.cudnn.benchmark = True
    cfg = SHAPES[a.model_shape]
    model = CosmoFlow(cfg).to(device)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last_3d)
    forward = torch.compile(model) if a.compile else model
    opt = KerasSGD(model.parameters(), lr=1e-3, momentum=0.9)
    print(f"{torch.cuda.get_device_name(device)}; model {a.model_shape} (kernel {cfg.kernel_size}), batch "
          f"{a.batch_size}, bf16 {'on' if a.amp else 'off'}, channels-last {'on' if a.channels_last else 'off'}, "
          f"compile {'on' if a.compile else 'off'}; target {TARGET:.0f} samples/s per GPU")

    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randint(0, 40, (a.batch_size, cfg.cube, cfg.cube, cfg.cube, 4), dtype=torch.int16, device=device,
                      generator=gen)
    y = torch.rand(a.batch_size, 4, device=device, generator=gen) * 2 - 1

    def synthetic():
        while True:
            yield x, y

    rate = run(forward, opt, synthetic(), a.steps, a.warmup, device, a.amp)
    print(f"synthetic  {rate:8.1f} samples/s per GPU  ({rate / TARGET:.2f}x target)")
    if a.data_dir:
        files = cdata.list_files(a.data_dir, "train")
        ds = cdata.CosmoFlowDataset(files, cfg.cube)
        plan = cdata.plan_loader(cdata.cores_available(), a.ranks_per_node or torch.cuda.device_count(), True,
                                 workers=a.workers, pin_threads=a.pin_threads)
        need = (a.steps + a.warmup) * a.batch_size
        if a.input == "dali":
            from cosmoflow import dali_input
            why = dali_input.unavailable(files, cuda=True)
            if why:
                print(f"files      --input dali: {why}")
                return 1
            loader = dali_input.DaliBatches(files, cfg.cube, 4, a.batch_size, shard=0, num_shards=1, shuffle=True,
                                            seed=0, num_batches=need // a.batch_size, device_id=0,
                                            threads=plan.workers, prefetch=plan.prefetch_factor)
        else:
            loader = cdata.make_loader(ds, a.batch_size, 0, 1, shuffle=True, workers=plan.workers,
                                       prefetch_factor=plan.prefetch_factor, pin_memory=True,
                                       pin_threads=plan.pin_threads, slots=a.input == "slots")
        if len(ds) < need:
            print(f"files      {len(ds)} samples in {a.data_dir} < {need} needed; give more files or fewer --steps")
            return 1

        def from_files():
            yield from loader

        rate = run(None if a.loader_only else forward, opt, from_files(), a.steps, a.warmup, device, a.amp)
        label = "loader" if a.loader_only else "files "
        print(f"{label}      {rate:8.1f} samples/s per GPU  ({rate / TARGET:.2f}x target; --input {a.input}, "
              f"{plan.workers} workers (DALI: threads) x {plan.prefetch_factor}, {plan.pin_threads} pinning threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
