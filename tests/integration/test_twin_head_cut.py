"""Issue 48 item 5: the head cut off from the network as a checkpoint is copied, still listed, and
nobody acting (``submit_on_node_loss: resume``), on the AmlCompute twin.

Five nodes (four train, one spare), the listing lagging (``Twin(listing_lag=...)``: AmlCompute keeps
the node listed in its old state for the whole test). At the first step of epoch 3 of 4 (MLPerf's
count), the moment the job's rank 0 starts copying epoch 2's checkpoint to the store, the head's
network goes (``netfaults.cut_off``: its veth down; its processes, the job's rank 0 included, keep
running and hear nothing). Every other rank loses rank 0, and rank 0 loses every other rank: the
head is the node named, not a healthy one. The ONE ``site.yml`` run then reads the listing again
(the head still listed), finds the head does not answer within ``node_loss_probe_timeout`` and
leaves it out, moves the head's role and shard to the nodes that answer, and resumes from the
newest checkpoint the store's manifest held when the head was cut off, never a partial one: rc 0,
four epochs in all. (The twin's checkpoint is small: in the runs measured its copy had ended before
the cut, and the test says which it saw; a copy cut short is the workload tier's
``test_ckpt_store.py::test_a_checkpoint_waiting_for_upload_is_never_dropped_without_a_line``.)

It prints the time from the cut to training again. docs/performance.md, "Recovery after a lost
node".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

from test_multinode import ANSIBLE_PLAYBOOK, twin_env
from test_twin_node_loss import job_metrics, mllog, when_in_epoch
from twin_recovery import EPOCHS, recovery_site, store_manifest

from twin import netfaults

BOUND = 45  # submit_node_loss_timeout, as test_twin_resume.py


def test_the_head_cut_off_in_epoch_3_is_named_and_the_run_resumes_from_the_durable_checkpoint(tmp_path):
    with recovery_site(tmp_path, "hcut", "hc", (55600, 55800), bound=BOUND, listing_lag=3600,
                       submit_on_node_loss="resume") as site:
        twin, where = site.twin, site.where
        head = twin.ranked()[0]
        cut: dict = {}
        stop = threading.Event()

        def cut_head() -> None:
            cut["at"] = time.time()
            netfaults.cut_off(twin, head)
            time.sleep(1)  # what was on the wire when the link went has landed, or never will
            cut["manifest"] = store_manifest(site.account, "hc1")
            site.publish_listing()  # AmlCompute's listing now: the head still listed as it was

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
        watcher = when_in_epoch(job_metrics(twin, "hc1"), 2, cut_head, stop)  # epoch 3 of 4, as MLPerf counts
        again = threading.Thread(target=training_again, daemon=True)
        again.start()
        started = time.time()
        try:
            res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(site.inventory), "site.yml", "--tags",
                                  "healthcheck,prepare_dataset,stage,submit", "-e", "submit_name=hc1"], cwd=site.project,
                                 env=twin_env(site.state, site.project), capture_output=True, text=True, timeout=1800, check=False)
        finally:
            stop.set()
            watcher.join(5)
            again.join(5)
        (where / "hc1.log").write_text(res.stdout + res.stderr)
        assert "at" in cut, res.stdout[-6000:]
        assert res.returncode == 0, res.stdout[-8000:]
        said = re.sub(r"\s+", " ", res.stdout)
        # The head is the node named, and no healthy node is.
        assert re.search(r"run hc1 lost node hc-0 in epoch 3: node \S+ \(10\.\S+\), rank 0 of 5", said), said[-6000:]
        assert not re.search(r"lost node hc-[1-4]\b", said), said[-6000:]
        [record] = json.loads((where / "project" / "outputs" / "hc1" / "interruptions.json").read_text())
        assert record["node"] == "hc-0" and record["ranks"] == [0] and record["epoch_reached"] == 3, record
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
        # Resumed from the newest checkpoint the store listed when the head went, never a partial one.
        manifest = cut["manifest"]
        assert manifest and manifest["latest"], f"no checkpoint was durable when the head was cut off: {manifest}"
        durable = manifest["latest"]["epoch"]
        out = where / "runs" / "hc1-r2" / "outputs"
        events = mllog(out / "mlperf.log")
        [resumed] = [e["value"] for e in events if e["key"] == "resumed_from_checkpoint"]
        assert resumed["source"] == "store" and resumed["epoch_done"] == durable + 1, (resumed, manifest)
        assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "epoch_start"] == list(
            range(durable + 2, EPOCHS + 1)), events
        assert json.loads((out / "summary.json").read_text())["epoch"] == EPOCHS - 1
        [interruption] = [e["value"] for e in events if e["key"] == "interruption"]
        split = interruption["time_lost_s"]
        wall = cut.get("training", 0) - cut["at"]
        in_flight = "epoch 2's upload cut short" if durable < 1 else "epoch 2's checkpoint already durable"
        print(f"\nhead cut off to training again: {wall:.0f} s (wall clock, the resumed job's first step; load "
              f"average {cut.get('load', 0):.1f}); {in_flight} (the store's newest: epoch index {durable}); the "
              f"job's own split (s): {json.dumps(split)}; the whole run {time.time() - started:.0f} s")
        assert split["waiting_for_rerun"] <= 30, split
        assert split["total"] < 600, split
