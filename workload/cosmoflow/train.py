"""Train CosmoFlow with ``torch.distributed``; launch with torchrun or mpirun.

    torchrun --nproc_per_node 8 train.py --data-dir /data/cosmoflow
    mpirun -np 16 -npernode 8 python train.py --account ACCOUNT --container cosmoflow \\
        --stage-dir /data/cosmoflow --sas env:AMLHPC_STAGE_SAS

Staging hook: with ``--account``, the first process of each node (local rank 0) stages that
node's shard of the container into ``--stage-dir`` (:func:`cosmoflow.stage.stage_for_this_node`,
the same planner as the ``azcopy_shards`` action); every process waits until all nodes are
done (a barrier that also carries failures), then training reads from the stage dir.

Outputs (``--output-dir``, default ``./outputs``, which AzureML archives with the run):
``metrics.jsonl`` (one JSON object a line: ``step`` and ``epoch`` records), ``summary.json``,
``mlperf.log`` (``:::MLLOG`` events, HPC 3.0.0 rules), ``checkpoints/last.pt`` and the last
``--keep-checkpoints`` ``checkpoints/epoch_NNN.pt``. Resuming, rank 0 reads the checkpoint and
broadcasts it: every rank continues from the same state even when the folder is not shared.

Model, schedule and optimizer are the current MLPerf HPC reference's (kernel 3; ``--model-shape
v0.7`` for kernel 2): Keras initialisation, the rate set once per epoch, Keras' SGD momentum.
On GPUs: channels-last 3D, bf16 autocast, ``cudnn.benchmark`` (``--compile`` adds
``torch.compile``); the input path (NVIDIA DALI on GPU ranks, else DataLoader workers decoding
into batch slots; ``--input``) hands over int16 cubes that are cast and log-transformed on the GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from amlhpc.recovery import checkpoint_identity
from cosmoflow import ckpt_store
from cosmoflow import dali_input as cdali
from cosmoflow import data as cdata
from cosmoflow import dist as cdist
from cosmoflow import heartbeat
from cosmoflow.mlperf import MLLog
from cosmoflow.model import SHAPES, CosmoFlow, ModelConfig, parameter_count
from cosmoflow.partition import check_partition, fixed_subset
from cosmoflow.sas import resolve_sas, scrub
from cosmoflow.schedule import KerasSGD, learning_rate, parse_decay

__all__ = ["learning_rate", "main", "parse_decay"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Train CosmoFlow (MLPerf HPC) with torch.distributed.")
    d = p.add_argument_group("data")
    d.add_argument("--data-dir", help="data set root holding train/ and validation/ (no staging)")
    d.add_argument("--data-scope", choices=("global", "node"), default="global",
                   help="global: shared storage (BeeOND), every rank sees every file, ranks shard the "
                        "whole set by global rank; node: node-local staging, each node holds its own "
                        "shard and its ranks shard it by local rank. Checked at start-up: the ranks' "
                        "lists must form a partition of the data set")
    d.add_argument("--cube", type=int, default=128, help="cube edge of the samples")
    d.add_argument("--channels", type=int, default=4)
    d.add_argument("--records-per-file", type=int, default=1)
    d.add_argument("--no-log1p", dest="apply_log", action="store_false",
                   help="feed raw counts instead of log1p(counts)")
    d.add_argument("--n-train", type=int, default=0,
                   help="train on this many samples (0: all), the same every epoch: the first files by name, "
                        "split evenly over the nodes in node scope (the reference's rule)")
    d.add_argument("--n-valid", type=int, default=0, help="validate on this many samples (0: all), as --n-train")
    d.add_argument("--uneven-shards", choices=("refuse", "even"), default="refuse",
                   help="node scope with no --n-train/--n-valid and node shards of different sizes: refuse "
                        "(the reference's rule), or even: every node reads as many files as the smallest "
                        "shard, the first by name, and one line says how many stay unread (the playbooks "
                        "set it where the health gate left a node out)")
    d.add_argument("--workers", type=int, default=None,
                   help="DataLoader worker processes per rank (default: from the node's cores per rank)")
    d.add_argument("--prefetch-factor", type=int, default=None, help="batches in flight per worker (default: "
                                                                     "at least 8 batches in flight)")
    d.add_argument("--pin-threads", type=int, default=None, help="threads pinning batches on GPU runs "
                                                                 "(default: 2 with >= 8 cores per GPU, else 1)")
    d.add_argument("--input", choices=("auto", "dali", "cpu"), default="auto",
                   help="auto: NVIDIA DALI on GPU ranks where it is installed and the files are plain "
                        "TFRecords, else the CPU path (one line says why); dali: DALI or stop (its CPU "
                        "pipeline on a rank without a GPU); cpu: DataLoader workers decoding into reusable "
                        "batch slots")
    d.add_argument("--dali-index-dir", default=None,
                   help="where DALI's record indexes are made at first read (default: a node-local "
                        "temporary folder)")
    s = p.add_argument_group("staging (from Azure Blob Storage with azcopy)")
    s.add_argument("--account", help="storage account URL or name: stage before training")
    s.add_argument("--container", help="blob container holding the data set")
    s.add_argument("--prefix", default="", help="blob prefix inside the container")
    s.add_argument("--sas", default="env:AMLHPC_STAGE_SAS",
                   help="where the SAS is: env:VAR, file:PATH, aml-secret:NAME or keyvault:URL/NAME "
                        "(never the token itself)")
    s.add_argument("--stage-dir", help="where each node's shard lands (read by training afterwards)")
    s.add_argument("--shard-mode", choices=("suffix", "balanced"), default="suffix")
    s.add_argument("--azcopy", default="azcopy", help="azcopy executable")
    s.add_argument("--cap-mbps", type=int, default=None, help="azcopy bandwidth cap per node")
    m = p.add_argument_group("model (defaults: the MLPerf HPC reference)")
    m.add_argument("--model-shape", choices=sorted(SHAPES), default="reference",
                   help="reference: kernel 3 (8,907,556 parameters); v0.7: kernel 2 (5,597,604)")
    m.add_argument("--conv-size", type=int, default=32)
    m.add_argument("--kernel-size", type=int, default=None, help="default: the --model-shape's")
    m.add_argument("--conv-layers", type=int, default=5, help="7 gives the original CosmoFlow shape")
    m.add_argument("--fc1-size", type=int, default=128)
    m.add_argument("--fc2-size", type=int, default=64)
    m.add_argument("--dropout", type=float, default=0.5)
    t = p.add_argument_group("training")
    t.add_argument("--epochs", type=int, default=128, help="the reference's n_epochs (configs/cosmo.yaml)")
    t.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    t.add_argument("--batch-size", type=int, default=4, help="samples per rank and step")
    t.add_argument("--lr", type=float, default=0.001, help="base learning rate for --base-batch-size")
    t.add_argument("--base-batch-size", type=int, default=64,
                   help="lr scales linearly with global batch / this")
    t.add_argument("--momentum", type=float, default=0.9, help="Keras SGD momentum (v = m v - lr g; w += v)")
    t.add_argument("--warmup-epochs", type=int, default=4)
    t.add_argument("--decay", default="32:0.25,64:0.125",
                   help="epoch:factor,... multiply the peak lr by factor after that epoch (the reference's rule)")
    t.add_argument("--target-mae", type=float, default=0.124,
                   help="stop after the first epoch whose validation MAE is at most this: the MLPerf HPC target "
                        "(configs/cosmo.yaml target_mae); 0 trains every epoch")
    t.add_argument("--no-target", dest="target_mae", action="store_const", const=0.0,
                   help="train every epoch, whatever the validation MAE (--target-mae 0)")
    t.add_argument("--amp", choices=("auto", "none", "bf16"), default="auto",
                   help="autocast dtype (auto: bf16 on GPUs, none on CPU)")
    t.add_argument("--channels-last", choices=("auto", "on", "off"), default="auto",
                   help="channels_last_3d model and inputs (auto: on GPUs)")
    t.add_argument("--no-cudnn-benchmark", dest="cudnn_benchmark", action="store_false")
    t.add_argument("--compile", action="store_true", help="torch.compile the model")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl with GPUs, else gloo")
    t.add_argument("--collective-timeout", type=float, default=600.0,
                   help="seconds a training or evaluation collective (gradient all-reduce, loss sums) waits "
                        "for the other ranks, and a batch for the DataLoader workers, before this rank stops, "
                        "naming itself and what it waited for (--startup-timeout: those before training)")
    t.add_argument("--startup-timeout", type=float, default=1800.0,
                   help="seconds the start-up collectives wait for the other ranks: the rendezvous (every "
                        "rank started), the staging barrier (the slowest node's staging), the start-up checks")
    heartbeat.add_arguments(t)
    o = p.add_argument_group("outputs")
    o.add_argument("--output-dir", default="outputs")
    o.add_argument("--log-every", type=int, default=10, help="steps between step records")
    o.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints (0: none)")
    o.add_argument("--keep-checkpoints", type=int, default=3, help="epoch checkpoints kept besides last.pt")
    o.add_argument("--mlperf-org", default="amlhpc", help="MLPerf submission_org")
    o.add_argument("--mlperf-platform", default="AzureML", help="MLPerf submission_platform")
    o.add_argument("--mlperf-status", choices=("cloud", "onprem", "preview", "research"), default="cloud")
    o.add_argument("--resume", default="auto", help="checkpoint to resume from; auto: <output-dir>/checkpoints/"
                                                    "last.pt when present, else the --checkpoint-store's newest; "
                                                    "store: the store's newest; none: never")
    ckpt_store.add_arguments(p)
    return p


def account_url(account: str) -> str:
    return account if "://" in account else f"https://{account}.blob.core.windows.net"


class Recorder:
    """metrics.jsonl (+ MLflow inside AzureML) on rank 0; print on rank 0."""

    def __init__(self, output_dir: str, enabled: bool) -> None:
        self.enabled = enabled
        self.file = None
        self.mlflow = None
        if enabled:
            os.makedirs(output_dir, exist_ok=True)
            self.file = open(os.path.join(output_dir, "metrics.jsonl"), "a", encoding="utf-8")  # noqa: SIM115
            if os.environ.get("MLFLOW_TRACKING_URI"):
                try:
                    import mlflow  # azureml-mlflow in the job image points it at the run
                    self.mlflow = mlflow
                except ImportError:
                    pass

    def log(self, message: str) -> None:
        if self.enabled:
            print(f"[cosmoflow] {message}", flush=True)

    def record(self, kind: str, step: int, **values: Any) -> None:
        if not self.enabled:
            return
        values.pop("step", None)
        self.file.write(json.dumps({"kind": kind, "step": step, "time": time.time(), **values}) + "\n")
        self.file.flush()
        if self.mlflow is not None:
            numeric = {f"{kind}_{k}": float(v) for k, v in values.items() if isinstance(v, (int, float))}
            self.mlflow.log_metrics(numeric, step=step)

    def close(self) -> None:
        if self.file:
            self.file.close()


def stage(args: argparse.Namespace, layout: cdist.Layout, device: torch.device, rec: Recorder) -> str:
    """Run the staging hook when asked to (local rank 0 of each node), then a barrier."""
    if not args.account:
        return args.data_dir
    if not (args.container and args.stage_dir):
        raise SystemExit("--account needs --container and --stage-dir")
    ok, sas = True, None
    if layout.local_rank == 0:
        try:
            from cosmoflow.stage import stage_for_this_node  # the staging helper's module
            sas = resolve_sas(args.sas)
            t0 = time.monotonic()
            report = stage_for_this_node(
                account_url=account_url(args.account), container=args.container, stage_dir=args.stage_dir,
                sas=sas, node_rank=layout.node_rank, num_nodes=layout.num_nodes, shard_mode=args.shard_mode,
                prefix=args.prefix, azcopy=args.azcopy, cap_mbps=args.cap_mbps,
                shared=args.data_scope == "global",
                progress=lambda m: print(f"[stage node {layout.node_rank}] {scrub(str(m), sas)}", flush=True))
            print(f"[stage node {layout.node_rank}] done in {time.monotonic() - t0:.1f}s: "
                  f"{scrub(json.dumps(report, default=str), sas)}", flush=True)
        except Exception as exc:  # reported, then every rank stops together
            ok = False
            print(f"[stage node {layout.node_rank}] FAILED: {type(exc).__name__}: {scrub(str(exc), sas)}",
                  file=sys.stderr, flush=True)
    if not cdist.all_ok(ok, device):
        raise SystemExit("staging failed on at least one node (see its [stage node N] lines)")
    rec.log(f"staging done on {layout.num_nodes} node(s); reading {args.stage_dir}")
    return args.stage_dir


def _all_gather(obj: Any) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def loaders(args: argparse.Namespace, data_dir: str, layout: cdist.Layout, device: torch.device):
    """(train loader, validation loader, samples per epoch of each over all ranks)."""
    if args.data_scope == "global":
        shard, shards = layout.rank, layout.world_size
    else:
        shard, shards = layout.local_rank, layout.local_world_size
    plan = cdata.plan_loader(cdata.cores_available(), layout.local_world_size, device.type == "cuda",
                             workers=args.workers, prefetch_factor=args.prefetch_factor,
                             pin_threads=args.pin_threads)
    out, samples = [], []
    why_not = None  # why the training split does not read with DALI
    for split, limit, shuffle in (("train", args.n_train, True), ("validation", args.n_valid, False)):
        files = cdata.list_files(data_dir, split)
        problem = check_partition(split, [os.path.basename(f) for f in files], args.data_scope,
                                  layout.node_rank, layout.local_rank, _all_gather)
        if problem:
            raise SystemExit(problem)
        files, problem = fixed_subset(split, files, args.data_scope, layout.node_rank, limit, args.records_per_file,
                                      _all_gather, even=args.uneven_shards == "even",
                                      note=lambda line: layout.rank == 0 and print(f"[cosmoflow] {line}", flush=True))
        if problem:
            raise SystemExit(problem)
        ds = cdata.CosmoFlowDataset(files, args.cube, args.channels, args.apply_log, args.records_per_file)
        size = min(len(ds), limit) if limit else len(ds)
        per_rank = torch.tensor([size // shards], dtype=torch.int64, device=device)
        dist.all_reduce(per_rank, op=dist.ReduceOp.MIN)  # same step count on every rank
        per_rank_n = int(per_rank.item()) // args.batch_size * args.batch_size
        if per_rank_n == 0:
            raise SystemExit(f"{split}: {size} samples over {shards} ranks leave fewer than one batch of "
                             f"{args.batch_size} per rank")
        if split == "train":
            why_not = "--input cpu" if args.input == "cpu" else cdali.unavailable(
                files, device.type == "cuda", need_gpu=args.input == "auto")
            if why_not and args.input == "dali":
                raise SystemExit(f"--input dali: {why_not}; use --input auto or cpu")
        if split == "train" and why_not is None:
            used = files[:-(-size // args.records_per_file)]  # --n-train: the first files
            loader = cdali.DaliBatches(used, args.cube, args.channels, args.batch_size, shard=shard, num_shards=shards,
                                       shuffle=shuffle, seed=args.seed, num_batches=per_rank_n // args.batch_size,
                                       device_id=device.index if device.type == "cuda" else None,
                                       threads=plan.workers, index_dir=args.dali_index_dir,
                                       prefetch=plan.prefetch_factor, records_per_file=args.records_per_file)
        else:  # validation always: the same samples every epoch, in order
            loader = cdata.make_loader(ds, args.batch_size, shard, shards, shuffle=shuffle, seed=args.seed,
                                       num_samples=per_rank_n, workers=plan.workers,
                                       prefetch_factor=plan.prefetch_factor, pin_memory=device.type == "cuda",
                                       pin_threads=plan.pin_threads)
        out.append(loader)
        samples.append(per_rank_n * layout.world_size)
    if layout.rank == 0:
        dali = "NVIDIA DALI" if device.type == "cuda" else "NVIDIA DALI's CPU pipeline (--input dali, no GPU)"
        path = f"{dali} for training, the CPU path for validation" if why_not is None else f"the CPU path ({why_not})"
        print(f"[cosmoflow] input: {path}", flush=True)
    return out[0], out[1], samples, plan


class Step:
    """What runs on the device: int16 -> float32 log1p there, then the model, with the speed
    switches (channels-last 3D, autocast dtype) applied to inputs too."""

    def __init__(self, device: torch.device, apply_log: bool, amp_dtype: torch.dtype | None,
                 channels_last: bool) -> None:
        self.device, self.apply_log = device, apply_log
        self.amp_dtype, self.channels_last = amp_dtype, channels_last
        self._buffer: torch.Tensor | None = None

    def inputs(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # On CPU the float32 buffer is reused from step to step (the step before is done with it);
        # CUDA's caching allocator reuses memory by itself.
        reuse = self._buffer if self.device.type == "cpu" else None
        x = cdata.to_model_input(x, self.device, self.apply_log, out=reuse)
        if self.device.type == "cpu":
            self._buffer = x
        # (N, D, H, W, C) is already channels_last_3d for the model's (N, C, D, H, W) view.
        return x, y.to(self.device, non_blocking=True)

    def autocast(self):
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                              enabled=self.amp_dtype is not None)


def evaluate(model: nn.Module, loader, step: Step, collectives: cdist.Collectives | None = None,
             watchdog: cdist.Watchdog | None = None) -> tuple[float, float, int]:
    """MSE and MAE over every rank's validation samples (sums all-reduced in ``collectives``' group;
    each batch fetched under ``watchdog``)."""
    device = step.device
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # squared error, abs error, values
    with torch.no_grad(), step.autocast():
        for x, y in loader if watchdog is None else watchdog.batches(loader, "validation batch"):
            x, y = step.inputs(x, y)
            diff = model(x).float() - y
            sums += torch.stack([diff.pow(2).sum(), diff.abs().sum(),
                                 torch.tensor(float(y.numel()), device=device)]).double()
    if collectives is None:
        dist.all_reduce(sums)
    else:
        with collectives("the all-reduce of the validation errors"):
            dist.all_reduce(sums, group=collectives.group)
    sse, sae, n = sums.tolist()
    model.train()
    return sse / n, sae / n, int(n)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.account and not args.data_dir:
        raise SystemExit("give --data-dir, or --account/--container/--stage-dir to stage first")
    try:
        layout, device, startup, steps = cdist.init(args.backend, args.startup_timeout, args.collective_timeout)
    except cdist.CollectiveError as exc:
        cdist.finish()
        raise SystemExit(str(exc)) from None
    rec = Recorder(args.output_dir, layout.rank == 0)
    mllog = MLLog(os.path.join(args.output_dir, "mlperf.log") if layout.rank == 0 else None)
    watchdog = cdist.Watchdog(layout, args.collective_timeout)
    beat = None
    try:
        beat = heartbeat.for_training(args.node_loss_timeout, layout, startup, steps, cdist.rendezvous()[0],
                                      os.path.join(args.output_dir, "node-loss.json"), mllog, watchdog)
        return _train(args, layout, device, rec, mllog, steps, watchdog)
    except cdist.CollectiveError as exc:
        if beat is not None and "lost its connection" in str(exc):
            beat.settle()  # a rank that died closed its sockets: the heartbeat names its node first
        raise SystemExit(str(exc)) from None
    except RuntimeError as exc:  # a start-up collective outside the named ones (partition check, staging)
        message = cdist.collective_failure(exc, cdist.call_site(exc), layout.rank, layout.world_size,
                                           startup.timeout_s, startup.flag)
        if message is None:
            raise
        raise SystemExit(message) from None
    finally:
        if beat is not None:  # ended by an error: the other ranks are told and end too
            beat.close(sys.exc_info()[1])
        watchdog.close()
        mllog.close()
        rec.close()
        cdist.finish()


def speed_switches(args: argparse.Namespace, device: torch.device) -> tuple[torch.dtype | None, bool]:
    """(autocast dtype or None, channels-last) from the flags; cudnn.benchmark set on CUDA."""
    cuda = device.type == "cuda"
    amp = {"bf16": torch.bfloat16, "none": None}.get(args.amp, torch.bfloat16 if cuda else None)
    channels_last = args.channels_last == "on" or (args.channels_last == "auto" and cuda)
    if cuda:
        torch.backends.cudnn.benchmark = args.cudnn_benchmark
    return amp, channels_last


def data_fingerprint(data_dir: str, scope: str, layout: cdist.Layout) -> str:
    """Collective: the data set's fingerprint (``checkpoint_identity.fingerprint``) from every node's
    files, the same however they are sharded (node scope: one rank a node; global: rank 0)."""
    names = [f"{split}/{os.path.basename(f)}" for split in cdata.SPLITS for f in cdata.list_files(data_dir, split)]
    mine = checkpoint_identity.name_sum(names) if (layout.local_rank == 0 if scope == "node" else layout.rank == 0) else (0, 0)
    return checkpoint_identity.fingerprint(_all_gather(mine))


def load_resume(args: argparse.Namespace, ckpt_dir: str, layout: cdist.Layout,
                store: ckpt_store.CheckpointStore | None = None, log=print,
                identity: dict | None = None) -> dict | None:
    """Rank 0 reads the checkpoint (if any; from the output folder, else the checkpoint store)
    and broadcasts it: every rank resumes from the same state, whether or not the checkpoint
    folder is shared. A checkpoint of another run (``identity``) is refused on every rank, in
    one sentence, before training starts."""
    payload: list[Any] = [None]
    if layout.rank == 0:
        try:
            path, source = ckpt_store.resume_path(args.resume, ckpt_dir, store, log)
            if path:
                if os.path.exists(path):
                    state = torch.load(path, map_location="cpu", weights_only=False)
                    problem = checkpoint_identity.identity_problem(state.get("identity"), identity or {}, f"checkpoint {path}")
                    if problem and identity:
                        raise SystemExit(f"--resume {args.resume}: {problem}")
                    payload = [(path, state, source)]
                else:
                    payload = [(path, None, source)]
        except SystemExit as exc:  # every rank ends with the sentence, none waits for rank 0
            payload = [("error", str(exc.code), "")]
    dist.broadcast_object_list(payload, src=0)
    if payload[0] is None:
        return None
    if payload[0][0] == "error":
        raise SystemExit(payload[0][1])
    path, state, source = payload[0]
    if state is None:
        raise SystemExit(f"--resume {path}: no such checkpoint on rank 0")
    state["path"], state["source"] = path, source
    return state


def _train(args: argparse.Namespace, layout: cdist.Layout, device: torch.device, rec: Recorder,
           mllog: MLLog, steps: cdist.Collectives, watchdog: cdist.Watchdog) -> int:
    torch.manual_seed(args.seed)
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // layout.local_world_size))
    mllog.event("cache_clear", True)
    mllog.start("init_start")
    rec.log(f"{layout.world_size} process(es) on {layout.num_nodes} node(s) via {layout.launcher}, "
            f"backend {dist.get_backend()}, device {device.type}")
    for key, value in (("submission_benchmark", "cosmoflow"), ("submission_org", args.mlperf_org),
                       ("submission_division", "closed"), ("submission_status", args.mlperf_status),
                       ("submission_platform", args.mlperf_platform), ("number_of_nodes", layout.num_nodes),
                       ("accelerators_per_node", layout.local_world_size if device.type == "cuda" else 0),
                       ("number_of_ranks", layout.world_size), ("seed", args.seed)):
        mllog.event(key, value)
    # As the reference: init ends here, staging and data loading run inside the timed run.
    mllog.end("init_stop")
    mllog.start("run_start")
    if args.account:
        mllog.start("staging_start")
    data_dir = stage(args, layout, device, rec)
    if args.account:
        mllog.end("staging_stop")
    train_loader, valid_loader, (n_train, n_valid), plan = loaders(args, data_dir, layout, device)

    shape = SHAPES[args.model_shape]
    config = ModelConfig(cube=args.cube, channels=args.channels, conv_size=args.conv_size,
                         kernel_size=args.kernel_size or shape.kernel_size, n_conv_layers=args.conv_layers,
                         fc1_size=args.fc1_size, fc2_size=args.fc2_size, dropout=args.dropout)
    amp_dtype, channels_last = speed_switches(args, device)
    step_fn = Step(device, args.apply_log, amp_dtype, channels_last)
    model = CosmoFlow(config).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last_3d)
    global_batch = args.batch_size * layout.world_size
    scale = global_batch / args.base_batch_size
    peak_lr = args.lr * scale
    decay = parse_decay(args.decay)
    optimizer = KerasSGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.MSELoss()

    ckpt_dir = os.path.join(args.output_dir, "checkpoints")
    start_epoch, step = 0, 0
    # The run's identity: its name (the store folder's, submit_name), the model, the data set.
    name = (args.checkpoint_store.rstrip("/").rsplit("/", 1)[-1] if args.checkpoint_store
            else os.path.basename(os.path.abspath(args.output_dir)))
    run_identity = checkpoint_identity.identity(name, config.to_dict(),
                                                data_fingerprint(data_dir, args.data_scope, layout),
                                                world_size=layout.world_size, global_batch=global_batch)
    store = (ckpt_store.from_args(args, rec.log, os.environ.get("AZUREML_RUN_ID", ""), run_identity)
             if layout.rank == 0 else None)
    state = load_resume(args, ckpt_dir, layout, store, rec.log, run_identity)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, step = state["epoch"] + 1, state["step"]
        rec.log(f"resumed from {state['path']} (rank 0's, broadcast) at epoch {start_epoch}")
        done_already = checkpoint_identity.nothing_to_train(int(state["epoch"]), args.epochs, f"checkpoint {state['path']}")
        if done_already:  # said in one sentence; the run did what it was asked
            rec.log(done_already)
            if layout.rank == 0:
                with open(os.path.join(args.output_dir, "summary.json"), "w", encoding="utf-8") as f:
                    json.dump({"epoch": int(state["epoch"]), "step": step, "nothing_to_train": done_already,
                               "world_size": layout.world_size, "num_nodes": layout.num_nodes}, f, indent=2)
            return 0
    with steps("the broadcast of the initial weights (DDP set-up)"):
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                      process_group=steps.group)
    forward = torch.compile(ddp) if args.compile else ddp

    for key, value in (("global_batch_size", global_batch), ("train_samples", n_train), ("eval_samples", n_valid),
                       ("opt_name", "sgd"), ("opt_base_learning_rate", peak_lr),
                       ("opt_learning_rate_warmup_epochs", args.warmup_epochs),
                       ("opt_learning_rate_warmup_factor", scale),
                       ("opt_learning_rate_decay_boundary_epochs", [int(e) for e, _unused in decay]),
                       ("opt_learning_rate_decay_factor", max((f for _unused, f in decay), default=1.0)),
                       ("dropout", args.dropout), ("opt_weight_decay", 0.0),
                       ("gradient_accumulation_steps", 1)):
        mllog.event(key, value)
    rec.log(f"model {parameter_count(model):,} parameters (kernel {config.kernel_size}); {len(train_loader)} train / "
            f"{len(valid_loader)} validation steps per epoch; global batch {global_batch}, peak lr {peak_lr:g}; "
            f"{plan.workers} workers x {plan.prefetch_factor} batches, autocast "
            f"{amp_dtype or 'off'}, channels-last {'on' if channels_last else 'off'}; "
            + (f"stops at validation MAE <= {args.target_mae:g}" if args.target_mae else "no target: every epoch"))
    rec.record("config", step, params=parameter_count(model), world_size=layout.world_size,
               num_nodes=layout.num_nodes, global_batch=global_batch, peak_lr=peak_lr, model=config.to_dict(),
               loader=plan.__dict__)
    summary: dict[str, Any] = {}
    done = False
    if layout.rank == 0:  # the MLPerf log and metrics say where training resumed and what it lost
        ckpt_store.note_resume(state, state.get("source", "") if state else "", store, mllog, rec)
    for epoch in range(start_epoch, args.epochs):
        train_loader.sampler.set_epoch(epoch)
        with watchdog.waiting(f"the DataLoader workers to start epoch {epoch}"):
            batches = iter(train_loader)  # the first iterator of persistent workers draws from the RNG...
        torch.manual_seed(args.seed + 1000 * (epoch + 1))  # ...so seed after it: dropout resumes identically
        lr = learning_rate(epoch, peak_lr, args.lr, args.warmup_epochs, decay)
        for group in optimizer.param_groups:
            group["lr"] = lr
        mllog.start("epoch_start", epoch_num=epoch + 1)
        t0 = time.monotonic()
        loss_sum = torch.zeros(2, dtype=torch.float64, device=device)
        for x, y in watchdog.batches(batches, "training batch"):
            x, y = step_fn.inputs(x, y)
            with step_fn.autocast():
                loss = loss_fn(forward(x).float(), y)
            optimizer.zero_grad(set_to_none=True)
            with steps(f"the gradient all-reduce of step {step + 1}"):
                loss.backward()
            optimizer.step()
            step += 1
            loss_sum += torch.stack([loss.detach().double(), torch.ones((), dtype=torch.float64, device=device)])
            if args.log_every and step % args.log_every == 0:
                mean = loss.detach().clone()
                with steps(f"the all-reduce of step {step}'s loss"):
                    dist.all_reduce(mean, group=steps.group)
                rec.record("step", step, epoch=epoch, loss=float(mean) / layout.world_size, lr=lr)
            if args.max_steps and step >= args.max_steps:
                done = True
                break
        with steps(f"the all-reduce of epoch {epoch}'s loss"):
            dist.all_reduce(loss_sum, group=steps.group)
        train_time = time.monotonic() - t0
        steps_done = int(loss_sum[1].item()) // layout.world_size
        mllog.end("epoch_stop", epoch_num=epoch + 1)
        mllog.start("eval_start", epoch_num=epoch + 1)
        val_loss, val_mae, _unused = evaluate(forward, valid_loader, step_fn, steps, watchdog)
        mllog.event("eval_error", val_mae, epoch_num=epoch + 1)
        mllog.end("eval_stop", epoch_num=epoch + 1)
        summary = {"epoch": epoch, "step": step, "train_loss": float(loss_sum[0] / loss_sum[1]),
                   "val_loss": val_loss, "val_mae": val_mae, "lr": lr, "epoch_time_s": train_time,
                   "samples_per_s": steps_done * global_batch / train_time if train_time else 0.0}
        rec.record("epoch", step, **{k: v for k, v in summary.items() if k != "step"})
        rec.log(f"epoch {epoch}: train loss {summary['train_loss']:.4f}, val loss {val_loss:.4f}, "
                f"val MAE {val_mae:.4f}, {summary['samples_per_s']:.1f} samples/s")
        if layout.rank == 0 and args.checkpoint_every and (epoch + 1) % args.checkpoint_every == 0:
            save_checkpoint(ckpt_dir, epoch, step, model, optimizer, config, keep=args.keep_checkpoints,
                            identity=run_identity)
            if store is not None:  # a copy off the node, in the background
                store.put(os.path.join(ckpt_dir, "last.pt"), epoch, step)
        if args.target_mae and val_mae <= args.target_mae:
            rec.log(f"target MAE {args.target_mae} reached at epoch {epoch}")
            summary["target_reached"] = True
            done = True
        if done or not math.isfinite(summary["train_loss"]):
            break
    ok = bool(summary) and math.isfinite(summary["train_loss"])
    if store is not None:
        ckpt_store.finish(store, args.checkpoint_store_wait, os.path.join(args.output_dir, "checkpoint-store.json"),
                          rec.log)
    mllog.end("run_stop", status="success" if ok and summary.get("target_reached") else "aborted")
    if layout.rank == 0:
        with open(os.path.join(args.output_dir, "summary.json"), "w", encoding="utf-8") as f:
            json.dump({**summary, "world_size": layout.world_size, "num_nodes": layout.num_nodes}, f, indent=2)
    return 0 if ok else 1


def save_checkpoint(ckpt_dir: str, epoch: int, step: int, model: nn.Module, optimizer, config: ModelConfig,
                    keep: int = 3, identity: dict | None = None) -> None:
    """``epoch_NNN.pt`` and ``last.pt`` (written to a temporary name, then renamed), each with its
    SHA-256 beside it (``.sha256``, written after it: resuming loads only a checkpoint that
    matches it); the run's ``identity`` inside; only the newest ``keep`` epoch checkpoints stay."""
    os.makedirs(ckpt_dir, exist_ok=True)
    state = {"epoch": epoch, "step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "config": config.to_dict(), "identity": identity or {}}
    path = os.path.join(ckpt_dir, f"epoch_{epoch:03d}.pt")
    last = os.path.join(ckpt_dir, "last.pt")
    for target in (path, last):
        torch.save(state, target + ".tmp")
        os.replace(target + ".tmp", target)
        ckpt_store.write_digest(target)
    epochs = sorted(f for f in os.listdir(ckpt_dir) if f.startswith("epoch_") and f.endswith(".pt"))
    for old in epochs[:-keep] if keep > 0 else epochs:
        os.remove(os.path.join(ckpt_dir, old))
        with contextlib.suppress(OSError):
            os.remove(os.path.join(ckpt_dir, old + ckpt_store.DIGEST))


if __name__ == "__main__":
    sys.exit(main())
