"""A training that refuses to start says so in one line the submit role finds (workload/train.py,
job_runs.refusal): the operator reads the refusal's sentence first, not torchrun's traceback.

Found on the twin (tests/integration/test_twin_resume.py, its last part): a run refused another
run's checkpoint store in one sentence, but aml_job's failure showed the last 30 lines of the node's
log, torchrun's ChildFailedError, and the sentence was line 4 of 38.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import WORKLOAD

sys.path.insert(0, str(WORKLOAD.parent / "plugins" / "module_utils"))

from amlhpc.azure import job_runs  # noqa: E402


def test_a_refusal_is_one_line_the_submit_role_finds(tmp_path):
    res = subprocess.run([sys.executable, str(WORKLOAD / "train.py"), "--output-dir", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 1, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.startswith(job_runs.STOPPED)]
    assert len(lines) == 1, res.stderr[-2000:]
    assert job_runs.refusal(res.stderr) == "give --data-dir, or --account/--container/--stage-dir to stage first"
    message = job_runs.failure_message("r-2", "Failed", None, "Execution failed.", "r-3", "std_log_node_0.txt",
                                       res.stderr, job_runs.refusal(res.stderr))
    assert message.startswith("run r-2 stopped: give --data-dir, or --account/--container/--stage-dir to "
                              "stage first (Run r-2 ended Failed: Execution failed.; running the task again")
