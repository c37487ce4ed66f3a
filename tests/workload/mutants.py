"""Break the distributed training path on purpose and see which workload tests go red.

    .venv-workload/bin/python tests/workload/mutants.py [pytest paths ...]

Each mutant is one textual change to a copy of ``workload/`` (the checkout is not touched); the
workload tests then run against the copy (default: ``tests/workload/test_two_nodes.py``; pass
``tests/workload`` for the whole tier). Prints one line per mutant: the tests that failed, or
SURVIVED. Exits 1 when a mutant survives. ``--list`` shows the mutants without running them.
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

# (name, file, [(text, replacement), ...]): each text must occur exactly once.
MUTANTS = [
    ("no gradient all-reduce (forward through the bare model)", TRAIN,
     [("forward = torch.compile(ddp) if args.compile else ddp",
       "forward = torch.compile(model) if args.compile else model")]),
    ("gradients summed instead of averaged", TRAIN,
     [("loss.backward()", "(loss * layout.world_size).backward()")]),
    ("set_epoch called after iter()", TRAIN,
     [("        train_loader.sampler.set_epoch(epoch)\n", ""),
      ("            batches = iter(train_loader)  #",
       "            batches = iter(train_loader)\n        train_loader.sampler.set_epoch(epoch)  #")]),
    ("MIN all-reduce of the step count removed", TRAIN,
     [("dist.all_reduce(per_rank, op=dist.ReduceOp.MIN)", "pass")]),
    ("node scope shards by global rank", TRAIN,
     [("shard, shards = layout.local_rank, layout.local_world_size",
       "shard, shards = layout.rank, layout.local_world_size")]),
    ("global scope shards by local rank", TRAIN,
     [("shard, shards = layout.rank, layout.world_size",
       "shard, shards = layout.local_rank, layout.world_size")]),
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
    if "--list" in argv:
        for name, path, changes in MUTANTS:
            print(f"{name}: {path}: " + "; ".join(f"{t!r} -> {r!r}" for t, r in changes))
        return 0
    paths = argv or ["tests/workload/test_two_nodes.py"]
    survived = 0
    for name, path, changes in [("none (the code as it is)", "", []), *MUTANTS]:
        with tempfile.TemporaryDirectory(prefix="mutant-") as dest:
            copy_tree(dest)
            if path:
                mutate(dest, path, changes)
            t0 = time.monotonic()
            failed, tail = run_tests(dest, paths)
        took = time.monotonic() - t0
        if not path:
            print(f"| {name} | {'passes' if not failed else 'FAILS: ' + ', '.join(failed)} | {took:.0f} s |",
                  flush=True)
            if failed:
                print(tail)
                return 2
            continue
        survived += not failed
        print(f"| {name} | {', '.join(failed) if failed else 'SURVIVED'} | {took:.0f} s |", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
