"""bench/pyspy_breakdown.py sorts a py-spy raw profile's worker samples by what a host-task does."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import pyspy_breakdown  # noqa: E402

MAIN = 'process 10:"python ansible-playbook site.yml";main (ansible/cli/playbook.py:10)'
WORKER = MAIN + ';Popen._launch (multiprocessing/popen_fork.py:71);process 11:"python ansible-playbook site.yml";' \
    "WorkerProcess._run (ansible/executor/process/worker.py:170);TaskExecutor._execute (ansible/executor/task_executor.py:600)"
LINES = [
    f"{MAIN};StrategyBase._wait_on_pending_results (ansible/plugins/strategy/__init__.py:900) 50\n",
    f"{WORKER};ActionBase._execute_module (ansible/plugins/action/__init__.py:1000);"
    "ActionBase._configure_module (ansible/plugins/action/__init__.py:300);recursive_finder (x.py:1) 6\n",
    f"{WORKER};ActionModule.run (ansible/plugins/action/validate_argument_spec.py:70) 3\n",
    f"{WORKER};ActionBase.finalize_task_arg (ansible/plugins/action/__init__.py:400) 2\n",
    f"{WORKER};ActionBase._execute_module (ansible/plugins/action/__init__.py:1000);"
    "ActionBase._low_level_execute_command (ansible/plugins/action/__init__.py:1400) 4\n",
    f"{WORKER.replace('TaskExecutor._execute (ansible/executor/task_executor.py:600)', 'x (y.py:1)')} 1\n",
    "not a stack line\n",
]


def test_only_worker_samples_count_and_the_first_matching_category_wins():
    total, counts = pyspy_breakdown.breakdown(LINES)
    assert total == 16
    assert counts == {"build module payload": 6, "ssh exec": 4, "role arg check": 3, "task args templating": 2,
                      "worker, other": 1}


def test_the_report_prints_shares_of_the_workers_samples(tmp_path):
    raw = tmp_path / "4-second.raw"
    raw.write_text("".join(LINES))
    out = pyspy_breakdown.report(str(raw)).splitlines()
    assert out[0] == f"workers: 16 samples in {raw}"
    assert out[1].split() == ["6", "37.5", "%", "build", "module", "payload"]
