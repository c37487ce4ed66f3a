# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Running azcopy with ``--output-type json``: its messages, the job's result, a progress series.

Standard library only.
"""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .azcopy_sas import redact

PROGRESS_POINTS = 64  # the most points a progress series keeps


class ProgressSeries:
    """Cumulative bytes over time, at most ``cap`` points, evenly thinned (first and last always kept).

    Each point is ``{"t": seconds since the start, "bytes": bytes over the wire so far,
    "files": files finished so far}``. When the series is full every other point is
    dropped, so the kept points stay spread over the whole run.
    """

    def __init__(self, cap: int = PROGRESS_POINTS) -> None:
        self.cap = max(4, cap)
        self.points: list[dict[str, float | int]] = []
        self._stride = 1
        self._seen = 0
        self._last: dict[str, float | int] | None = None

    def add(self, t: float, done_bytes: int, files: int = 0) -> None:
        point = {"t": round(float(t), 3), "bytes": int(done_bytes), "files": int(files)}
        self._last = point
        if self._seen % self._stride == 0:
            self.points.append(point)
            if len(self.points) >= self.cap:
                self.points = self.points[::2]
                self._stride *= 2
        self._seen += 1

    def series(self) -> list[dict[str, float | int]]:
        """The points, the last one seen included."""
        out = list(self.points)
        if self._last is not None and (not out or out[-1] is not self._last):
            if len(out) >= self.cap:
                out.pop()
            out.append(self._last)
        return out


_INT_FIELDS = ("TotalTransfers", "FileTransfers", "TransfersCompleted", "TransfersFailed", "TransfersSkipped",
               "BytesOverWire", "TotalBytesTransferred", "TotalBytesEnumerated", "TotalBytesExpected")


@dataclass
class AzcopyMessage:
    kind: str  # Init, Progress, EndOfJob, Error, Info, Prompt, ...
    text: str  # MessageContent as printed (redact before showing)
    data: dict[str, Any]  # MessageContent decoded when it is JSON, else {}


def parse_line(line: str) -> AzcopyMessage | None:
    """One line of ``azcopy --output-type json``; ``None`` for a line that is not one of its messages."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        outer = json.loads(line)
    except ValueError:
        return None
    if not isinstance(outer, dict) or "MessageType" not in outer:
        return None
    text = outer.get("MessageContent", "")
    data: dict[str, Any] = {}
    if isinstance(text, str) and text.startswith("{"):
        try:
            decoded = json.loads(text)
            if isinstance(decoded, dict):
                data = decoded
        except ValueError:
            pass
    for key in _INT_FIELDS:
        if key in data:
            try:
                data[key] = int(data[key])
            except (TypeError, ValueError):
                pass
    if "PercentComplete" in data:
        try:
            data["PercentComplete"] = float(data["PercentComplete"])
        except (TypeError, ValueError):
            pass
    return AzcopyMessage(kind=str(outer["MessageType"]), text=str(text), data=data)


@dataclass
class JobResult:
    returncode: int
    status: str = ""  # JobStatus of the last Progress/EndOfJob: Completed, CompletedWithErrors, Failed, ...
    total: int = 0
    completed: int = 0
    failed: int = 0
    skipped: int = 0
    bytes_over_wire: int = 0
    bytes_transferred: int = 0
    errors: list[str] = field(default_factory=list)
    failed_transfers: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (self.returncode == 0 and self.status in ("Completed", "CompletedWithSkipped") and self.failed == 0
                and not self.errors)


def _end_with_parent() -> None:
    """In azcopy's process, before it starts (Linux): SIGTERM when the stage that started it
    ends, however it ends, so that an interrupted stage's azcopy (with a SAS in its argv) does
    not go on alone. Elsewhere nothing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_azcopy(cmd: Sequence[str], env: Mapping[str, str], *, secrets: Iterable[str] = (),
               progress: Callable[[dict[str, Any]], None] | None = None,
               timeout: float | None = None) -> JobResult:
    """Run azcopy with JSON output, feeding each Progress message to ``progress``."""
    secrets = list(secrets)
    start = time.monotonic()
    # Streams azcopy's JSON progress line by line, which run_command cannot; no module here.
    proc = subprocess.Popen(list(cmd),  # pylint: disable=ansible-bad-function
                            env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, bufsize=1,
                            preexec_fn=_end_with_parent)  # pylint: disable=subprocess-popen-preexec-fn
    result = JobResult(returncode=-1)
    try:
        if proc.stdout is None:  # stdout=PIPE above
            raise AssertionError("azcopy's output is not a pipe")
        for line in proc.stdout:
            msg = parse_line(line)
            if msg is None:
                if "error" in line.lower():
                    result.errors.append(redact(line.strip(), secrets))
                continue
            if msg.kind in ("Progress", "EndOfJob") and msg.data:
                d = msg.data
                result.status = str(d.get("JobStatus", result.status))
                result.total = d.get("TotalTransfers", result.total)
                result.completed = d.get("TransfersCompleted", result.completed)
                result.failed = d.get("TransfersFailed", result.failed)
                result.skipped = d.get("TransfersSkipped", result.skipped)
                result.bytes_over_wire = d.get("BytesOverWire", result.bytes_over_wire)
                result.bytes_transferred = d.get("TotalBytesTransferred", result.bytes_transferred)
                if d.get("FailedTransfers"):
                    result.failed_transfers = [
                        {"src": redact(str(t.get("Src", "")), secrets), "error": str(t.get("ErrorCode", ""))}
                        for t in d["FailedTransfers"]]
                if d.get("ErrorMsg"):
                    result.errors.append(redact(str(d["ErrorMsg"]), secrets))
                if progress is not None:
                    progress({"status": result.status, "percent": d.get("PercentComplete", 0.0),
                              "completed": result.completed, "failed": result.failed, "skipped": result.skipped,
                              "total": result.total, "bytes_over_wire": result.bytes_over_wire,
                              "bytes_transferred": result.bytes_transferred,
                              "seconds": round(time.monotonic() - start, 3), "final": msg.kind == "EndOfJob"})
            elif msg.kind == "Error":
                result.errors.append(redact(msg.text, secrets))
            if timeout is not None and time.monotonic() - start > timeout:
                proc.kill()
                result.errors.append(f"azcopy ran longer than {timeout:g} s and was stopped")
                break
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result.returncode = proc.returncode
    result.seconds = time.monotonic() - start
    return result


RESUMES = "A rerun of the stage resumes where this one stopped: the files already whole are kept."


def explain_failure(result: JobResult) -> str:
    """One or two sentences on why an azcopy job failed (no secrets), and that a rerun, once the
    cause is fixed, resumes (:data:`RESUMES`)."""
    return f"{_cause(result)} {RESUMES}"


def _cause(result: JobResult) -> str:
    text = " ".join(result.errors)
    codes = {t.get("error") for t in result.failed_transfers}
    if "AuthorizationFailure" in text or "AuthenticationFailed" in text or "403" in codes or " 403" in text:
        return ("azcopy was refused access (HTTP 403): the SAS token has expired, lacks read/list permission, "
                "or belongs to another account or container (with an identity: it lacks the role "
                "Storage Blob Data Reader on the account or container).")
    if "404" in codes or "ContainerNotFound" in text or "ResourceNotFound" in text:
        return "azcopy did not find the container or prefix (HTTP 404): check the account URL, container and prefix."
    if "connection refused" in text.lower() or "no such host" in text.lower() or "dial tcp" in text.lower():
        return "azcopy could not reach the storage endpoint: check the account URL and the network."
    if result.failed:
        shown = ", ".join(f"{t['src'].rsplit('/', 1)[-1]} ({t['error']})" for t in result.failed_transfers[:3])
        return f"azcopy could not copy {result.failed} of {result.total} file(s){': ' + shown if shown else ''}."
    first = result.errors[0].splitlines()[0] if result.errors else f"exit status {result.returncode}"
    return f"azcopy failed ({result.status or 'no job status'}): {first}."
