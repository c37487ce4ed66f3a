# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Running azcopy with ``--output-type json``: its messages, the job's result, a progress series.

Standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import re
import signal
import subprocess
import threading
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
    job_id: str = ""  # from azcopy's Init message
    stopped: str = ""  # why the stage stopped azcopy: "time limit", "stall", "cancel"; "" when it ended itself
    stopped_detail: str = ""  # one sentence on that
    all_bytes_in: bool = False  # the job was whole and every byte over the wire, transfers still open
    in_flight: list[dict[str, Any]] = field(default_factory=list)  # transfers azcopy had open when stopped
    decompressing: bool = False  # an open transfer was a gzip-encoded blob azcopy was decompressing

    @property
    def ok(self) -> bool:
        return (self.returncode == 0 and self.status in ("Completed", "CompletedWithSkipped") and self.failed == 0
                and not self.errors and not self.stopped)


class Cancel:
    """Set from another thread (the controller went away): run_azcopy stops azcopy and returns."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def set(self, reason: str) -> None:
        self.reason = reason
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


TAIL_STALL_S = 20.0
"""With the job whole (azcopy enumerated every transfer) and every byte over the wire, the
seconds a transfer may stay open before the stage calls it a stall: what is left is writing
and closing files. A blob whose Content-Encoding says gzip but whose content is not gzip (or
is empty) leaves azcopy --decompress waiting there for ever."""


def _own_group_ending_with_parent() -> None:
    """In azcopy's process, before it starts (Linux): its own process group (the stage stops
    azcopy by its group) and SIGTERM when the stage that started it ends, however it ends, so
    that an interrupted stage's azcopy (with a SAS in its argv) does not go on alone."""
    os.setpgid(0, 0)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_process(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM to the process's group (its own, see above), SIGKILL after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _progress_key(d: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(d.get(k) for k in ("TotalTransfers", "TransfersCompleted", "TransfersFailed", "TransfersSkipped",
                                    "BytesOverWire", "TotalBytesTransferred"))


def _all_bytes_in(d: dict[str, Any]) -> bool:
    """The job is whole and every byte is over the wire, yet transfers are open."""
    whole = str(d.get("CompleteJobOrdered", "")).lower() == "true" or d.get("CompleteJobOrdered") is True
    try:
        percent = float(d.get("PercentComplete", 0))
    except (TypeError, ValueError):
        percent = 0.0
    total = int(d.get("TotalTransfers", 0) or 0)
    closed = sum(int(d.get(k, 0) or 0) for k in ("TransfersCompleted", "TransfersFailed", "TransfersSkipped"))
    return whole and percent >= 100.0 and total > closed


def run_azcopy(cmd: Sequence[str], env: Mapping[str, str], *, secrets: Iterable[str] = (),
               progress: Callable[[dict[str, Any]], None] | None = None,
               timeout: float | None = None, stall: float | None = None, cancel: Cancel | None = None,
               clock: Callable[[], float] = time.monotonic) -> JobResult:
    """Run azcopy with JSON output, feeding each Progress message to ``progress``.

    azcopy is stopped (its process group: SIGTERM, then SIGKILL) and the result says why
    (``stopped``) when it runs past ``timeout`` seconds, when nothing moves (no byte over the
    wire, no transfer started, finished, failed or skipped) for ``stall`` seconds, or for
    :data:`TAIL_STALL_S` seconds once the job is whole with every byte in and transfers still
    open, or when ``cancel`` is set. azcopy's output is read by a thread, so a silent azcopy
    is timed too.
    """
    secrets = list(secrets)
    start = clock()
    # Streams azcopy's JSON progress line by line, which run_command cannot; no module here.
    proc = subprocess.Popen(list(cmd),  # pylint: disable=ansible-bad-function
                            env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, bufsize=1,
                            preexec_fn=_own_group_ending_with_parent)  # pylint: disable=subprocess-popen-preexec-fn
    if proc.stdout is None:  # stdout=PIPE above
        raise AssertionError("azcopy's output is not a pipe")
    lines: queue.Queue[str | None] = queue.Queue()

    def pump(stream: Any) -> None:
        try:
            for raw in stream:
                lines.put(raw)
        except (OSError, ValueError):
            pass
        lines.put(None)

    reader = threading.Thread(target=pump, args=(proc.stdout,), name="azcopy-output", daemon=True)
    reader.start()
    result = JobResult(returncode=-1)
    key: tuple[Any, ...] = ()
    moved_at = start
    try:
        while True:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                line = ""
            if line is None:
                break
            msg = parse_line(line) if line else None
            if line and msg is None and "error" in line.lower():
                result.errors.append(redact(line.strip(), secrets))
            if msg is not None and msg.kind == "Init" and msg.data.get("JobID"):
                result.job_id = str(msg.data["JobID"])
            if msg is not None and msg.kind in ("Progress", "EndOfJob") and msg.data:
                d = msg.data
                result.job_id = str(d.get("JobID") or result.job_id)
                result.status = str(d.get("JobStatus", result.status))
                result.total = d.get("TotalTransfers", result.total)
                result.completed = d.get("TransfersCompleted", result.completed)
                result.failed = d.get("TransfersFailed", result.failed)
                result.skipped = d.get("TransfersSkipped", result.skipped)
                result.bytes_over_wire = d.get("BytesOverWire", result.bytes_over_wire)
                result.bytes_transferred = d.get("TotalBytesTransferred", result.bytes_transferred)
                result.all_bytes_in = msg.kind == "Progress" and _all_bytes_in(d)
                if d.get("FailedTransfers"):
                    result.failed_transfers = [
                        {"src": redact(str(t.get("Src", "")), secrets), "error": str(t.get("ErrorCode", ""))}
                        for t in d["FailedTransfers"]]
                if d.get("ErrorMsg"):
                    result.errors.append(redact(str(d["ErrorMsg"]), secrets))
                if _progress_key(d) != key:
                    key, moved_at = _progress_key(d), clock()
                if progress is not None:
                    progress({"status": result.status, "percent": d.get("PercentComplete", 0.0),
                              "completed": result.completed, "failed": result.failed, "skipped": result.skipped,
                              "total": result.total, "bytes_over_wire": result.bytes_over_wire,
                              "bytes_transferred": result.bytes_transferred,
                              "seconds": round(clock() - start, 3), "final": msg.kind == "EndOfJob"})
            elif msg is not None and msg.kind == "Error":
                result.errors.append(redact(msg.text, secrets))
            now = clock()
            still = now - moved_at
            tail = min(stall, TAIL_STALL_S) if stall else TAIL_STALL_S
            if cancel is not None and cancel.is_set():
                result.stopped, result.stopped_detail = "cancel", cancel.reason
            elif timeout is not None and now - start > timeout:
                result.stopped = "time limit"
                result.stopped_detail = f"azcopy ran past the stage's time limit of {timeout:g} s"
            elif stall and still > stall:
                result.stopped = "stall"
                result.stopped_detail = f"azcopy moved nothing for {still:.0f} s (the stall limit is {stall:g} s)"
            elif result.all_bytes_in and still > tail:
                result.stopped = "stall"
                result.stopped_detail = (f"azcopy had every byte in but left transfers open for {still:.0f} s "
                                         f"(the limit once every byte is in is {tail:g} s)")
            if result.stopped:
                stop_process(proc)
                break
        proc.wait()
    finally:
        if proc.poll() is None:
            stop_process(proc)
        reader.join(5)
    result.returncode = proc.returncode
    result.seconds = clock() - start
    return result


def job_transfers(azcopy: str, job_id: str, env: Mapping[str, str], status: str,
                  secrets: Iterable[str] = ()) -> list[dict[str, Any]]:
    """``azcopy jobs show <job> --with-status=<status>`` (``Failed``, ``Started``, ...): each
    transfer's ``src``, ``dst`` and ``error`` (azcopy's code), from the job plan in ``env``'s
    ``AZCOPY_JOB_PLAN_LOCATION``. Empty when it cannot say."""
    if not job_id:
        return []
    secrets = list(secrets)
    try:
        # A short, bounded read of azcopy's own job plan; no module here.
        done = subprocess.run([azcopy, "jobs", "show", job_id, f"--with-status={status}",  # pylint: disable=ansible-bad-function
                               "--output-type", "json"], env=dict(env), capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    out: list[dict[str, Any]] = []
    for line in done.stdout.splitlines():
        msg = parse_line(line)
        if msg is None or msg.kind != "ListJobTransfers":
            continue
        for t in msg.data.get("Details") or []:
            if isinstance(t, dict) and not t.get("IsFolderProperties"):
                out.append({"src": redact(str(t.get("Src", "")), secrets), "dst": str(t.get("Dst", "")),
                            "error": str(t.get("ErrorCode", "")), "status": str(t.get("TransferStatus", ""))})
    return out


_FAILED_LINE = re.compile(r"(?:DOWNLOADFAILED|UPLOADFAILED|COPYFAILED):\s*(?P<src>\S+)\s*:\s*(?P<code>\S*)\s*:\s*"
                          r"(?P<why>.*?)(?:\. When [^.]*\.|\. X-Ms-Request-Id|$)")


def log_failures(log_dir: str, secrets: Iterable[str] = ()) -> dict[str, str]:
    """``{source URL without its query: azcopy's reason}`` from the ``*FAILED`` lines of the
    job logs in ``log_dir`` (redacted)."""
    secrets = list(secrets)
    out: dict[str, str] = {}
    try:
        names = sorted(os.listdir(log_dir))
    except OSError:
        return out
    for name in names:
        if not name.endswith(".log"):
            continue
        try:
            with open(os.path.join(log_dir, name), encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = _FAILED_LINE.search(line)
                    if m:
                        src = redact(m.group("src"), secrets).split("?", 1)[0]
                        out.setdefault(src, redact(m.group("why").strip(), secrets))
        except OSError:
            continue
    return out


RESUMES = "A rerun of the stage resumes where this one stopped: the files already whole are kept."


def explain_failure(result: JobResult) -> str:
    """One or two sentences on why an azcopy job failed (no secrets), and that a rerun, once the
    cause is fixed, resumes (:data:`RESUMES`)."""
    return f"{_cause(result)} {RESUMES}"


ENCODING_HINT = ("A blob whose Content-Encoding says gzip but whose content is not gzip, is cut short or is empty "
                 "stops azcopy --decompress: upload those blobs again (playbooks/prepare_dataset.yml), clear their "
                 "Content-Encoding, or stage with stage_decompress: false.")


def _named(transfers: Sequence[dict[str, Any]], limit: int = 5) -> str:
    """``a (why), b (why) and N more``: each transfer's blob (or the URL's last part) and reason."""
    parts = []
    for t in transfers[:limit]:
        name = t.get("blob") or str(t.get("src", "")).split("?", 1)[0].rsplit("/", 1)[-1]
        why = t.get("why") or (str(t["error"]) if t.get("error") not in (None, "", "0", "000") else "")
        parts.append(f"{name} ({why})" if why else str(name))
    more = len(transfers) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def _cause(result: JobResult) -> str:
    if result.stopped == "cancel":
        return f"The stage was stopped: {result.stopped_detail or 'cancelled'}."
    if result.stopped:
        text = result.stopped_detail or f"azcopy was stopped ({result.stopped})"
        if result.in_flight:
            text += f", still open: {_named(result.in_flight)}"
        if result.stopped == "stall" and result.all_bytes_in:
            return f"{text}. {ENCODING_HINT}"
        if result.stopped == "stall":
            return (f"{text}. Check the network and the storage account (throttled or unreachable), or raise "
                    "stage_stall_seconds." + (f" {ENCODING_HINT}" if result.decompressing else ""))
        return (f"{text}. Raise stage_timeout (seconds) or stage_timeout_margin, or find why the stage is slower "
                "than the staging model says (stage_model).")
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
        shown = _named(result.failed_transfers)
        why = " ".join(str(t.get("why", "")) for t in result.failed_transfers).lower()
        hint = f" {ENCODING_HINT}" if "decompress" in why or "gzip" in why else ""
        return f"azcopy could not copy {result.failed} of {result.total} file(s){': ' + shown if shown else ''}.{hint}"
    first = result.errors[0].splitlines()[0] if result.errors else f"exit status {result.returncode}"
    return f"azcopy failed ({result.status or 'no job status'}): {first}."
