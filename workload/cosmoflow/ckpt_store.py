"""Checkpoints that outlive any one node: rank 0's checkpoints copied to a blob container.

``checkpoints/`` lives in the job's output folder on rank 0's node: gone with that node (and a
new AzureML attempt starts with an empty one anyway), and on BeeOND gone with any node that held
a stripe of it. With ``--checkpoint-store URL`` (``https://ACCOUNT.blob.core.windows.net/
CONTAINER/PREFIX``: the run's folder in a container that outlives the cluster) rank 0 also copies
every epoch checkpoint there, in a thread of its own at a lower CPU priority, at a capped rate
(``--checkpoint-cap-mbps``): with a SAS in one HTTP request from the training process (a tenth of
azcopy's CPU, and the SAS in no command line), with a managed identity through azcopy
(``--checkpoint-copier`` chooses):

1. the checkpoint file is hard-linked into ``checkpoints/.outbox/`` (the epoch rotation of
   ``--keep-checkpoints`` cannot take it away mid-copy); the training goes on at once;
2. the thread hashes it (SHA-256), copies it to ``URL/epoch_NNN.pt``, then replaces ``URL/latest.json`` (the manifest: the newest checkpoint, its
   size and digest, and every checkpoint the store holds). The manifest is written after the
   file, so it never names a checkpoint that is not whole in the store;
3. what is kept: the newest ``--checkpoint-store-keep`` checkpoints (default 3), and of those
   only the ones younger than ``--checkpoint-store-days`` (0: no age limit); the newest is
   always kept. Deletions are decided from the manifest's exact list of names, never a pattern.

One copy at a time: a checkpoint that comes while one is being copied waits; a newer one
replaces it while it waits (the store wants the newest, not every one), and the log says which
epoch was not copied. Work lost to a loss is therefore at most the epochs since the last
checkpoint plus the upload window: the epoch being copied and the one waiting. A copy that fails says
so in one line (the SAS scrubbed) and training goes on; the next epoch tries again. At the end
the job waits for the last copy (``--checkpoint-store-wait`` seconds at most).

The store belongs to its run: the manifest records the run's identity (:func:`identity`: the
run's name, the model's configuration, the data set's fingerprint; the world size and global
batch for the record only, since a run that left a node out resumes on the others). A run of
another identity neither resumes from it nor writes into it: one sentence names both, before
training starts. To start afresh, give the run another name (``submit_name``: its own folder in
the store); nothing is deleted.

Resuming (``--resume auto``, the default): rank 0 takes ``checkpoints/last.pt`` in the output
folder when its SHA-256 matches the one written beside it, else the newest intact
``epoch_NNN.pt`` there (a damaged one is said and skipped, never loaded); with none (a new
AzureML attempt, a lost rank 0) it reads the manifest, checks the identity, fetches the newest
checkpoint and checks its size and digest before training resumes from it; a damaged one is
said, and the newest intact one the manifest lists is taken instead. ``--resume store`` always
takes the store's. The credential: ``--checkpoint-sas`` as ``--sas`` (``env:VAR``, ``file:PATH``,
``keyvault:URL/NAME``, ``aml-secret:NAME``; read, add, create, write, delete and list on the
container), or ``--checkpoint-auth managed_identity`` (the node's identity: no token at all).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from amlhpc.recovery.checkpoint_identity import identity_problem
from amlhpc.staging.azcopy_cmd import copy_upload_command, with_auth_env, with_sas

MANIFEST = "latest.json"
DIGEST = ".sha256"
"""A local checkpoint's SHA-256 is written beside it (``last.pt.sha256``), after the checkpoint."""

OUTBOX = ".outbox"
FROM_STORE = ".from-store"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The store's options (in the outputs group of train.py)."""
    g = p.add_argument_group("durable checkpoints (a blob container that outlives the nodes)")
    g.add_argument("--checkpoint-store", default="",
                   help="https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX: rank 0 copies every epoch checkpoint "
                        "there (azcopy, in the background); --resume auto takes the newest from there when the "
                        "output folder has none")
    g.add_argument("--checkpoint-sas", default="",
                   help="where the store's SAS is, as --sas (env:VAR, file:PATH, keyvault:URL/NAME, aml-secret:NAME); "
                        "permissions racwdl")
    g.add_argument("--checkpoint-auth", choices=("sas", "managed_identity"), default="sas",
                   help="managed_identity: azcopy logs in with the node's identity (AZCOPY_MSI_CLIENT_ID for a "
                        "user-assigned one), no token")
    g.add_argument("--checkpoint-cap-mbps", type=float, default=400.0,
                   help="rate cap of the copy, megabits per second (0: none)")
    g.add_argument("--checkpoint-copier", choices=("auto", "http", "azcopy"), default="auto",
                   help="what copies the checkpoint: http (one request from the training process, the rate capped "
                        "there: a tenth of azcopy's CPU; needs a SAS) or azcopy (--cap-mbps; with a managed identity "
                        "the only way); auto: http with a SAS, azcopy with an identity")
    g.add_argument("--checkpoint-store-keep", type=int, default=3,
                   help="checkpoints kept in the store, newest first (at least 1)")
    g.add_argument("--checkpoint-store-days", type=float, default=0.0,
                   help="checkpoints older than this many days are removed from the store, the newest excepted "
                        "(0: kept as long as --checkpoint-store-keep keeps them)")
    g.add_argument("--checkpoint-store-wait", type=float, default=600.0,
                   help="seconds the job waits at its end for the last copy to finish")


class StoreError(RuntimeError):
    """A copy to or from the store failed; the message names it (no secret in it)."""


@dataclass
class Entry:
    """One checkpoint in the store."""

    name: str
    epoch: int
    step: int
    bytes: int
    sha256: str
    time: float

    @classmethod
    def of(cls, d: dict[str, Any]) -> Entry:
        return cls(str(d["name"]), int(d["epoch"]), int(d["step"]), int(d["bytes"]), str(d["sha256"]),
                   float(d["time"]))


@dataclass
class Manifest:
    """``latest.json``: the newest checkpoint and every one the store holds (oldest first), and
    the identity of the run they belong to (:func:`identity`)."""

    entries: list[Entry] = field(default_factory=list)
    run: str = ""
    identity: dict[str, Any] = field(default_factory=dict)

    @property
    def latest(self) -> Entry | None:
        return self.entries[-1] if self.entries else None

    def dump(self) -> str:
        latest = self.latest
        return json.dumps({"run": self.run, "identity": self.identity, "latest": vars(latest) if latest else None,
                           "checkpoints": [vars(e) for e in self.entries]}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def load(cls, text: str) -> Manifest:
        data = json.loads(text)
        return cls([Entry.of(e) for e in data.get("checkpoints") or []], str(data.get("run") or ""),
                   dict(data.get("identity") or {}))


# --- local checkpoints: written with their digest, read only when it matches ---------------------

def write_digest(path: str) -> None:
    """``path.sha256`` beside the checkpoint at ``path`` (written after it, under a temporary name)."""
    digest, size = sha256_of(path)
    with open(path + DIGEST + ".tmp", "w", encoding="utf-8") as f:
        f.write(f"{digest} {size}\n")
    os.replace(path + DIGEST + ".tmp", path + DIGEST)


def local_problem(path: str) -> str | None:
    """Why the local checkpoint at ``path`` is not to be loaded (None: its digest matches)."""
    try:
        with open(path + DIGEST, encoding="utf-8") as f:
            want, want_size = f.read().split()
    except (OSError, ValueError):
        return f"it has no {os.path.basename(path)}{DIGEST} to check it against (written before 2.3.0, or killed " \
               f"before it was whole)"
    try:
        digest, size = sha256_of(path)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if (digest, str(size)) != (want, want_size):
        return (f"it is not the checkpoint that was written ({size} bytes, SHA-256 {digest[:12]}..., expected "
                f"{want_size} bytes, {want[:12]}...)")
    return None


def newest_local(ckpt_dir: str, log: Callable[[str], None]) -> str | None:
    """The newest intact local checkpoint: ``last.pt``, else ``epoch_NNN.pt`` newest first; each
    damaged one said and skipped, never loaded."""
    try:
        epochs = sorted((f for f in os.listdir(ckpt_dir) if f.startswith("epoch_") and f.endswith(".pt")),
                        reverse=True)
    except OSError:
        return None
    for name in ["last.pt", *epochs]:
        path = os.path.join(ckpt_dir, name)
        if not os.path.exists(path):
            continue
        problem = local_problem(path)
        if problem is None:
            return path
        log(f"checkpoint {path} is not loaded: {problem}; the next older one is tried")
    return None


def retained(entries: Sequence[Entry], keep: int, keep_days: float, now: float) -> tuple[list[Entry], list[Entry]]:
    """(kept, removed) of ``entries`` (any order): the newest ``keep`` by epoch, and of those the
    ones younger than ``keep_days`` days (0: any age); the newest is always kept. Every entry is
    in exactly one of the two lists."""
    ordered = sorted(entries, key=lambda e: (e.epoch, e.step, e.name))
    if not ordered:
        return [], []
    newest = ordered[-1]
    keep = max(1, int(keep))
    kept = [e for e in ordered[-keep:] if e is newest or keep_days <= 0 or now - e.time <= keep_days * 86400]
    removed = [e for e in ordered if e not in kept]
    return kept, removed


class Paced:
    """A file whose reads keep to ``mbps`` megabits per second (0: as fast as it goes)."""

    def __init__(self, f: Any, mbps: float) -> None:
        self.f, self.rate = f, mbps * 1e6 / 8
        self.t0, self.done = time.monotonic(), 0

    def read(self, n: int = -1) -> bytes:
        block = self.f.read(n if n and n > 0 else 1 << 20)
        self.done += len(block)
        if self.rate:
            ahead = self.done / self.rate - (time.monotonic() - self.t0)
            if ahead > 0:
                time.sleep(ahead)
        return block


def run_measured(argv: list[str], env: dict[str, str], timeout: float,
                 nice: int = 0) -> tuple[int | None, str, str, float]:
    """(exit code, None past ``timeout``; stdout; stderr; the CPU seconds of that process alone,
    from wait4: the training process's other children, its DataLoader workers, are not counted).
    ``nice``: started at that lower CPU priority."""
    if nice and shutil.which("nice"):
        argv = ["nice", "-n", str(int(nice)), *argv]  # nice execs the command: wait4 measures azcopy itself
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    chunks: dict[str, bytes] = {}

    def drain(name: str, pipe: Any) -> None:
        chunks[name] = pipe.read()

    readers = [threading.Thread(target=drain, args=(n, p), daemon=True) for n, p in
               (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        _pid, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    for r in readers:
        r.join(timeout=10)
    proc.returncode = os.waitstatus_to_exitcode(status)
    timed_out = os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
    text = {k: v.decode("utf-8", "replace") for k, v in chunks.items()}
    return (None if timed_out else proc.returncode, text.get("out", ""), text.get("err", ""),
            usage.ru_utime + usage.ru_stime)


def azcopy_outcome(stdout: str, stderr: str, returncode: int) -> tuple[bool, str]:
    """(failed, the sentence that says why) of an ``azcopy --output-type json`` run: its exit
    code, its last error message, and the job status of its end-of-job message."""
    errors: list[str] = []
    status = ""
    for line in stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("MessageType") == "Error":
            errors.append(str(message.get("MessageContent", "")).strip().splitlines()[0] if message.get("MessageContent")
                          else "error")
        elif message.get("MessageType") == "EndOfJob":
            try:
                status = json.loads(message.get("MessageContent") or "{}").get("JobStatus", "")
            except ValueError:
                pass
    failed = returncode != 0 or bool(errors) or status not in ("", "Completed")
    if not failed:
        return False, ""
    detail = errors[-1] if errors else (f"job {status}" if status and status != "Completed" else
                                        (stderr.strip().splitlines() or [f"exit code {returncode}"])[-1])
    return failed, detail


def sha256_of(path: str, chunk: int = 8 << 20) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                return digest.hexdigest(), size
            digest.update(block)
            size += len(block)


class CheckpointStore:
    """The run's folder in the store: copies (async), the manifest, retention, the fetch on resume.

    ``url`` has no SAS; ``sas`` is the token ("" with ``auth`` managed_identity). ``run`` names
    the run in the manifest; ``log`` gets one line per event."""

    def __init__(self, url: str, sas: str = "", *, azcopy: str = "azcopy", cap_mbps: float = 0.0, keep: int = 3,
                 keep_days: float = 0.0, auth: str = "sas", msi_client_id: str = "", run: str = "",
                 log: Callable[[str], None] = print, work_dir: str | None = None, nice: int = 10,
                 copier: str = "auto", identity: dict[str, Any] | None = None) -> None:
        if not url.startswith(("https://", "http://")):
            raise ValueError(f"--checkpoint-store must be an https:// URL of a blob container folder, not {url!r}")
        if "?" in url:
            raise ValueError("--checkpoint-store takes the folder's URL without a SAS: give the SAS with "
                             "--checkpoint-sas (env:VAR or file:PATH), never in a URL")
        if auth == "sas" and not sas:
            raise ValueError("the checkpoint store needs a SAS (--checkpoint-sas) or --checkpoint-auth managed_identity")
        self.url, self.sas, self.azcopy = url.rstrip("/"), sas, azcopy
        self.cap_mbps, self.keep, self.keep_days = cap_mbps, max(1, keep), keep_days
        self.auth, self.msi_client_id, self.run, self.log = auth, msi_client_id, run, log
        self.identity = dict(identity or {})
        self.nice = nice  # the copies' CPU priority: they take what training leaves
        if copier == "http" and auth != "sas":
            raise ValueError("--checkpoint-copier http needs a SAS (--checkpoint-sas); with an identity use azcopy")
        self.copier = ("http" if auth == "sas" else "azcopy") if copier == "auto" else copier
        self.work = work_dir or tempfile.mkdtemp(prefix="cosmoflow-ckpt-store-")
        os.makedirs(self.work, exist_ok=True)
        self.manifest: Manifest | None = None
        self.uploaded: list[int] = []
        self.skipped: list[int] = []  # epochs replaced while they waited (each said in the log)
        self.failures = 0
        self.busy_s = 0.0  # seconds the thread spent copying (the training thread spends none)
        self.copy_cpu_s = 0.0  # CPU seconds of the copies: this thread (the digest) and azcopy
        self.handoff_s = 0.0  # seconds the training thread spent in put()
        self._pending: queue.Queue[tuple[str, int, int] | None] = queue.Queue(maxsize=1)
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None

    # --- azcopy ---------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = with_auth_env(os.environ, "managed_identity" if self.auth == "managed_identity" else "sas",
                            msi_client_id=self.msi_client_id)
        env.setdefault("AZCOPY_LOG_LOCATION", os.path.join(self.work, "logs"))
        env.setdefault("AZCOPY_JOB_PLAN_LOCATION", os.path.join(self.work, "plans"))
        # One file at a time, in the background: one connection and a small buffer cost the least CPU.
        env.setdefault("AZCOPY_CONCURRENCY_VALUE", "1")
        env.setdefault("AZCOPY_BUFFER_GB", "0.25")
        return env

    def _scrub(self, text: str) -> str:
        token = self.sas.lstrip("?")
        return text.replace(token, "<SAS>") if token else text

    def _azcopy(self, argv: list[str], what: str, timeout: float = 3600) -> None:
        try:
            returncode, stdout, stderr, cpu = run_measured(argv, self._env(), timeout, nice=self.nice)
        except FileNotFoundError:
            raise StoreError(f"{what}: azcopy is not at {self.azcopy!r} (--azcopy)") from None
        self.copy_cpu_s += cpu
        if returncode is None:
            raise StoreError(f"{what}: azcopy did not finish within {timeout:g} s")
        failed, detail = azcopy_outcome(stdout, stderr, returncode)
        if failed:
            raise StoreError(self._scrub(f"{what}: azcopy failed: {detail[:400]}"))

    def _sas(self) -> str:
        return self.sas if self.auth == "sas" else ""

    def _http_file(self, method: str, name: str, path: str, cap: bool) -> bool:
        """PUT the file at ``path`` to blob ``name``, or GET that blob into it, in one request,
        ``--checkpoint-cap-mbps`` kept by pacing the reads (False: GET found no such blob)."""
        parsed = urllib.parse.urlsplit(with_sas(f"{self.url}/{name}", self.sas))
        conn_class = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
        conn = conn_class(parsed.netloc, timeout=300, blocksize=1 << 20)
        target = f"{parsed.path}?{parsed.query}"
        headers = {"x-ms-version": "2021-08-06"}
        try:
            if method == "PUT":
                size = os.path.getsize(path)
                headers.update({"x-ms-blob-type": "BlockBlob", "Content-Length": str(size),
                                "Content-Type": "application/octet-stream"})
                with open(path, "rb") as f:
                    conn.request("PUT", target, body=Paced(f, self.cap_mbps if cap else 0), headers=headers)
                    answer = conn.getresponse()
                    answer.read()
            else:
                conn.request("GET", target, headers=headers)
                answer = conn.getresponse()
                if answer.status == 200:
                    with open(path, "wb") as f:
                        paced = Paced(answer, self.cap_mbps if cap else 0)
                        while block := paced.read(1 << 20):
                            f.write(block)
                else:
                    answer.read()
        except OSError as exc:
            raise StoreError(self._scrub(f"{method} {name}: {exc}")) from None
        finally:
            conn.close()
        if method == "GET" and answer.status == 404:
            return False
        if answer.status >= 300:
            raise StoreError(self._scrub(f"{method} {name}: the store answered {answer.status} {answer.reason}"))
        return True

    def _upload(self, path: str, name: str, cap: bool = True) -> None:
        if self.copier == "http":
            self._http_file("PUT", name, path, cap)
            return
        argv = copy_upload_command(self.azcopy, path, f"{self.url}/{name}", self._sas(),
                                   cap_mbps=self.cap_mbps if cap and self.cap_mbps else None, overwrite="true",
                                   recursive=False)
        self._azcopy(argv, f"copying {name} to the checkpoint store")

    # Small blobs (the manifest), and removals: one HTTP request from this process where there is
    # a SAS (no azcopy process to start, and the SAS in no command line); azcopy with an identity.
    def _rest(self, method: str, name: str, data: bytes | None = None) -> bytes | None:
        """``method`` on blob ``name`` (None: 404)."""
        headers = {"x-ms-version": "2021-08-06"}
        if method == "PUT":
            headers.update({"x-ms-blob-type": "BlockBlob", "Content-Type": "application/json"})
        request = urllib.request.Request(with_sas(f"{self.url}/{name}", self.sas), data=data, method=method,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:  # nosec B310: the store's https URL
                return answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise StoreError(self._scrub(f"{method} {name}: the store answered {exc.code} {exc.reason}")) from None
        except (urllib.error.URLError, OSError) as exc:
            raise StoreError(self._scrub(f"{method} {name}: {getattr(exc, 'reason', exc)}")) from None

    def _put_small(self, path: str, name: str) -> None:
        if self.auth == "sas":
            with open(path, "rb") as f:
                self._rest("PUT", name, f.read())
        else:
            self._upload(path, name, cap=False)

    def _get_small(self, name: str) -> bytes | None:
        if self.auth == "sas":
            return self._rest("GET", name)
        dest = os.path.join(self.work, f"get-{os.getpid()}-{time.monotonic_ns()}")
        try:
            self._download(name, dest)
        except StoreError as exc:
            missing = ("404", "BlobNotFound", "does not exist", "ResourceNotFound", "was not found", "NotFound")
            if any(s in str(exc) for s in missing):
                return None
            raise
        try:
            with open(dest, "rb") as f:
                return f.read()
        finally:
            os.unlink(dest)

    def _download(self, name: str, dest: str) -> None:
        if self.copier == "http":
            if not self._http_file("GET", name, dest, cap=True):
                raise StoreError(f"fetching {name} from the checkpoint store: it was not found")
            return
        argv = [self.azcopy, "copy", with_sas(f"{self.url}/{name}", self._sas()), dest, "--from-to", "BlobLocal",
                "--overwrite=true", "--output-type", "json", "--log-level", "WARNING"]
        if self.cap_mbps:
            argv += ["--cap-mbps", f"{self.cap_mbps:g}"]
        self._azcopy(argv, f"fetching {name} from the checkpoint store")

    def _remove(self, name: str) -> None:
        if self.auth == "sas":
            self._rest("DELETE", name)
            return
        argv = [self.azcopy, "remove", with_sas(f"{self.url}/{name}", self._sas()), "--from-to", "BlobTrash",
                "--output-type", "json", "--log-level", "WARNING"]
        self._azcopy(argv, f"removing {name} from the checkpoint store", timeout=600)

    # --- the manifest -----------------------------------------------------------------------------
    def read_manifest(self) -> Manifest | None:
        """The store's manifest (None: the store holds no checkpoint of this run yet)."""
        data = self._get_small(MANIFEST)
        return None if data is None else Manifest.load(data.decode("utf-8"))

    # --- copies (the background thread) --------------------------------------------------------------
    def put(self, path: str, epoch: int, step: int) -> None:
        """Copy the checkpoint at ``path`` to the store, in the background; returns at once."""
        t0 = time.perf_counter()
        self._put(path, epoch, step)
        self.handoff_s += time.perf_counter() - t0

    def _put(self, path: str, epoch: int, step: int) -> None:
        outbox = os.path.join(os.path.dirname(path), OUTBOX)
        os.makedirs(outbox, exist_ok=True)
        staged = os.path.join(outbox, f"epoch_{epoch:03d}.pt")  # one name per checkpoint: never one being copied
        if os.path.exists(staged):
            os.unlink(staged)
        try:
            os.link(path, staged)
        except OSError:  # no hard links here (some shared file systems): a copy, still off the main loop's files
            shutil.copyfile(path, staged)
        if self._thread is None:
            self._thread = threading.Thread(target=self._worker, name="cosmoflow-ckpt-store", daemon=True)
            self._thread.start()
        with self._lock:
            self._idle.clear()
            try:  # a newer checkpoint replaces one still waiting: said, never silently
                older = self._pending.get_nowait()
                if older is not None:
                    self._discard(older[0])
                    self.skipped.append(older[1])
                    self.log(f"checkpoint store: the checkpoint of epoch {older[1]} is not copied: the copy before it "
                             f"is still running and epoch {epoch}'s replaces it (the store falls behind: a loss now "
                             f"costs the epochs since the store's newest, --checkpoint-cap-mbps or a faster store "
                             f"narrows that)")
            except queue.Empty:
                pass
            self._pending.put_nowait((staged, epoch, step))

    def _discard(self, staged: str) -> None:
        try:
            os.unlink(staged)
        except OSError:
            pass

    def _worker(self) -> None:
        if self.nice:  # this thread (the digest, the requests) yields to training: Linux nices a thread alone
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
            except (AttributeError, OSError):
                pass
        while True:
            item = self._pending.get()
            if item is None:
                return
            staged, epoch, step = item
            t0, cpu0 = time.monotonic(), time.thread_time()
            try:
                self.copy(staged, epoch, step)
            except (StoreError, OSError, ValueError) as exc:
                self.failures += 1
                self.log(f"checkpoint store: the checkpoint of epoch {epoch} did not reach {self.url}: "
                         f"{self._scrub(str(exc))}; training goes on, the next epoch's is tried")
            finally:
                self._discard(staged)
                self.busy_s += time.monotonic() - t0
                self.copy_cpu_s += time.thread_time() - cpu0
                with self._lock:
                    if self._pending.empty():
                        self._idle.set()

    def copy(self, path: str, epoch: int, step: int) -> Entry:
        """Copy one checkpoint, then the manifest, then remove what is no longer kept (synchronous)."""
        if self.manifest is None:
            self.manifest = self.read_manifest() or Manifest(run=self.run, identity=self.identity)
        problem = identity_problem(self.manifest.identity, self.identity, self.url) if self.identity else None
        if problem:  # never into another run's store, nor remove what it keeps
            raise StoreError(problem)
        digest, size = sha256_of(path)
        name = f"epoch_{epoch:03d}.pt"
        self._upload(path, name)
        entry = Entry(name, epoch, step, size, digest, time.time())
        entries = [e for e in self.manifest.entries if e.name != name] + [entry]
        kept, removed = retained(entries, self.keep, self.keep_days, time.time())
        manifest = Manifest(kept, self.run or self.manifest.run, self.identity or self.manifest.identity)
        local = os.path.join(self.work, MANIFEST)
        with open(local, "w", encoding="utf-8") as f:
            f.write(manifest.dump())
        self._put_small(local, MANIFEST)
        self.manifest = manifest
        self.uploaded.append(epoch)
        for old in removed:  # after the manifest: it never names a removed checkpoint
            try:
                self._remove(old.name)
            except StoreError as exc:
                self.log(f"checkpoint store: {self._scrub(str(exc))} (kept; removed at the next copy)")
        self.log(f"checkpoint store: epoch {epoch} is durable at {self.url}/{name} ({size / 1e6:.1f} MB); the store "
                 f"keeps {', '.join(e.name for e in kept)}")
        return entry

    def wait(self, timeout: float) -> bool:
        """Until no copy is pending or running (False when ``timeout`` seconds passed first)."""
        return self._idle.wait(timeout)

    def close(self, timeout: float) -> bool:
        done = self.wait(timeout)
        if self._thread is not None and done:
            self._pending.put(None)
            self._thread.join(timeout=5)
        return done

    # --- resume ------------------------------------------------------------------------------------
    def fetch(self, dest_dir: str) -> tuple[str, Entry] | None:
        """The newest intact checkpoint of this run, fetched into ``dest_dir/.from-store`` and
        checked (size and SHA-256): (its local path, its entry); None where the store holds none.
        A store of another run is refused before anything is fetched; a damaged or missing
        checkpoint is said, and the next older one the manifest lists is tried."""
        manifest = self.read_manifest()
        if manifest is None or manifest.latest is None:
            return None
        problem = identity_problem(manifest.identity, self.identity, self.url) if self.identity else None
        if problem:
            raise StoreError(problem)
        if self.identity and not manifest.identity:
            self.log(f"checkpoint store: {self.url}'s manifest records no run identity (written before 2.3.0): "
                     f"resumed as this run's, and recorded as this run's at the next copy")
        self.manifest = manifest
        folder = os.path.join(dest_dir, FROM_STORE)
        os.makedirs(folder, exist_ok=True)
        damaged: list[str] = []
        for entry in reversed(manifest.entries):
            local = os.path.join(folder, entry.name)
            try:
                self._download(entry.name, local)
                digest, size = sha256_of(local)
            except (StoreError, OSError) as exc:
                why = f"it could not be fetched ({self._scrub(str(exc))})"
            else:
                if (digest, size) == (entry.sha256, entry.bytes):
                    if damaged:
                        self.log(f"checkpoint store: {'; '.join(damaged)}: resuming falls back to {entry.name}, the "
                                 f"newest intact checkpoint the manifest lists (epoch {entry.epoch + 1} done)")
                    return local, entry
                why = (f"it is not the checkpoint the manifest names ({size} bytes, SHA-256 {digest[:12]}..., "
                       f"expected {entry.bytes} bytes, {entry.sha256[:12]}...)")
            with contextlib.suppress(OSError):
                os.unlink(local)  # never loaded
            damaged.append(f"{self.url}/{entry.name} is not loaded: {why}")
            self.log(f"checkpoint store: {damaged[-1]}")
        raise StoreError(f"{self.url} holds no intact checkpoint: {'; '.join(damaged)}")


def from_args(args: argparse.Namespace, log: Callable[[str], None], run: str = "",
              identity: dict[str, Any] | None = None) -> CheckpointStore | None:
    """The store of ``--checkpoint-store`` (None without one); the SAS resolved as ``--sas`` is."""
    if not args.checkpoint_store:
        return None
    sas = ""
    if args.checkpoint_auth == "sas":
        if not args.checkpoint_sas:
            raise SystemExit("--checkpoint-store needs --checkpoint-sas (env:VAR, file:PATH, keyvault:URL/NAME, "
                             "aml-secret:NAME) or --checkpoint-auth managed_identity")
        from cosmoflow.sas import resolve_sas
        try:
            sas = resolve_sas(args.checkpoint_sas)
        except (ValueError, RuntimeError) as exc:
            raise SystemExit(f"--checkpoint-sas: {exc}") from None
    try:
        return CheckpointStore(args.checkpoint_store, sas, azcopy=args.azcopy, cap_mbps=args.checkpoint_cap_mbps,
                               keep=args.checkpoint_store_keep, keep_days=args.checkpoint_store_days,
                               auth=args.checkpoint_auth, msi_client_id=os.environ.get("AZCOPY_MSI_CLIENT_ID", ""),
                               run=run, log=log, copier=args.checkpoint_copier, identity=identity)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def warn(message: str) -> None:
    print(f"[cosmoflow] {message}", file=sys.stderr, flush=True)


def resume_path(resume: str, ckpt_dir: str, store: CheckpointStore | None,
                log: Callable[[str], None]) -> tuple[str | None, str]:
    """Rank 0: (the checkpoint file to resume from or None, where it came from: ``local``,
    ``store`` or ``given``) for ``--resume``: ``auto`` the output folder's ``last.pt``, else
    the store's newest; ``store`` the store's newest; ``none`` nothing; else that file."""
    if resume == "none":
        return None, ""
    if resume not in ("auto", "store"):
        return resume, "given"
    if resume == "auto":
        local = newest_local(ckpt_dir, log)
        if local is not None:
            return local, "local"
    if store is None:
        if resume == "store":
            raise SystemExit("--resume store needs --checkpoint-store")
        return None, ""
    try:
        fetched = store.fetch(ckpt_dir)
    except StoreError as exc:
        raise SystemExit(f"--resume {resume}: {exc}") from None
    if fetched is None:
        if resume == "store":
            raise SystemExit(f"--resume store: {store.url} holds no checkpoint ({MANIFEST} is missing)")
        log(f"no checkpoint in {ckpt_dir} nor in {store.url}: training starts from the beginning")
        return None, ""
    path, entry = fetched
    log(f"resuming from the checkpoint store: {store.url}/{entry.name} (epoch {entry.epoch + 1} done, step "
        f"{entry.step}; {entry.bytes / 1e6:.1f} MB, SHA-256 checked)")
    return path, "store"


def note_resume(state: dict[str, Any] | None, source: str, store: CheckpointStore | None, mllog: Any, rec: Any,
                environ: dict[str, str] | None = None) -> dict[str, Any] | None:
    """Rank 0, before the first epoch: the MLPerf log and metrics.jsonl say where training
    resumes from (``resumed_from_checkpoint``) and, after a node loss
    (``AMLHPC_INTERRUPTION``, JSON from the submit role), the interruption: the run it
    follows, the node lost and what was seen, the epoch reached, and the time lost split into
    detection, the wait for the rerun, re-gating and re-staging, and restart (until now)."""
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    if state is not None:
        where = state.get("path", "")
        if source == "store" and store is not None and store.manifest and store.manifest.latest:
            where = f"{store.url}/{store.manifest.latest.name}"
        out["resumed_from_checkpoint"] = {"checkpoint": where, "source": source, "epoch_done": int(state["epoch"]) + 1,
                                          "step": int(state["step"])}
        mllog.event("resumed_from_checkpoint", out["resumed_from_checkpoint"])
    raw = environ.get("AMLHPC_INTERRUPTION", "")
    if raw:
        try:
            note = json.loads(raw)
        except ValueError:
            note = None
        if isinstance(note, dict):
            now = time.time()
            lost = note.get("lost_at")
            split = dict(note.get("time_lost_s") or {})
            if note.get("submitted_at"):
                split["restart"] = round(now - float(note["submitted_at"]), 1)
            if lost:
                split["total"] = round(now - float(lost), 1)
            note["time_lost_s"] = split
            if state is not None:
                note["resumed_epoch"] = int(state["epoch"]) + 2  # MLPerf numbers epochs from 1
            out["interruption"] = note
            mllog.event("interruption", note)
            rec.log("interrupted before: " + ", ".join(f"{k} {v}" for k, v in note.items() if k not in ("time_lost_s",))
                    + "; time lost (s): " + ", ".join(f"{k} {v}" for k, v in split.items()))
    if out:
        rec.record("resume", int(state["step"]) if state else 0, **out)
    return out or None


def finish(store: CheckpointStore, wait_s: float, record_path: str, log: Callable[[str], None]) -> dict[str, Any]:
    """At the end of training: wait for the last copy (``wait_s`` at most), then record what the
    store holds (``checkpoint-store.json`` beside the other outputs)."""
    t0 = time.monotonic()
    done = store.close(wait_s)
    latest = store.manifest.latest if store.manifest else None
    record = {"url": store.url, "uploaded_epochs": list(store.uploaded), "failures": store.failures,
              "copy_seconds": round(store.busy_s, 2), "copy_cpu_seconds": round(store.copy_cpu_s, 3),
              "handoff_seconds": round(store.handoff_s, 6), "waited_at_end_s": round(time.monotonic() - t0, 2),
              "durable_epoch": latest.epoch if latest else None,
              "kept": [e.name for e in store.manifest.entries] if store.manifest else []}
    if not done:
        log(f"checkpoint store: the last copy did not finish within {wait_s:g} s (--checkpoint-store-wait); the store "
            f"holds epoch {record['durable_epoch']}")
    os.makedirs(os.path.dirname(record_path) or ".", exist_ok=True)
    with open(record_path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
    return record
