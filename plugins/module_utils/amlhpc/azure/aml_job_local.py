# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""aml_job's local backend: the same training script with torchrun and the workload venv's
Python on the control host (``job_spec.local_spec``), its output streamed into a log file.

A run is done once its ``summary.json`` exists; running again reports it unless forced. The
staging SAS reaches the child processes in their environment only, never their arguments.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Mapping
from typing import Any

from .job_spec import SAS_ENV, JobRequest, JobSpecError, build_spec, read_metrics

# Variables of an outer distributed run that would confuse torchrun's own.
_INHERITED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_", "OMPI_")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_local(p: Mapping[str, Any], check_mode: bool, req: JobRequest, log_path: str) -> dict[str, Any]:
    """Run job ``req`` here (module options ``p``: python, sas, force, timeout)."""
    summary = os.path.join(req.output_dir, "summary.json")
    if os.path.exists(summary) and not p["force"]:
        return {"changed": False, "run_id": req.name, "status": "Completed", "outputs_dir": req.output_dir,
                "metrics": read_metrics(req.output_dir), "spec": build_spec(req, p["python"]),
                "msg": f"run {req.name} finished here before ({summary}): nothing run (force: true runs it again)"}
    if check_mode:
        return {"changed": True, "run_id": req.name, "status": "NotSubmitted (check mode)",
                "spec": build_spec(req, p["python"])}
    spec = build_spec(req, p["python"], free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED)}
    env.update(spec["environment_variables"])
    if req.account:
        if not p["sas"]:
            raise JobSpecError("local staging needs sas (it is handed to the job in its environment only)")
        env[SAS_ENV] = p["sas"]
    os.makedirs(req.output_dir, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "a", encoding="utf-8") as log:
        try:
            # The training job's output goes to the log file as it runs, under a timeout:
            # run_command holds it in memory and has no timeout.
            proc = subprocess.run(spec["command"], env=env,  # pylint: disable=ansible-bad-function
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=p["timeout"], check=False)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = None
    status = "Completed" if rc == 0 else ("TimedOut" if rc is None else "Failed")
    result = {"changed": True, "run_id": req.name, "status": status, "rc": rc, "spec": spec,
              "elapsed_s": round(time.monotonic() - started, 1), "outputs_dir": req.output_dir,
              "metrics": read_metrics(req.output_dir)}
    if status == "Completed":
        result["msg"] = f"ran {req.name} here"
    return result
