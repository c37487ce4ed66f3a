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
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any

from .job_spec import find_outputs, read_metrics

RECORD = ".amlhpc-job.json"
"""The record of a completed, downloaded run, in the download folder."""

RECORD_IDENTITY = ("backend", "subscription_id", "resource_group", "workspace_name", "name")
"""What a record must match to stand for the task's job: the backend, the workspace, the job name."""

# Run states of AzureML: azure-ai-ml's JobStatus and azureml-core's RunStatus, each in one set
# (tests/unit/plugins/module_utils/test_job_runs.py reads both SDKs' lists).
COMPLETED = frozenset({"Completed"})
"""Done: outputs to download, nothing to submit."""
FAILED = frozenset({"Failed", "Canceled", "CancelRequested"})
"""Ended (or ending) without completing: the next run of the task submits a new attempt."""
HELD = frozenset({"NotResponding", "Paused", "Unknown"})
"""Stopped but not ended, or not known: the run may still go on (a NotResponding run can come
back), so no new attempt is submitted on its own (a second copy could run beside it); a task
that waits fails, saying what to do (force: true submits a new attempt)."""
ACTIVE = frozenset({"NotStarted", "Starting", "Provisioning", "Preparing", "Queued", "Running", "Finalizing",
                    "Unapproved", "Pausing"})
"""Going: the task reuses the run (and waits for it)."""
SETTLING = frozenset({"Finalizing", "CancelRequested"})
"""Post-processing: the SDKs' streams may return in these; the run has not ended yet."""


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
    if status not in COMPLETED | ACTIVE:
        state += " (not ended: no new attempt is submitted on its own; force: true submits one)"
    return {"action": "reuse", "run_name": latest, "attempt": number, **base,
            "msg": f"run {latest} {state}: nothing submitted"}


def status_text(value: Any) -> str:
    """A status as the service spells it (azure-ai-ml hands out enum members, ``JobStatus.FAILED``)."""
    return str(getattr(value, "value", value))


def settle(get_status: Callable[[], str], sleep: Callable[[float], Any], limit_s: float = 1800,
           interval_s: float = 15) -> str:
    """The status once the run has left post-processing (``SETTLING``), asking ``get_status``
    every ``interval_s`` seconds, at most ``limit_s`` seconds long (then the status it has)."""
    status, waited = get_status(), 0.0
    while status in SETTLING and waited < limit_s:
        sleep(interval_s)
        waited += interval_s
        status = get_status()
    return status


def service_error(text: str) -> str:
    """The service's error message out of an SDK's exception text (azure-ai-ml's JobException and
    azureml-core's ActivityFailedException carry the run's error as JSON after a heading)."""
    head = re.match(r"\s*Exception\s*:\s*", text or "")
    if head:  # azure-ai-ml's heading; after it, the run's error as JSON, or its note for a run without one
        try:
            value = json.loads(text[head.end():].strip() or "null")
        except ValueError:
            value = text[head.end():].strip()
        if not value or (isinstance(value, str) and "error not set" in value.lower()):
            return ""
    start = text.find("{")
    if start >= 0:
        try:
            error = json.loads(text[start:text.rfind("}") + 1])
        except ValueError:
            error = None
        while isinstance(error, dict) and isinstance(error.get("error"), dict):
            error = error["error"]
        if isinstance(error, dict) and error.get("message"):
            return " ".join(str(error["message"]).split())
        if isinstance(error, str) and error.strip():
            return " ".join(error.split())
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


_LOG_NAME = re.compile(r"(?:std_log|driver_log)\D*(\d+)?", re.I)


def _rank(name: str) -> int:
    """The process rank a log's name carries (0 when it carries none: std_log.txt is the primary)."""
    m = _LOG_NAME.search(os.path.basename(name))
    return int(m.group(1)) if m and m.group(1) else 0


def failing_log(logs: Mapping[str, str], error: str = "") -> str | None:
    """Which of ``logs`` (name -> its last lines) is the failing node's: the one the service's
    ``error`` names (the longest such name), else the first (by rank) whose last lines hold a
    traceback or an error, else the primary process's (the lowest rank); None without logs."""
    if not logs:
        return None
    named = [n for n in logs if n and (n in error or os.path.basename(n) in error)]
    if named:
        return max(named, key=lambda n: (len(n) if n in error else len(os.path.basename(n)), n))
    by_rank = sorted(logs, key=lambda n: (_rank(n), n))
    for name in by_rank:
        if re.search(r"Traceback \(most recent call last\)|\b\w*(Error|Exception)\b:", logs[name]):
            return name
    return by_rank[0]


def node_logs(folder: str) -> dict[str, str]:
    """The process logs under ``folder`` (``user_logs/std_log*.txt``, ``azureml-logs/*driver_log*.txt``),
    by their path relative to it."""
    found: dict[str, str] = {}
    for root, _dirs, files in os.walk(folder):
        for f in files:
            if f.endswith(".txt") and _LOG_NAME.search(f):
                path = os.path.join(root, f)
                found[os.path.relpath(path, folder)] = path
    return found


# The line the training prints when it stops with one sentence (workload/train.py): a refusal to
# start (another run's store, a bad argument) or a failure it names (a rendezvous that timed out).
STOPPED = "[cosmoflow] stopped: "


def refusal(text: str) -> str:
    """The sentence of the first ``[cosmoflow] stopped: ...`` line in a run's log, or ""."""
    for line in text.splitlines():
        at = line.find(STOPPED)
        if at >= 0 and line[at + len(STOPPED):].strip():
            return line[at + len(STOPPED):].strip()
    return ""


def stopped_first(run_id: str, sentence: str, message: str) -> str:
    """``message`` headed by the training's own sentence (:func:`refusal`) where it has one."""
    return f"run {run_id} stopped: {sentence} ({message[0].upper()}{message[1:]})" if sentence else message


def failure_message(run_id: str, status: str, portal_url: str | None, error: str, next_attempt: str,
                    log_name: str | None, tail: str, refused: str = "") -> str:
    """The one message of a run that did not complete: the training's own sentence first where it
    stopped with one (a refusal to start, a failure it names; the sentence names the fix), then the run, its status and link, the
    service's error, what to do, and the last lines of the failing node's log."""
    ended = status in FAILED
    head = f"run {run_id} {'ended' if ended else 'is'} {status}" + (f" ({portal_url})" if portal_url else "")
    if error:
        head += f": {error}"
    elif status == "Failed":
        head += ": AzureML recorded no error for it (the failing node's log below and the studio tell why)"
    if status in FAILED:
        then = f"running the task again submits a new attempt ({next_attempt})"
    elif status == "NotResponding":
        then = ("AzureML has had no heartbeat from it and it may still come back: look at it in the studio, cancel it "
                "there (the next run of the task then submits a new attempt) or run the task with force: true")
    elif status == "Paused":
        then = ("resume it in the studio and run the task again to wait for it, or cancel it there (the next run of "
                "the task then submits a new attempt)")
    else:
        then = (f"AzureML reports status {status}, which aml_job does not know: look at the run in the studio; "
                "force: true submits a new attempt")
    message = f"{head}; {then}."
    message = stopped_first(run_id, refused, message)
    if log_name:
        message += f" Last lines of {log_name}:\n{tail}"
    return message


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status an SDK exception carries (azure-core's ``status_code``, azureml-core's
    ``response.status_code``), or None (a timeout, a reset connection)."""
    for holder in (exc, getattr(exc, "response", None)):
        code = getattr(holder, "status_code", None)
        if isinstance(code, int):
            return code
    return None


def watch_hint(exc: BaseException) -> str:
    """What the operator can do about the error ``exc`` that stopped a watch ("" for none)."""
    code = _http_status(exc)
    text = str(getattr(exc, "message", None) or exc)
    if code == 403 or "AuthorizationFailure" in text or "AuthorizationPermissionMismatch" in text:
        return ("the workspace's storage or the workspace refused this machine (403): let it through the storage "
                "account's firewall (or a private endpoint) and give the credential Storage Blob Data Reader on it")
    if code == 429:
        return "Azure is throttling this subscription's requests (429): wait a few minutes"
    if code is not None and code >= 500:
        return f"the service answered {code}: wait a few minutes"
    if code == 409:
        return "the job was being changed at the same time (409)"
    if code is None:
        return "the connection to Azure failed or timed out: check this machine's network"
    return ""


def lookup_failed(name: str, exc: BaseException) -> str:
    """The one sentence for an error while asking the workspace for job ``name``'s runs."""
    error = service_error(str(getattr(exc, "message", None) or exc)) or type(exc).__name__
    hint = watch_hint(exc)
    return (f"job {name}: the workspace could not be asked for its runs ({type(exc).__name__}: {error[:300]}): "
            f"{hint + '; ' if hint else ''}nothing was submitted, and running the task again asks again.")


def watch_failed(run_id: str, status: str, portal_url: str | None, exc: BaseException, next_attempt: str,
                 downloading: str | None = None) -> str:
    """The one sentence for an error that stopped the watch of run ``run_id`` (last known
    ``status``), or its download to ``downloading``: the run, its status and link, the error,
    whether it is still going, and what a rerun does."""
    error = service_error(str(getattr(exc, "message", None) or exc)) or type(exc).__name__
    error = f"{type(exc).__name__}: {error[:300]}"
    link = f" ({portal_url})" if portal_url else ""
    hint = watch_hint(exc)
    if downloading:
        head = (f"run {run_id} ended {status}{link}, but its outputs and logs could not be downloaded to "
                f"{downloading} ({error})")
        then = "running the task again downloads them (nothing is submitted again)"
    elif _http_status(exc) == 404:
        head = f"run {run_id}{link} is no longer in the workspace (last known status {status}; {error})"
        then = "running the task again submits it anew"
    else:
        going = status in ACTIVE | SETTLING | HELD
        head = (f"run {run_id}{link} could not be watched ({error}); its last known status is {status}"
                + (", so it is still going in AzureML" if going else ""))
        if status in FAILED:
            then = f"running the task again submits a new attempt ({next_attempt})"
        else:
            then = "running the task again resumes watching this same run (nothing new is submitted)"
    return f"{head}: {hint + '; ' if hint else ''}{then}."


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


def log_refusal(path: str, limit: int = 8 << 20) -> str:
    """:func:`refusal` in the log at ``path`` (its last ``limit`` bytes; "" when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            return refusal(f.read().decode("utf-8", "replace"))
    except OSError:
        return ""


def log_tail(path: str, lines: int = 30) -> str:
    """The last ``lines`` of a run log ("" when there is none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""
