# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""azcopy for data staging: SAS checks, command lines, JSON progress, and a resumable stage.

Shared by the ``azcopy_stage`` module (Ansible) and ``workload/cosmoflow/stage.py`` (the
training job), so both stage the same way. Standard library only.

How one node stages its shard (``stage_shard``), and why it is safe to kill at any moment:

1. If ``<stage_dir>/.amlhpc-staged/<rank>.json`` (the manifest of a finished stage) matches
   this shard and every file it names is on disk with its size, nothing runs.
2. azcopy copies the shard into ``<stage_dir>/.amlhpc-staging/<rank>/`` with
   ``--overwrite=false``: files a killed run finished are skipped, not fetched again. azcopy
   itself writes each file as ``.azDownload-<job>-<name>`` and renames it when complete;
   those leftovers of a killed run are removed first.
3. Only after azcopy reports the whole job complete are the files moved (``os.replace``)
   to their final names, ``.tfrecord.gz`` renamed ``.tfrecord`` when azcopy decompressed
   them (10.32 keeps the ``.gz``). A file under its final name is therefore always whole.
4. The staged files are checked against the plan (count, and bytes when known); a
   difference fails with the names. Then the manifest is written and the staging folder
   removed.

The SAS token travels only in azcopy's argv (never in a file, never in a message: every
text that may be shown goes through ``redact``). azcopy's job plans and logs go to a
private temporary folder that is deleted afterwards (azcopy 10.32 redacts ``sig=`` in
them too; checked by the integration tests).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, quote

from .tfrecord import masked_crc32c

SAS_PERMISSION_NAMES = {
    "r": "read", "a": "add", "c": "create", "w": "write", "d": "delete", "x": "delete version",
    "y": "permanent delete", "l": "list", "t": "tags", "f": "filter", "m": "move", "e": "execute",
    "o": "ownership", "p": "permissions", "i": "set immutability policy",
}
STAGING_DIRNAME = ".amlhpc-staging"
MANIFEST_DIRNAME = ".amlhpc-staged"
AZCOPY_TEMP_PREFIX = ".azDownload-"
_SIG_RE = re.compile(r"(?i)(sig=)[^&\s\"'\\]+")


class StageError(RuntimeError):
    """Staging failed; the message is one or a few sentences a person can act on (no secrets)."""


# --- SAS ---------------------------------------------------------------------------------------

def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every ``sig=`` value and each of ``secrets`` replaced by ``REDACTED``."""
    for s in secrets:
        if s and len(s) >= 8:
            text = text.replace(s, "REDACTED")
    return _SIG_RE.sub(r"\1REDACTED", text)


def parse_sas(sas: str) -> dict[str, str]:
    """The query fields of a SAS token (leading ``?`` allowed); the last value wins."""
    token = sas.strip().lstrip("?")
    return {k: v[-1] for k, v in parse_qs(token, keep_blank_values=True).items()}


def _parse_time(value: str) -> datetime | None:
    value = value.strip()
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%MZ", "%Y-%m-%d"):
        try:
            return datetime.strptime(value, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return None


@dataclass
class SasCheck:
    permissions: str
    expiry: datetime | None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_sas(sas: str, needed: str = "rl", now: datetime | None = None) -> SasCheck:
    """Problems with a SAS token for a job that needs ``needed`` permissions.

    errors: no signature, expired, not yet valid, a needed permission missing.
    warnings: permissions beyond ``needed`` (a staging token should be read + list only).
    """
    now = now or datetime.now(timezone.utc)
    fields = parse_sas(sas)
    perms = fields.get("sp", "")
    expiry = _parse_time(fields["se"]) if "se" in fields else None
    check = SasCheck(permissions=perms, expiry=expiry)
    if not fields.get("sig"):
        check.errors.append("The SAS token has no signature (sig=): pass the whole token, as the portal or "
                            "`az storage container generate-sas` prints it.")
        return check
    if "se" in fields and expiry is None:
        check.errors.append(f"The SAS token's expiry se={fields['se']} is not a date azcopy understands.")
    elif expiry is not None and expiry <= now:
        check.errors.append(
            f"The SAS token expired at {expiry:%Y-%m-%d %H:%M} UTC: generate a new one (read and list) "
            "and run again.")
    start = _parse_time(fields["st"]) if "st" in fields else None
    if start is not None and start > now:
        check.errors.append(f"The SAS token is not valid before {start:%Y-%m-%d %H:%M} UTC (st=): "
                            "check the clock or the token's start time.")
    if perms or "sp" in fields:
        missing = [p for p in needed if p not in perms]
        if missing:
            names = ", ".join(SAS_PERMISSION_NAMES.get(p, p) for p in missing)
            check.errors.append(f"The SAS token (sp={perms}) lacks {names} permission, which this job needs: "
                                f"generate one with sp={needed}.")
        extra = [p for p in perms if p not in needed]
        if extra:
            names = ", ".join(SAS_PERMISSION_NAMES.get(p, p) for p in extra)
            check.warnings.append(f"The SAS token grants more than {'read and list' if needed == 'rl' else needed} "
                                  f"(sp={perms}: also {names}): a staging token should be sp={needed} only.")
    return check


# --- command lines ---------------------------------------------------------------------------

def blob_url(account_url: str, container: str, path: str = "") -> str:
    """``<account_url>/<container>[/<path>]`` with the path quoted (no SAS)."""
    base = f"{account_url.rstrip('/')}/{container.strip('/')}"
    path = path.strip("/")
    return f"{base}/{quote(path)}" if path else base


def with_sas(url: str, sas: str) -> str:
    sas = sas.strip().lstrip("?")
    return f"{url}?{sas}" if sas else url


def copy_download_command(azcopy: str, source_url: str, sas: str, dest: str, *,
                          include_pattern: str | None = None, list_file: str | None = None,
                          decompress: bool = True, cap_mbps: float | None = None,
                          overwrite: str = "false", extra: Sequence[str] = ()) -> list[str]:
    """argv of ``azcopy copy`` from a container (or prefix) to a local folder.

    ``--from-to BlobLocal`` is explicit (azcopy cannot infer it for an Azurite URL); files
    land directly under ``dest`` (``--as-subdir=false``), keeping their paths below the source.
    """
    if include_pattern and list_file:
        raise ValueError("give include_pattern or list_file, not both")
    cmd = [azcopy, "copy", with_sas(source_url, sas), dest, "--from-to", "BlobLocal",
           "--recursive", "--as-subdir=false", f"--overwrite={overwrite}", "--output-type", "json",
           "--log-level", "WARNING"]
    if include_pattern:
        cmd += ["--include-pattern", include_pattern]
    if list_file:
        cmd += ["--list-of-files", list_file]
    if decompress:
        cmd.append("--decompress")
    if cap_mbps:
        cmd += ["--cap-mbps", _fmt_number(cap_mbps)]
    cmd += list(extra)
    return cmd


def copy_upload_command(azcopy: str, source: str, dest_url: str, sas: str, *, content_encoding: str | None = None,
                        cap_mbps: float | None = None, overwrite: str = "ifSourceNewer",
                        recursive: bool = True, extra: Sequence[str] = ()) -> list[str]:
    """argv of ``azcopy copy`` from a local path to a container (the checkpoint copy-back uses it too)."""
    cmd = [azcopy, "copy", source, with_sas(dest_url, sas), "--from-to", "LocalBlob",
           f"--overwrite={overwrite}", "--output-type", "json", "--log-level", "WARNING"]
    if recursive:
        cmd.append("--recursive")
    if content_encoding:
        cmd += ["--content-encoding", content_encoding]
    if cap_mbps:
        cmd += ["--cap-mbps", _fmt_number(cap_mbps)]
    cmd += list(extra)
    return cmd


def _fmt_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# --- JSON output -------------------------------------------------------------------------------

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


def run_azcopy(cmd: Sequence[str], env: Mapping[str, str], *, secrets: Iterable[str] = (),
               progress: Callable[[dict[str, Any]], None] | None = None,
               timeout: float | None = None) -> JobResult:
    """Run azcopy with JSON output, feeding each Progress message to ``progress``."""
    secrets = list(secrets)
    start = time.monotonic()
    # Streams azcopy's JSON progress line by line, which run_command cannot; no module here.
    proc = subprocess.Popen(list(cmd),  # pylint: disable=ansible-bad-function
                            env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, bufsize=1)
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


def explain_failure(result: JobResult) -> str:
    """One or two sentences on why an azcopy job failed (no secrets)."""
    text = " ".join(result.errors)
    codes = {t.get("error") for t in result.failed_transfers}
    if "AuthorizationFailure" in text or "AuthenticationFailed" in text or "403" in codes or " 403" in text:
        return ("azcopy was refused access (HTTP 403): the SAS token has expired, lacks read/list permission, "
                "or belongs to another account or container.")
    if "404" in codes or "ContainerNotFound" in text or "ResourceNotFound" in text:
        return "azcopy did not find the container or prefix (HTTP 404): check the account URL, container and prefix."
    if "connection refused" in text.lower() or "no such host" in text.lower() or "dial tcp" in text.lower():
        return "azcopy could not reach the storage endpoint: check the account URL and the network, then rerun."
    if result.failed:
        shown = ", ".join(f"{t['src'].rsplit('/', 1)[-1]} ({t['error']})" for t in result.failed_transfers[:3])
        return (f"azcopy could not copy {result.failed} of {result.total} file(s){': ' + shown if shown else ''}; "
                "rerun to fetch the rest (finished files are kept).")
    first = result.errors[0].splitlines()[0] if result.errors else f"exit status {result.returncode}"
    return f"azcopy failed ({result.status or 'no job status'}): {first}"


# --- staging -----------------------------------------------------------------------------------

def is_gzip_file(path: str) -> bool:
    """True when the file is gzip data and not a TFRecord that happens to start like one."""
    with open(path, "rb") as f:
        head = f.read(12)
    if head[:3] != b"\x1f\x8b\x08":
        return False
    if len(head) == 12 and int.from_bytes(head[8:12], "little") == masked_crc32c(head[:8]):
        return False  # a TFRecord header whose length happens to start with 1f 8b 08
    return True


def final_name(rel: str, decompressed: bool) -> str:
    """The name a staged file gets: ``.gz`` dropped when its content was decompressed."""
    return rel[:-3] if decompressed and rel.endswith(".gz") else rel


def private_azcopy_env(base: Mapping[str, str], workdir: str) -> dict[str, str]:
    """Environment that keeps azcopy's job plans and logs in ``workdir`` (mode 0700)."""
    env = dict(base)
    env["AZCOPY_LOG_LOCATION"] = os.path.join(workdir, "logs")
    env["AZCOPY_JOB_PLAN_LOCATION"] = os.path.join(workdir, "plans")
    env.setdefault("AZCOPY_DISABLE_SYSLOG", "true")
    for key in ("AZCOPY_LOG_LOCATION", "AZCOPY_JOB_PLAN_LOCATION"):
        os.makedirs(env[key], mode=0o700, exist_ok=True)
    return env


def _walk_files(root: str) -> list[str]:
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            out.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return sorted(out)


def remove_partial(staging: str) -> int:
    """Remove azcopy's temporary ``.azDownload-*`` files left by a killed run; return how many."""
    n = 0
    if not os.path.isdir(staging):
        return 0
    for rel in _walk_files(staging):
        if os.path.basename(rel).startswith(AZCOPY_TEMP_PREFIX):
            os.unlink(os.path.join(staging, rel))
            n += 1
    return n


def finalize(staging: str, stage_dir: str, decompress: bool) -> dict[str, int]:
    """Move every complete file from ``staging`` to its final name under ``stage_dir``.

    Returns ``{final relative name: size}``. A ``.gz`` file whose content is no longer gzip
    (azcopy decompressed it) loses the ``.gz``.
    """
    done: dict[str, int] = {}
    for rel in _walk_files(staging):
        if os.path.basename(rel).startswith(AZCOPY_TEMP_PREFIX):
            continue
        src = os.path.join(staging, rel)
        decompressed = decompress and rel.endswith(".gz") and not is_gzip_file(src)
        name = final_name(rel, decompressed)
        dst = os.path.join(stage_dir, name)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)
        done[name] = os.path.getsize(dst)
    return done


@dataclass
class ExpectedFile:
    """A file the plan puts on this node: the blob name and, when known, its size after staging."""

    blob: str
    raw_size: int | None = None
    gzip_encoded: bool = False

    def staged_name(self, decompress: bool) -> str:
        return final_name(self.blob, decompress and self.gzip_encoded)


def verify(stage_dir: str, expected: Sequence[ExpectedFile], decompress: bool, node: str = "this node") -> dict[str, Any]:
    """Compare the staged files with the plan; raise StageError naming the difference."""
    missing, wrong = [], []
    files, total = 0, 0
    for e in expected:
        path = os.path.join(stage_dir, e.staged_name(decompress))
        if not os.path.isfile(path):
            # the .gz may survive when the blob was not gzip-encoded after all
            alt = os.path.join(stage_dir, e.blob)
            if os.path.isfile(alt):
                path = alt
            else:
                missing.append(e.staged_name(decompress))
                continue
        size = os.path.getsize(path)
        files += 1
        total += size
        if e.raw_size is not None and size != e.raw_size:
            wrong.append(f"{e.staged_name(decompress)} ({size} bytes, plan {e.raw_size})")
    planned_bytes = sum(e.raw_size for e in expected if e.raw_size is not None)
    known = all(e.raw_size is not None for e in expected)
    if missing or wrong:
        parts = [f"{node} staged {files} of {len(expected)} planned file(s), {total} bytes"
                 + (f" (plan: {planned_bytes} bytes)" if known else "")]
        if missing:
            parts.append(f"missing {len(missing)}: {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
        if wrong:
            parts.append(f"wrong size {len(wrong)}: {', '.join(wrong[:5])}" + (" ..." if len(wrong) > 5 else ""))
        raise StageError("; ".join(parts) + ". Rerun the stage to fetch them again.")
    return {"files": files, "bytes": total, "planned_files": len(expected),
            "planned_bytes": planned_bytes if known else None}


def _shard_key(source_url: str, include_pattern: str | None, blobs: Sequence[str] | None, decompress: bool) -> str:
    import hashlib
    h = hashlib.sha256()
    h.update(json.dumps([source_url, include_pattern or "", list(blobs or []), decompress]).encode())
    return h.hexdigest()


def _manifest_path(stage_dir: str, rank: int) -> str:
    return os.path.join(stage_dir, MANIFEST_DIRNAME, f"{rank}.json")


def _manifest_ok(stage_dir: str, rank: int, key: str) -> dict[str, int] | None:
    try:
        with open(_manifest_path(stage_dir, rank), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if data.get("key") != key:
        return None
    files = data.get("files", {})
    for name, size in files.items():
        path = os.path.join(stage_dir, name)
        if not os.path.isfile(path) or os.path.getsize(path) != size:
            return None
    return files


def _write_json_atomic(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def shard_is_staged(*, source_url: str, stage_dir: str, rank: int, include_pattern: str | None = None,
                    blobs: Sequence[str] | None = None, decompress: bool = True) -> bool:
    """True when a finished stage of exactly this shard is on disk (what a rerun would skip)."""
    key = _shard_key(source_url, include_pattern, blobs, decompress)
    return _manifest_ok(os.path.abspath(stage_dir), rank, key) is not None


def stage_shard(*, azcopy: str, source_url: str, sas: str, stage_dir: str, rank: int,
                include_pattern: str | None = None, blobs: Sequence[str] | None = None,
                expected: Sequence[ExpectedFile] | None = None, decompress: bool = True,
                cap_mbps: float | None = None, progress: Callable[[dict[str, Any]], None] | None = None,
                env: Mapping[str, str] | None = None, timeout: float | None = None,
                node: str | None = None, progress_file: str | None = None) -> dict[str, Any]:
    """Stage one node's shard into ``stage_dir`` (see the module docstring). Resumable.

    Give ``include_pattern`` (suffix mode) or ``blobs`` (names relative to ``source_url``,
    balanced mode). ``expected`` (from the listing) enables the check against the plan;
    without it the check uses azcopy's own transfer count.

    Returns files, bytes (on disk), bytes_over_wire, seconds, throughput_mb_s (over the wire,
    MB/s), skipped_existing (files a previous run had finished), changed, and a
    progress summary (a sample every 10 %). ``progress_file`` (optional) is rewritten with
    the latest progress, for an operator to watch.
    """
    node = node or f"node {rank}"
    if (include_pattern is None) == (blobs is None):
        raise ValueError("give include_pattern or blobs")
    stage_dir = os.path.abspath(stage_dir)
    key = _shard_key(source_url, include_pattern, blobs, decompress)
    started = time.monotonic()
    have = _manifest_ok(stage_dir, rank, key)
    if have is not None:
        return {"files": len(have), "bytes": sum(have.values()), "bytes_over_wire": 0, "seconds": 0.0,
                "throughput_mb_s": 0.0, "skipped_existing": len(have), "changed": False, "azcopy_runs": 0,
                "progress": []}
    if blobs is not None and not blobs:
        _write_json_atomic(_manifest_path(stage_dir, rank), {"key": key, "files": {}})
        return {"files": 0, "bytes": 0, "bytes_over_wire": 0, "seconds": 0.0, "throughput_mb_s": 0.0,
                "skipped_existing": 0, "changed": False, "azcopy_runs": 0, "progress": []}
    staging = os.path.join(stage_dir, STAGING_DIRNAME, str(rank))
    os.makedirs(staging, exist_ok=True)
    remove_partial(staging)
    samples: list[dict[str, Any]] = []
    last_bucket = [-1]

    def on_progress(p: dict[str, Any]) -> None:
        bucket = int(p.get("percent", 0) // 10)
        if bucket != last_bucket[0] or p.get("final"):
            last_bucket[0] = bucket
            samples.append(p)
        if progress is not None:
            progress(p)
        if progress_file:
            _write_json_atomic(progress_file, {"node": node, **p})

    workdir = tempfile.mkdtemp(prefix="amlhpc-azcopy-")
    try:
        os.chmod(workdir, 0o700)
        run_env = private_azcopy_env(env if env is not None else os.environ, workdir)
        list_file = None
        if blobs is not None:
            list_file = os.path.join(workdir, "list-of-files.txt")
            with open(list_file, "w", encoding="utf-8") as f:
                f.write("".join(f"{b}\n" for b in blobs))
        cmd = copy_download_command(azcopy, source_url, sas, staging, include_pattern=include_pattern,
                                    list_file=list_file, decompress=decompress, cap_mbps=cap_mbps)
        try:
            result = run_azcopy(cmd, run_env, secrets=[sas], progress=on_progress, timeout=timeout)
        except FileNotFoundError as exc:
            raise StageError(f"azcopy was not found at {azcopy}: install it (role stage) or set its path") from exc
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if not result.ok:
        raise StageError(f"{node}: {explain_failure(result)}")
    moved = finalize(staging, stage_dir, decompress)
    if expected is None:
        # No listing: azcopy's count of what this shard holds is the plan.
        names = sorted(moved)
        expected = [ExpectedFile(n, os.path.getsize(os.path.join(stage_dir, n))) for n in names]
        if len(expected) < result.completed + result.skipped:
            raise StageError(f"{node}: azcopy reported {result.completed + result.skipped} file(s), "
                             f"but {len(expected)} are in {stage_dir}. Rerun the stage.")
    checked = verify(stage_dir, expected, decompress, node)
    files = {}
    for e in expected:
        name = e.staged_name(decompress)
        name = name if os.path.isfile(os.path.join(stage_dir, name)) else e.blob
        files[name] = os.path.getsize(os.path.join(stage_dir, name))
    _write_json_atomic(_manifest_path(stage_dir, rank), {"key": key, "files": files})
    shutil.rmtree(staging, ignore_errors=True)
    try:
        os.rmdir(os.path.join(stage_dir, STAGING_DIRNAME))
    except OSError:
        pass
    seconds = time.monotonic() - started
    return {"files": checked["files"], "bytes": checked["bytes"], "bytes_over_wire": result.bytes_over_wire,
            "seconds": round(seconds, 3),
            "throughput_mb_s": round(result.bytes_over_wire / seconds / 1e6, 3) if seconds > 0 else 0.0,
            "skipped_existing": result.skipped, "changed": True, "azcopy_runs": 1, "progress": samples}
