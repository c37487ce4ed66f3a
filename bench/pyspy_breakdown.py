#!/usr/bin/env python3
"""Where an ansible-playbook run's worker processes spend their CPU, from a py-spy profile.

Ansible forks a worker for every host and task; cProfile of ansible-playbook sees only the
main process (the strategy). ``py-spy record --subprocesses --format raw`` samples the
workers too (``nodes_phase_bench.py --pyspy DIR`` records the second run that way). This
script sorts the workers' samples into what a host-task does, first match wins:

    .venv/bin/python bench/pyspy_breakdown.py DIR/32-second.raw

* build module payload: AnsiballZ (``_configure_module``: the module's imports found by
  parsing every module_utils file it needs, zipped). Ansible caches the result for the rest
  of the run, so this is paid about once per module and run, not per host.
* task args templating: the task's arguments, every ``{{ }}`` compiled by Jinja in each
  worker (Ansible keeps no compiled templates between workers).
* role arg check: the role's variables checked against its argument_specs by Ansible's
  own validate_argument_spec task, in front of the role's tasks.
* ssh exec: the module's run over the connection, waiting included only as CPU.
"""

from __future__ import annotations

import collections
import re
import sys

CATEGORIES = [
    ("build module payload", "_configure_module"),
    ("task args templating", "finalize_task_arg"),
    ("role arg check", "validate_argument_spec"),
    ("ssh exec", "_low_level_execute_command"),
    ("plugin source load", "_load_module_source"),
    ("when", "_resolve_conditional"),
    ("register", "finalize_registered_values"),
    ("module run, other", "_execute_module"),
    ("task executor, other", "TaskExecutor."),
]
_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")


def breakdown(lines) -> tuple[int, collections.Counter]:
    """Samples of worker processes (stacks through ``WorkerProcess._run``) and their count
    per category of :data:`CATEGORIES` ("worker, other" for the rest)."""
    total, counts = 0, collections.Counter()
    for line in lines:
        m = _LINE.match(line.rstrip("\n"))
        if not m:
            continue
        frames = m["stack"].split(";")
        if not any(f.startswith("WorkerProcess._run ") for f in frames):
            continue
        n = int(m["count"])
        total += n
        name = next((cat for cat, marker in CATEGORIES if any(marker in f for f in frames)), "worker, other")
        counts[name] += n
    return total, counts


def report(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        total, counts = breakdown(f)
    rows = [f"workers: {total} samples in {path}"]
    rows += [f"  {n:6d}  {100 * n / max(total, 1):5.1f} %  {cat}" for cat, n in counts.most_common()]
    return "\n".join(rows)


if __name__ == "__main__":
    for arg in sys.argv[1:] or sys.exit(__doc__):
        print(report(arg))
