"""Issue 48 item 5: the head cut off from the network while a checkpoint is being copied to the
store, still listed, and nobody acting (``submit_on_node_loss: resume``), on the AmlCompute twin.

Five nodes (four train, one spare), the listing lagging (``Twin(listing_lag=...)``: AmlCompute keeps
the node listed in its old state for the whole test). From the end of epoch 1 the head's path to the
store is slow (``netfaults.slow_uploads``: what it sends to Azurite's port leaves at a rate that
copies the twin's 0.66 MB checkpoint in about 1.5 times epoch 1's training time, everything else at
full speed). Once epoch 3 of 4 (MLPerf's count) has begun, a checkpoint is durable in the store and
a newer one is being copied (rank 0's ``checkpoints/.outbox`` holds it, the manifest does not name
it yet), the head's network goes (``netfaults.cut_off``: its veth down; its processes, the job's
rank 0 included, keep running and hear nothing). Every other rank loses rank 0, and rank 0 loses
every other rank: the head is the node named, not a healthy one. The ONE ``site.yml`` run then
reads the listing again (the head still listed), finds the head does not answer within
``node_loss_probe_timeout`` and leaves it out, moves the head's role and shard to the nodes that
answer, and resumes from the newest checkpoint the store's manifest held when the head was cut off,
never the one cut short: rc 0, four epochs in all.

It prints the time from the cut to training again. docs/performance.md, "Recovery after a lost
node".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

from test_multinode import ANSIBLE_PLAYBOOK, twin_env
from test_twin_node_loss import job_metrics, mllog
from twin_recovery import EPOCHS, recovery_site, store_manifest

from twin import netfaults

BOUND = 45  # submit_node_loss_timeout, as test_twin_resume.py


def copying(twin, run: str, account: str) -> tuple[int, dict] | None:
    """``(epoch, manifest)`` while rank 0 of ``run`` copies (or holds for copying) a checkpoint newer
    than the store's durable newest, with one durable; else None."""
    outbox = job_metrics(twin, run).parent / "checkpoints" / ".outbox"
    try:
        staged = sorted(int(p.name[6:9]) for p in outbox.glob("epoch_[0-9][0-9][0-9].pt"))
    except OSError:
        return None
    manifest = store_manifest(account, run) if staged else None
    if not manifest or not manifest.get("latest") or staged[-1] <= manifest["latest"]["epoch"]:
        return None
    return staged[-1], manifest


def in_epoch(path: Path) -> int:
    """The job's newest epoch with a step logged (0-based; -1: none yet)."""
    try:
        lines = [json.loads(x) for x in path.read_text().splitlines() if x]
    except (OSError, ValueError):
        return -1
    return max((x["epoch"] for x in lines if x.get("kind") == "step"), default=-1)


def epoch_ended(path: Path, epoch: int) -> float | None:
    """Seconds from the first step of ``epoch`` (0-based) to its end, once it ended (else None)."""
    try:
        lines = [json.loads(x) for x in path.read_text().splitlines() if x]
    except (OSError, ValueError):
        return None
    steps = [x["time"] for x in lines if x.get("kind") == "step" and x.get("epoch") == epoch]
    ends = [x["time"] for x in lines if x.get("kind") == "epoch" and x.get("epoch") == epoch]
    return max(ends[0] - steps[0], 0.5) if steps and ends else None


def test_the_head_cut_off_in_epoch_3_is_named_and_the_run_resumes_from_the_durable_checkpoint(tmp_path):
    with recovery_site(tmp_path, "hcut", "hc", (55600, 55800), bound=BOUND, listing_lag=3600,
                       submit_on_node_loss="resume") as site, contextlib.ExitStack() as faults:
        twin, where = site.twin, site.where
        head = twin.ranked()[0]
        store_port = int(site.account.rsplit(":", 1)[1].split("/", 1)[0])
        cut: dict = {}
        stop = threading.Event()

        def slow_store() -> None:
            """From the end of epoch 1 (MLPerf's count), the head's path to the store copies a
            checkpoint in about 1.5 times that epoch's training time (its checkpoint's size over it)."""
            metrics = job_metrics(twin, "hc1")
            while not stop.is_set():
                done = epoch_ended(metrics, 0)
                try:  # written just after the epoch's line
                    size = (metrics.parent / "checkpoints" / "epoch_000.pt").stat().st_size if done else 0
                except OSError:
                    size = 0
                if size:
                    cut["store_kbit"] = max(64, int(size * 8 / 1000 / (1.5 * done)))
                    faults.enter_context(netfaults.slow_uploads(twin, head, store_port, f"{cut['store_kbit']}kbit"))
                    return
                time.sleep(0.2)

        def cut_head_while_copying() -> None:
            metrics = job_metrics(twin, "hc1")
            while not stop.is_set():
                found = copying(twin, "hc1", site.account) if in_epoch(metrics) == 2 else None
                if found:
                    cut["at"], cut["epoch"] = time.time(), in_epoch(metrics)
                    cut["copying"], cut["manifest"] = found
                    netfaults.cut_off(twin, head)
                    time.sleep(1)  # what was on the wire when the link went has landed, or never will
                    cut["manifest_after"] = store_manifest(site.account, "hc1")
                    site.publish_listing()  # AmlCompute's listing now: the head still listed as it was
                    return
                time.sleep(0.25)

        def training_again() -> None:  # the resumed job's first step
            path = job_metrics(twin, "hc1-r2")
            while not stop.is_set():
                try:
                    if '"kind": "step"' in path.read_text():
                        cut["training"] = time.time()
                        cut["load"] = os.getloadavg()[0]
                        return
                except OSError:
                    pass
                time.sleep(0.5)

        site.publish_listing()
        slowed = threading.Thread(target=slow_store, daemon=True)
        slowed.start()
        watcher = threading.Thread(target=cut_head_while_copying, daemon=True)  # in epoch 3 of 4, as MLPerf counts
        again = threading.Thread(target=training_again, daemon=True)
        watcher.start()
        again.start()
        started = time.time()
        try:
            res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(site.inventory), "site.yml", "--tags",
                                  "healthcheck,prepare_dataset,stage,submit", "-e", "submit_name=hc1"], cwd=site.project,
                                 env=twin_env(site.state, site.project), capture_output=True, text=True, timeout=1800, check=False)
        finally:
            stop.set()
            for thread in (slowed, watcher, again):
                thread.join(5)
        (where / "hc1.log").write_text(res.stdout + res.stderr)
        assert "at" in cut, (f"no checkpoint copy was seen in flight in epoch 3 (the head's path to the store slowed "
                             f"to {cut.get('store_kbit')} kbit/s): " + res.stdout[-6000:])
        assert res.returncode == 0, res.stdout[-8000:]
        said = re.sub(r"\s+", " ", res.stdout)
        # The head is the node named, and no healthy node is.
        epoch = cut["epoch"] + 1  # as MLPerf counts
        assert re.search(rf"run hc1 lost node hc-0 in epoch {epoch}: node \S+ \(10\.\S+\), rank 0 of 5", said), said[-6000:]
        assert not re.search(r"lost node hc-[1-4]\b", said), said[-6000:]
        [record] = json.loads((where / "project" / "outputs" / "hc1" / "interruptions.json").read_text())
        assert record["node"] == "hc-0" and record["ranks"] == [0] and record["epoch_reached"] == epoch, record
        # Still listed, it does not answer: left out within the bound, the run goes on by itself.
        assert "Resuming by itself (submit_on_node_loss: resume), attempt 1 of at most 2" in said
        assert "sig=" not in res.stdout
        jobs = json.loads(site.state.read_text())["jobs"]
        assert jobs["hc1"]["status"] == "Failed" and jobs["hc1-r2"]["status"] == "Completed"
        assert "4 process(es) on 4 node(s)" in Path(jobs["hc1-r2"]["logs"]).read_text()
        # Still listed, not answering: handled as lost; the head's role moved to a node that answers.
        assert re.search(r"node hc-0 is listed by AmlCompute as \w+ but did not answer within 15 s: handled as a lost",
                         said), said[-6000:]
        health = json.loads((where / "project" / "outputs" / "hc1" / "health.json").read_text())
        assert "hc-0" in health["excluded"] and "hc-0" not in health["job_nodes"], health
        assert health["rendezvous"] == f"{twin.ranked()[1].private_ip}:29400", health
        # Resumed from the newest checkpoint the store listed when the head went, never the one cut short.
        manifest, in_flight = cut["manifest"], cut["copying"]
        durable = manifest["latest"]["epoch"]
        assert cut["manifest_after"]["latest"]["epoch"] == durable, (cut, "the copy ended before the cut")
        assert durable < in_flight
        out = where / "runs" / "hc1-r2" / "outputs"
        events = mllog(out / "mlperf.log")
        [resumed] = [e["value"] for e in events if e["key"] == "resumed_from_checkpoint"]
        assert resumed["source"] == "store" and resumed["epoch_done"] == durable + 1, (resumed, manifest)
        assert resumed["checkpoint"].endswith(f"epoch_{durable:03d}.pt"), resumed
        assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "epoch_start"] == list(
            range(durable + 2, EPOCHS + 1)), events
        assert json.loads((out / "summary.json").read_text())["epoch"] == EPOCHS - 1
        [interruption] = [e["value"] for e in events if e["key"] == "interruption"]
        split = interruption["time_lost_s"]
        wall = cut.get("training", 0) - cut["at"]
        print(f"\nhead cut off to training again: {wall:.0f} s (wall clock, the resumed job's first step; load "
              f"average {cut.get('load', 0):.1f}); the store's path at {cut['store_kbit']} kbit/s; cut in epoch "
              f"{epoch} while epoch index {in_flight}'s checkpoint was "
              f"copied (the store's newest: epoch index {durable}); the job's own split (s): {json.dumps(split)}; "
              f"the whole run {time.time() - started:.0f} s")
        assert split["waiting_for_rerun"] <= 30, split
        assert split["total"] < 600, split
