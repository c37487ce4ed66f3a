"""Issue 40, items 4 and 6 in the pure parts: the stage is bounded, names what failed, ends with
its controller, and takes over from a dead stage.

azcopy's side comes from its recorded output (fixtures/azcopy, README there), replayed by a
script that then hangs as azcopy did; the end-to-end cases (real azcopy and Azurite, a killed
``ansible-playbook``) are in tests/integration/test_stage_safety.py and the twin's.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from amlhpc.staging.azcopy_lock import LockBusy, holder_gone, process_start, stage_lock, this_holder
from amlhpc.staging.azcopy_model import TIME_LIMIT_FLOOR_S, TIME_LIMIT_UNKNOWN_S, Rates, time_limit
from amlhpc.staging.azcopy_progress import Cancel, explain_failure, job_transfers, log_failures, run_azcopy
from amlhpc.staging.azcopy_watch import ConnectionWatch, reader_gone

FIX = Path(__file__).parent / "fixtures" / "azcopy"


def replay(tmp_path: Path, fixture: str, then: str = "exec sleep 600") -> list[str]:
    """A stand-in azcopy that prints the recorded output, then does ``then``."""
    script = tmp_path / "azcopy"
    script.write_text(f"#!/bin/sh\ncat {FIX / fixture}\n{then}\n")
    script.chmod(0o755)
    return [str(script)]


class FastClock:
    """A monotonic clock that moves ``step`` seconds a reading (the stall rules without the wait)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_lying_blob_stalls_with_every_byte_in_and_is_stopped_by_the_tail_rule(tmp_path):
    clock = FastClock(4.0)  # a reading a poll (0.5 s): the 20 s tail in about 3 s, not 10
    result = run_azcopy(replay(tmp_path, "decompress_stall.jsonl"), {"PATH": "/usr/bin:/bin"}, stall=60,
                        clock=clock)
    assert result.stopped == "stall" and result.all_bytes_in and clock.now < 60
    assert "every byte in but left transfers open" in result.stopped_detail
    assert result.job_id and result.completed == 1 and result.total == 2 and not result.ok
    assert result.returncode != 0  # the stand-in's sleep was ended (its process group)


def test_without_every_byte_in_the_stall_rule_waits_its_own_time(tmp_path):
    """The same silence before the job is whole is the plain stall rule's (60 s), not the tail's."""
    head = "".join(line for line in (FIX / "decompress_stall.jsonl").read_text().splitlines(True)
                   if '"MessageType":"Progress"' not in line)
    (tmp_path / "head.jsonl").write_text(head)
    clock = FastClock(5.0)  # a reading a poll (0.5 s): the 60 s in about 6 s, not 30
    result = run_azcopy(replay(tmp_path, str(tmp_path / "head.jsonl")), {"PATH": "/usr/bin:/bin"}, stall=60,
                        clock=clock)
    assert result.stopped == "stall" and not result.all_bytes_in
    assert "moved nothing for" in result.stopped_detail and clock.now >= 60


def test_the_time_limit_and_a_cancel_stop_azcopy(tmp_path):
    limited = run_azcopy(replay(tmp_path, "decompress_stall.jsonl"), {"PATH": "/usr/bin:/bin"}, timeout=5,
                         stall=None, clock=FastClock(1.0))
    assert limited.stopped == "time limit" and "time limit of 5 s" in limited.stopped_detail
    cancel = Cancel()
    threading.Timer(0.5, cancel.set, args=("the controller's connection closed",)).start()
    started = time.monotonic()
    cancelled = run_azcopy(replay(tmp_path, "decompress_stall.jsonl"), {"PATH": "/usr/bin:/bin"}, cancel=cancel)
    assert cancelled.stopped == "cancel" and time.monotonic() - started < 30
    assert explain_failure(cancelled).startswith("The stage was stopped: the controller's connection closed.")


def test_a_failed_transfer_is_named_with_azcopys_reason(tmp_path):
    """The truncated gzip: azcopy's EndOfJob lists the failed transfer with no reason (or, in
    another run here, not at all); its log gives the reason, and the failure names the blob,
    the reason and the fix."""
    result = run_azcopy(replay(tmp_path, "decompress_truncated.jsonl", "exit 1"), {"PATH": "/usr/bin:/bin"})
    assert result.status == "CompletedWithErrors" and result.failed == 1
    assert all(t["error"] in ("0", "000") for t in result.failed_transfers)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "job.log").write_text((FIX / "decompress_truncated.log").read_text())
    reasons = log_failures(str(logs), secrets=["sig-value"])
    (url, why), = reasons.items()
    assert url.endswith("/v/trunc_002.tfrecord.gz") and why == "error in decompression worker when closing: unexpected EOF"
    result.failed_transfers = [{"src": url, "error": "000", "blob": "trunc_002.tfrecord.gz", "why": why}]
    said = explain_failure(result)
    assert said.startswith("azcopy could not copy 1 of 2 file(s): trunc_002.tfrecord.gz (error in decompression "
                           "worker when closing: unexpected EOF). A blob whose Content-Encoding says gzip")
    assert "prepare_dataset" in said and said.endswith("the files already whole are kept.")


def test_the_open_transfers_come_from_the_job_plan(tmp_path):
    shown = job_transfers(replay(tmp_path, "jobs_show_started.jsonl", "exit 0")[0], "a-job", {"PATH": "/usr/bin:/bin"},
                          "Started")
    assert [t["src"].rsplit("/", 1)[-1] for t in shown] == ["plain_001.tfrecord.gz"]
    assert shown[0]["status"] == "Started" and shown[0]["dst"].endswith("plain_001.tfrecord.gz")
    assert job_transfers("/nonexistent/azcopy", "a-job", {}, "Failed") == []


def test_the_default_time_limit_comes_from_the_staging_model():
    rates = Rates(nic_gbps=24, egress_gbps=200, azcopy_mb_s=600, decompress_mb_s=1600)
    limit, how = time_limit(6_000_000_000, 24_000_000_000, rates, nodes=4, margin=3)
    # decompression: 24 GB at 1.6 GB/s = 15 s; the network 6 GB at 600 MB/s = 10 s
    assert limit == pytest.approx(TIME_LIMIT_FLOOR_S + 3 * 15.0, abs=0.2)
    assert how == "3 x the staging model's 15 s for 6 GB (decompression CPU) + 300 s"
    capped, how = time_limit(6_000_000_000, 6_000_000_000, rates, nodes=4, margin=3, cap_mbps=800)
    assert capped == pytest.approx(TIME_LIMIT_FLOOR_S + 3 * 60.0, abs=0.2) and "(NIC)" in how
    assert time_limit(None, None, rates)[0] == TIME_LIMIT_UNKNOWN_S
    with pytest.raises(ValueError, match="margin must be above 0"):
        time_limit(1, 1, rates, margin=0)


# --- the lock ---------------------------------------------------------------------------------


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_holder_is_gone_only_when_proven(tmp_path):
    me = this_holder()
    assert not holder_gone(me)
    assert holder_gone({**me, "pid": dead_pid()})
    assert holder_gone({**me, "start": str(int(me["start"]) + 1)})  # the pid used again by a later process
    assert not holder_gone({**me, "pid": dead_pid(), "host": "another-node"})
    assert not holder_gone({**me, "pid": dead_pid(), "boot": "another-boot"})
    assert not holder_gone({"pid": dead_pid()})  # no start time, no host: not proven


def hold(path: Path, record: dict, seconds: float) -> subprocess.Popen:
    """Another process holding the flock of ``path`` for ``seconds``, with ``record`` in it."""
    code = ("import fcntl, json, os, sys, time\n"
            f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            f"os.ftruncate(fd, 0); os.write(fd, json.dumps({record!r}).encode())\n"
            "print('held', flush=True)\n"
            f"time.sleep({seconds})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def lock_file(stage: Path) -> Path:
    (stage / ".amlhpc-staged").mkdir(parents=True, exist_ok=True)
    return stage / ".amlhpc-staged" / "0.lock"


def test_a_live_holder_is_waited_for_then_named(tmp_path):
    path = lock_file(tmp_path)
    holder = hold(path, {"pid": 4242, "host": "h", "since": "then"}, 3)
    with pytest.raises(LockBusy) as busy:
        with stage_lock(str(tmp_path), 0, wait=0):
            pass
    assert busy.value.holder["pid"] == 4242
    started = time.monotonic()
    with stage_lock(str(tmp_path), 0, wait=30) as held:  # the holder ends within the wait
        assert held.record["pid"] == os.getpid()
    assert time.monotonic() - started < 30
    holder.wait()


def test_a_dead_holders_temporary_folder_is_removed_by_the_next_stage(tmp_path):
    path = lock_file(tmp_path)
    workdir = Path(tempfile.mkdtemp(prefix="amlhpc-azcopy-test-"))
    (workdir / "plans").mkdir()
    (workdir / "plans" / "job.steV20").write_text("a job plan with a SAS in it")
    me = this_holder()
    path.write_text(json.dumps({**me, "pid": dead_pid(), "workdir": str(workdir)}))
    with stage_lock(str(tmp_path), 0, wait=0) as held:
        assert held.previous["workdir"] == str(workdir)
        assert not workdir.exists()
    # a live holder's or another host's folder stays
    other = Path(tempfile.mkdtemp(prefix="amlhpc-azcopy-test-"))
    path.write_text(json.dumps({**me, "pid": dead_pid(), "host": "elsewhere", "workdir": str(other)}))
    with stage_lock(str(tmp_path), 0, wait=0):
        assert other.exists()
    other.rmdir()
    # and never a folder that is not a stage's temporary one
    path.write_text(json.dumps({**me, "pid": dead_pid(), "workdir": str(tmp_path)}))
    with stage_lock(str(tmp_path), 0, wait=0):
        assert tmp_path.exists()


def test_a_lock_kept_for_a_dead_holder_is_taken_over(tmp_path):
    """The flock is held (a file system that kept it for a holder gone), and the record proves its
    holder gone: the lock file is replaced, and the stage goes on."""
    path = lock_file(tmp_path)
    keeper = hold(path, {**this_holder(), "pid": dead_pid()}, 60)
    try:
        started = time.monotonic()
        with stage_lock(str(tmp_path), 0, wait=20) as held:
            assert held.record["pid"] == os.getpid()
        assert time.monotonic() - started < 15
        fd = os.open(path, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the new file is free again
        os.close(fd)
    finally:
        keeper.kill()
        keeper.wait()


def test_process_start_tells_a_pid_used_again():
    assert process_start(os.getpid()) == this_holder()["start"] != ""
    assert process_start(dead_pid()) == ""


# --- the connection watch ---------------------------------------------------------------------


def test_the_watch_fires_when_the_reader_of_standard_output_is_gone():
    read, write = os.pipe()
    cancel, interrupted = Cancel(), threading.Event()
    try:
        assert not reader_gone(write)
        with ConnectionWatch(cancel, fd=write, poll_s=0.1, grace_s=0.1, interrupt=interrupted.set) as watch:
            time.sleep(0.3)
            assert not cancel.is_set()
            os.close(read)
            assert interrupted.wait(10)
        assert watch.fired and cancel.is_set() and "controller's connection closed" in cancel.reason
    finally:
        os.close(write)


def test_the_watch_leaves_a_file_or_terminal_alone(tmp_path):
    with open(tmp_path / "out", "w") as f:
        with ConnectionWatch(Cancel(), fd=f.fileno(), poll_s=0.1) as watch:
            time.sleep(0.3)
        assert not watch.fired and watch._thread is None  # noqa: SLF001


def test_a_holder_that_does_not_end_is_named_with_what_to_do(tmp_path):
    from amlhpc.staging.azcopy_lock import holder_refusal
    said = holder_refusal("node 0", "/mnt/scratch/cosmoflow", 0, {"pid": 26968, "host": "node-7",
                                                                  "since": "2026-11-27T01:02:03Z"})
    assert said == ("node 0: another stage of this shard is running in /mnt/scratch/cosmoflow (pid 26968 on node-7, "
                    "since 2026-11-27T01:02:03Z) and did not end within 60 s: wait for it to end, or stop it (kill "
                    "that pid; its azcopy ends with it), then rerun, which resumes where it stopped. If that host is "
                    "gone for good, remove /mnt/scratch/cosmoflow/.amlhpc-staged/0.lock.")


class KilledAtBirth(BaseException):
    """What a ``kill -9`` right after a folder is made leaves: nothing after that line runs."""


def test_the_azcopy_folder_is_0700_from_birth_and_recorded_before_it_exists(tmp_path, monkeypatch):
    """Issue 49 item 6 (red on 2.2.0): the stage's azcopy folder (/tmp/amlhpc-azcopy-*, the job
    plans that carry the SAS) survived a ``kill -9`` and the rerun: it was made before the lock
    file named it, so a stage killed in between left a folder no later stage knew of. Killed the
    moment the folder exists, the lock file already names it (the next stage removes it), and it
    was made 0700 whatever the umask."""
    from amlhpc.staging import azcopy_sync
    from amlhpc.staging.azcopy_lock import WORKDIR_PREFIX

    lock_file(tmp_path)
    seen = {}
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, **kw):
        real_mkdir(path, mode, **kw)
        if os.path.basename(str(path)).startswith(WORKDIR_PREFIX):
            seen["path"], seen["mode"] = str(path), os.stat(path).st_mode & 0o777
            raise KilledAtBirth()

    old_umask = os.umask(0)
    monkeypatch.setattr(os, "mkdir", mkdir)
    try:
        with stage_lock(str(tmp_path), 0, wait=0) as held:
            with pytest.raises(KilledAtBirth):
                run = azcopy_sync._Run(
                    source=azcopy_sync.StageSource(azcopy=str(tmp_path / "no-azcopy"),
                                                   source_url="https://a.blob.core.windows.net/c", env={}),
                    plan=azcopy_sync.ShardPlan(stage_dir=str(tmp_path), rank=0, blobs=["a"], decompress=False,
                                               node="n0"),
                    watch=azcopy_sync.StageWatch(limits=azcopy_sync.Limits(stall=0)), stage_dir=str(tmp_path),
                    staging=str(tmp_path / "staging"), held=held, on_progress=lambda _p: None,
                    done=lambda files, **kw: {})
                azcopy_sync._run_copy(run, include_pattern=None, blobs=["a"], limit=(10.0, "test"))
    finally:
        monkeypatch.undo()
        os.umask(old_umask)
    try:
        assert seen["mode"] == 0o700
        recorded = json.loads(lock_file(tmp_path).read_text())
        assert recorded.get("workdir") == seen["path"], recorded
    finally:
        import shutil

        shutil.rmtree(seen.get("path", str(tmp_path / "none")), ignore_errors=True)
