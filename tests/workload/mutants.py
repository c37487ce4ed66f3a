"""Break the training on purpose and see which workload tests go red.

    .venv-workload/bin/python tests/workload/mutants.py [--list] [--only TEXT] [--tier]

Each mutant is one textual change to a copy of ``workload/`` (the checkout is not touched); its
tests then run against the copy: the distributed-training mutants against
``tests/workload/test_two_nodes.py``, those of what is trained (issue 44: optimizer, input
transform, dropout, MAE, early stop, DALI order) against the tests that watch it
(``test_what_is_trained.py``, ``test_train.py``, ``test_dali_input.py``); ``--tier`` runs the
whole tier for every mutant instead. Prints a Markdown table row per mutant: the tests that
failed, or SURVIVED; first the code as it is, which must pass. Exits 1 when a mutant survives.
``--list`` shows the mutants without running them; ``--only TEXT`` runs those whose name holds TEXT.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = "workload/cosmoflow/train.py"
SCHEDULE = "workload/cosmoflow/schedule.py"
MODEL = "workload/cosmoflow/model.py"
DALI = "workload/cosmoflow/dali_input.py"
TWO_NODES = ["tests/workload/test_two_nodes.py"]
TRAINED = ["tests/workload/test_what_is_trained.py", "tests/workload/test_train.py",
           "tests/workload/test_dali_input.py"]

# (name, file, [(text, replacement), ...], tests): each text must occur exactly once.
MUTANTS = [
    # Distributed training (issue 36): invisible on one node.
    ("no gradient all-reduce (forward through the bare model)", TRAIN,
     [("forward = torch.compile(ddp) if args.compile else ddp",
       "forward = torch.compile(model) if args.compile else model")], TWO_NODES),
    ("gradients summed instead of averaged", TRAIN,
     [("loss.backward()", "(loss * layout.world_size).backward()")], TWO_NODES),
    ("set_epoch called after iter()", TRAIN,
     [("        train_loader.sampler.set_epoch(epoch)\n", ""),
      ("            batches = iter(train_loader)  #",
       "            batches = iter(train_loader)\n        train_loader.sampler.set_epoch(epoch)  #")], TWO_NODES),
    ("MIN all-reduce of the step count removed", TRAIN,
     [("dist.all_reduce(per_rank, op=dist.ReduceOp.MIN)", "pass")], TWO_NODES),
    ("node scope shards by global rank", TRAIN,
     [("shard, shards = layout.local_rank, layout.local_world_size",
       "shard, shards = layout.rank, layout.local_world_size")], TWO_NODES),
    ("global scope shards by local rank", TRAIN,
     [("shard, shards = layout.rank, layout.world_size",
       "shard, shards = layout.local_rank, layout.world_size")], TWO_NODES),
    # The optimizer.
    ("momentum never reaches the optimizer", TRAIN,
     [("KerasSGD(model.parameters(), lr=args.lr, momentum=args.momentum)",
       "KerasSGD(model.parameters(), lr=args.lr)")], TRAINED),
    ("the epoch's rate never reaches the optimizer", TRAIN,
     [('            group["lr"] = lr\n', '            group["lr"] = args.lr\n')], TRAINED),
    ("no warm-up", TRAIN,
     [("lr = learning_rate(epoch, peak_lr, args.lr, args.warmup_epochs, decay)",
       "lr = learning_rate(epoch, peak_lr, args.lr, 0, decay)")], TRAINED),
    ("decay from the boundary epoch itself", SCHEDULE,
     [("if at <= e < epoch:", "if at <= e <= epoch:")], TRAINED),
    ("weight decay in the update", SCHEDULE,
     [('torch._foreach_add_(bufs, grads, alpha=-group["lr"])',
       'torch._foreach_add_(bufs, torch._foreach_add(grads, params, alpha=1e-3), alpha=-group["lr"])')], TRAINED),
    ("PyTorch's momentum (the rate outside the velocity)", SCHEDULE,
     [('torch._foreach_add_(bufs, grads, alpha=-group["lr"])', "torch._foreach_add_(bufs, grads, alpha=-1.0)"),
      ("torch._foreach_add_(params, bufs)", 'torch._foreach_add_(params, bufs, alpha=group["lr"])')], TRAINED),
    ("a new optimizer every epoch (momentum buffers lost)", TRAIN,
     [('        mllog.start("epoch_start", epoch_num=epoch + 1)\n',
       '        optimizer = KerasSGD(model.parameters(), lr=lr, momentum=args.momentum)\n'
       '        mllog.start("epoch_start", epoch_num=epoch + 1)\n')], TRAINED),
    # The input transform.
    ("log1p applied twice (on the device)", TRAIN,
     [("        return x, y.to(self.device, non_blocking=True)",
       "        return x.log1p(), y.to(self.device, non_blocking=True)")], TRAINED),
    ("log1p never applied", TRAIN,
     [("Step(device, args.apply_log, amp_dtype, channels_last)", "Step(device, False, amp_dtype, channels_last)")],
     TRAINED),
    ("log1p in the DataLoader workers too", TRAIN,
     [("cdata.CosmoFlowDataset(files, args.cube, args.channels, args.apply_log, args.records_per_file)",
       "cdata.CosmoFlowDataset(files, args.cube, args.channels, args.apply_log, args.records_per_file, raw=False)")],
     TRAINED),
    ("log in DALI's pipeline too", DALI,
     [("            return fn.reinterpret(x, dtype=types.INT16, shape=shape), y",
       "            from nvidia.dali import math as dmath\n"
       "            return dmath.log(fn.cast(fn.reinterpret(x, dtype=types.INT16, shape=shape), "
       "dtype=types.FLOAT) + 1.0), y")], TRAINED),
    # Dropout.
    ("the configured dropout never reaches the model", TRAIN,
     [("fc2_size=args.fc2_size, dropout=args.dropout)", "fc2_size=args.fc2_size)")], TRAINED),
    ("dropout on in evaluation", TRAIN,
     [("    model.eval()\n", "    model.train()\n")], TRAINED),
    ("dropout off after the first evaluation", TRAIN,
     [("    model.train()\n    return sse / n", "    return sse / n")], TRAINED),
    ("no dropout after the first dense layer", MODEL,
     [("nn.Dropout(config.dropout),\n            nn.Linear(config.fc1_size",
       "nn.Linear(config.fc1_size")], TRAINED),
    # The MAE.
    ("MAE over samples, not values", TRAIN,
     [("torch.tensor(float(y.numel()), device=device)", "torch.tensor(float(y.shape[0]), device=device)")], TRAINED),
    ("MAE summed from batch means", TRAIN,
     [("diff.abs().sum()", "diff.abs().mean()")], TRAINED),
    ("eval_error logs the validation loss", TRAIN,
     [('mllog.event("eval_error", val_mae,', 'mllog.event("eval_error", val_loss,')], TRAINED),
    # The early stop.
    ("early stop on the validation loss", TRAIN,
     [("if args.target_mae and val_mae <= args.target_mae:", "if args.target_mae and val_loss <= args.target_mae:")],
     TRAINED),
    ("early stop on the training loss", TRAIN,
     [("if args.target_mae and val_mae <= args.target_mae:",
       'if args.target_mae and summary["train_loss"] <= args.target_mae:')], TRAINED),
    ("early stop only below the target", TRAIN,
     [("if args.target_mae and val_mae <= args.target_mae:", "if args.target_mae and val_mae < args.target_mae:")],
     TRAINED),
    ("no MLPerf target by default", TRAIN,
     [('"--target-mae", type=float, default=0.124,', '"--target-mae", type=float, default=0.0,')], TRAINED),
    # The DALI path's order.
    ("DALI's pipeline built once (the same order every epoch)", DALI,
     [("        self._pipeline = None\n        self._pipeline = self._build(self.epoch_files())\n",
       "        if self._pipeline is None:\n            self._pipeline = self._build(self.epoch_files())\n")],
     TRAINED),
    ("DALI reads its shard in name order", TRAIN,
     [("shuffle=shuffle, seed=args.seed, num_batches=", "shuffle=False, seed=args.seed, num_batches=")], TRAINED),
    ("DALI's shuffle buffer over a fixed contiguous shard", DALI,
     [("        return list(self.sampler)\n",
       "        n = self.sampler.num_samples\n"
       "        return list(range(self.sampler.shard * n, (self.sampler.shard + 1) * n))\n"),
      ('path=paths, index_path=indexes, name="reader", random_shuffle=False,',
       'path=paths, index_path=indexes, name="reader", random_shuffle=True,')], TRAINED),
]


def copy_tree(dest: str) -> None:
    for part in ("workload", "tests/workload", "plugins/module_utils"):
        shutil.copytree(os.path.join(ROOT, part), os.path.join(dest, part),
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), dest)


def mutate(dest: str, path: str, changes: list[tuple[str, str]]) -> None:
    full = os.path.join(dest, path)
    with open(full, encoding="utf-8") as f:
        source = f.read()
    for text, replacement in changes:
        if source.count(text) != 1:
            raise SystemExit(f"{path}: the mutant's text {text!r} occurs {source.count(text)} times, not once; "
                             f"update MUTANTS")
        source = source.replace(text, replacement)
    with open(full, "w", encoding="utf-8") as f:
        f.write(source)


def run_tests(dest: str, paths: list[str]) -> tuple[list[str], str]:
    env = dict(os.environ, PYTHONPATH=os.path.join(dest, "plugins", "module_utils"))
    proc = subprocess.run([sys.executable, "-m", "pytest", *paths, "-q", "-rf", "-p", "no:cacheprovider"],
                          cwd=dest, env=env, capture_output=True, text=True, check=False)
    failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
    return [f.split("/")[-1] for f in failed], proc.stdout[-2000:]


def main(argv: list[str]) -> int:
    mutants = MUTANTS
    if "--only" in argv:
        text = argv[argv.index("--only") + 1]
        mutants = [m for m in MUTANTS if text in m[0]]
    if "--list" in argv:
        for name, path, changes, tests in mutants:
            print(f"{name}: {path}: " + "; ".join(f"{t!r} -> {r!r}" for t, r in changes) + f" [{' '.join(tests)}]")
        return 0
    tier = "--tier" in argv
    baseline = ["tests/workload"] if tier else sorted({t for m in mutants for t in m[3]})
    survived = 0
    for name, path, changes, tests in [("none (the code as it is)", "", [], baseline), *mutants]:
        with tempfile.TemporaryDirectory(prefix="mutant-") as dest:
            copy_tree(dest)
            if path:
                mutate(dest, path, changes)
            t0 = time.monotonic()
            failed, tail = run_tests(dest, ["tests/workload"] if tier else tests)
        took = time.monotonic() - t0
        if not path:
            print(f"| {name} | {'passes' if not failed else 'FAILS: ' + ', '.join(failed)} | {took:.0f} s |",
                  flush=True)
            if failed:
                print(tail)
                return 2
            continue
        survived += not failed
        shown = ", ".join(f"`{f}`" for f in failed) if failed else "SURVIVED"
        print(f"| {name} | {shown} | {took:.0f} s |", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
