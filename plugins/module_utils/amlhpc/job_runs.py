# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Which AzureML run a job name stands for, and whether to submit another.

``aml_job`` submits a job under a name (``cosmoflow``). Running the task again must not
submit a second copy of a run that finished or is still going, but must not take a failed or
cancelled run for done either. Each submission is an *attempt*: the first is called by the
name itself, the next ``<name>-r2``, ``<name>-r3``, ... (an AzureML v2 job name is unique in
the workspace for good, so a resubmission needs a new one; SDK v1 runs carry the attempt in
their tags and display name).

Also what every backend of ``aml_job`` reports the same way: the check-mode answer, the
metrics of a finished run, the log the SDKs' chatter goes to.

And the record of a run the controller saw complete and downloaded (``RECORD`` in the
download folder): a completed AzureML run is done for good (a job name is never reused and
its outputs do not change), so while that record and the outputs are there, running the task
again answers from them instead of asking the workspace, streaming the log and downloading
every output again. The record names the workspace and the job: another one's is not used.
``force`` submits a new attempt as before; deleting the record or the outputs asks the
workspace again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from typing import IO, Any

from .job_spec import find_outputs, read_metrics

RECORD = ".amlhpc-job.json"
"""The record of a completed, downloaded run, in the download folder."""

RECORD_IDENTITY = ("backend", "subscription_id", "resource_group", "workspace_name", "name")
"""What a record must match to stand for the task's job: the backend, the workspace, the job name."""

# Run states of AzureML (azureml-core RunStatus, azure-ai-ml JobStatus).
COMPLETED = {"Completed"}
FAILED = {"Failed", "Canceled", "CancelRequested", "NotResponding", "TimedOut"}
ACTIVE = {"NotStarted", "Starting", "Provisioning", "Preparing", "Queued", "Running", "Finalizing",
          "Paused"}


def attempt_name(name: str, attempt: int) -> str:
    """The run name of an attempt: ``name`` for the first, ``name-rN`` after."""
    return name if attempt <= 1 else f"{name}-r{attempt}"


def attempt_of(name: str, run_name: str) -> int:
    """The attempt number a run name carries (0 when it is not an attempt of ``name``)."""
    if run_name == name:
        return 1
    m = re.fullmatch(re.escape(name) + r"-r(\d+)", run_name or "")
    return int(m.group(1)) if m and int(m.group(1)) >= 2 else 0


def decide(name: str, runs: Iterable[tuple[str, str]], force: bool = False) -> dict[str, Any]:
    """What to do for job ``name`` given its earlier attempts ``(run name, status)``.

    Returns ``{action, run_name, attempt, previous, previous_status, msg}``; action is
    ``reuse`` (the latest attempt completed or is still going: report it, submit nothing)
    or ``submit`` (nothing yet, the latest failed or was cancelled, or ``force``).
    """
    attempts = sorted(((attempt_of(name, r), r, s) for r, s in runs if attempt_of(name, r)), reverse=True)
    if not attempts:
        return {"action": "submit", "run_name": name, "attempt": 1, "previous": None,
                "previous_status": None, "msg": f"no run named {name} yet: submitting {name}"}
    number, latest, status = attempts[0]
    nxt = attempt_name(name, number + 1)
    base = {"previous": latest, "previous_status": status}
    if force:
        return {"action": "submit", "run_name": nxt, "attempt": number + 1, **base,
                "msg": f"force: submitting {nxt} (the last attempt {latest} is {status})"}
    if status in FAILED:
        return {"action": "submit", "run_name": nxt, "attempt": number + 1, **base,
                "msg": f"the last attempt {latest} ended {status}: resubmitting as {nxt}"}
    state = "completed" if status in COMPLETED else f"is {status}"
    return {"action": "reuse", "run_name": latest, "attempt": number, **base,
            "msg": f"run {latest} {state}: nothing submitted"}


def check_result(verdict: dict[str, Any], status: str | None, run_id: str | None) -> dict[str, Any]:
    """What check mode reports for ``decide``'s verdict: the run that would be reused (its
    ``status`` and ``run_id``), or the one that would be submitted (changed)."""
    result: dict[str, Any] = {"changed": verdict["action"] == "submit"}
    if verdict["previous"]:
        result["previous_run"] = verdict["previous"]
    if verdict["action"] == "reuse":
        result.update(run_id=run_id, status=status, msg=verdict["msg"])
    else:
        result.update(run_id=verdict["run_name"], status="NotSubmitted (check mode)",
                      msg=f"would submit {verdict['run_name']}: {verdict['msg']}")
    return result


def finish(result: dict[str, Any], download_dir: str | None) -> dict[str, Any]:
    """``result`` with the outputs folder and metrics of a run downloaded to ``download_dir``."""
    outputs = find_outputs(download_dir) if download_dir else None
    if outputs:
        result["outputs_dir"] = outputs
        result["metrics"] = read_metrics(outputs)
    return result


def write_record(download_dir: str, identity: dict[str, Any], result: dict[str, Any]) -> str | None:
    """Record a completed run's ``result`` (run_id, status, portal_url, previous_run) for job
    ``identity`` in ``download_dir``, replacing any earlier record; a run in any other state is
    not recorded (and an earlier record is removed). Returns the record's path, or None."""
    path = os.path.join(download_dir, RECORD)
    if result.get("status") not in COMPLETED or not result.get("run_id"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return None
    record = {**{k: identity.get(k) for k in RECORD_IDENTITY},
              **{k: result[k] for k in ("run_id", "status", "portal_url", "previous_run") if result.get(k)}}
    os.makedirs(download_dir, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def read_record(download_dir: str, identity: dict[str, Any]) -> dict[str, Any] | None:
    """The record in ``download_dir`` where it stands for job ``identity``, says the run
    completed, and the run's outputs are still there; None otherwise (ask the workspace)."""
    try:
        with open(os.path.join(download_dir, RECORD), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or any(record.get(k) != identity.get(k) for k in RECORD_IDENTITY):
        return None
    if record.get("status") not in COMPLETED or not record.get("run_id") or not find_outputs(download_dir):
        return None
    return record


def recorded_result(record: dict[str, Any], path: str) -> dict[str, Any]:
    """The task's result for a run answered from its record at ``path``."""
    result = {"changed": False, "run_id": record["run_id"], "status": record["status"],
              "portal_url": record.get("portal_url"),
              "msg": f"run {record['run_id']} completed and its outputs are downloaded ({path}): nothing "
                     "submitted, the workspace not asked (force: true submits a new attempt)"}
    if record.get("previous_run"):
        result["previous_run"] = record["previous_run"]
    return result


@contextlib.contextmanager
def quiet(log_path: str | None) -> Iterator[IO[str]]:
    """SDK chatter (and streamed logs) go to the log file (None: nowhere, in check mode):
    module stdout is JSON only."""
    if log_path:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    with open(log_path or os.devnull, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        yield log


def log_tail(path: str, lines: int = 30) -> str:
    """The last ``lines`` of a run log ("" when there is none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""
