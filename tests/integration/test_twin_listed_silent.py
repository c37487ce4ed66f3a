"""Issue 48 item 1: a listed node that does not answer is handled like a lost one.

AmlCompute keeps a dead or hung VM listed as idle for minutes. Three twin nodes with a listing
lag (``Twin(listing_lag=...)``: the environment's, not a product variable); the head is frozen
(``docker pause``: its sshd never answers, as a hung VM's) while the listing still says ``idle``.
Nobody marks the listing. The documented rerun, plain ``site.yml`` with
``healthcheck_on_failure: exclude`` and one spare, then:

* names the head in one sentence within ``node_loss_probe_timeout`` at the start of the node
  phases, and leaves it out;
* runs ssh_trust with the next node as the head (before: "ssh_trust failed at ''"), the gate, the
  stage (the head's shard moves to the two others) and the last look over the two that answer;
* reads the job environment from a node that answers (before: UNREACHABLE on the dead head) and
  trains on the two nodes, rc 0.

Time: 7 minutes on the development machine (AMD EPYC, 2 cores) at a load average of 9 to 14.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import ACCOUNT_KEY, _spawn_azurite, free_port
from project_copy import make_project_copy
from test_multinode import ANSIBLE_PLAYBOOK, ROOT, TRAIN_ARGS, azureml_state, job_group_vars, twin_env, user_inventory

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from twin.cluster import Twin, free_base_port  # noqa: E402

NODES = 3
BOUND = 15  # node_loss_probe_timeout
ANSIBLE_INVENTORY = str(Path(ANSIBLE_PLAYBOOK).with_name("ansible-inventory"))


def staged(twin: Twin, node) -> set[str]:
    out = twin.exec(node, "bash", "-c", "cd /mnt/scratch/cosmoflow 2>/dev/null && find . -name '*.tfrecord*' "
                    "-not -path './.*' -printf '%P\\n'").stdout
    return set(out.split())


def test_a_frozen_head_still_listed_is_left_out_and_the_rerun_recovers(tmp_path):
    import os
    # AmlCompute keeps the hung VM listed as it was for ten minutes: longer than this test.
    twin = Twin(NODES, tmp_path / "twin", prefix="ls", base_port=free_base_port(NODES, start=54600, stop=54700),
                listing_lag=600)
    azurite = None
    try:
        twin.start()
        port = free_port()
        (tmp_path / "azurite").mkdir()
        azurite = _spawn_azurite(port, tmp_path / "azurite", host=twin.gateway)
        group_vars = {
            **job_group_vars(twin),
            "submit_train_args": {**{k: v for k, v in TRAIN_ARGS.items() if k not in ("n_train", "n_valid")},
                                  "epochs": 1},
            "amlhpc_project_dir": str(make_project_copy(tmp_path / "project")),
            "submit_download_dir": str(tmp_path / "out"),
            "stage_account_url": f"http://{twin.gateway}:{port}/devstoreaccount1",
            "stage_container": "cosmoflow",
            "stage_azcopy_src": str(ROOT / ".tools" / "bin" / "azcopy"),
            "prepare_dataset_src": str(tmp_path / "cosmoflow-src"),
            "prepare_dataset_generate": True,
            "prepare_dataset_train_universes": 1,
            "prepare_dataset_account_key": ACCOUNT_KEY,
            "prepare_dataset_create_container": True,
            "healthcheck_fs_files": 2,
            "healthcheck_fs_file_size_mb": 4,
            "healthcheck_on_failure": "exclude",
            "healthcheck_spare_nodes": 1,
            "node_loss_probe_timeout": BOUND,
        }
        inv = user_inventory(twin, tmp_path / "inventory", "ls", group_vars)
        with open(tmp_path / "inventory" / "group_vars" / "all" / "main.yml", "a") as f:
            f.write("stage_sas: \"{{ lookup('amlhpc.azureml.blob_sas', stage_account_url, container=stage_container, "
                    "account_key=prepare_dataset_account_key) }}\"\n")
        state = azureml_state(twin, tmp_path, audit_reads=True)
        # The nodes were seen while they answered (their host keys pinned by the inventory), as in a
        # run before the loss.
        seen = subprocess.run([ANSIBLE_INVENTORY, "-i", str(inv), "--list"], cwd=tmp_path / "project",
                              env=twin_env(state, tmp_path / "project"),
                              capture_output=True, text=True, timeout=300, check=False)
        assert seen.returncode == 0, seen.stderr[-3000:]

        head = twin.ranked()[0]
        twin.freeze(head)  # hung: the listing still says idle, for the lag
        listing = twin.write_nodes_file(tmp_path / "inventory" / "nodes.json")
        assert [n["nodeState"] for n in json.loads(listing.read_text())] == ["idle"] * NODES
        twin.save_state(tmp_path / "twin.json")

        res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "site.yml", "-e", "submit_name=ls1"],
                             cwd=tmp_path / "project", env=twin_env(state, tmp_path / "project"), capture_output=True, text=True, timeout=900, check=False)
        (tmp_path / "ls1.log").write_text(res.stdout + res.stderr)
        jobs = json.loads(state.read_text())["jobs"]
        logs = Path(jobs["ls1"]["logs"]).read_text() if "ls1" in jobs else ""
        assert res.returncode == 0, res.stdout[-8000:] + logs[-3000:]
        # Named in one sentence, within the bound, and left out with the head's role moved.
        assert (f"node ls-0 is listed by AmlCompute as idle but did not answer within {BOUND} s: handled as a lost "
                "node. Left out (healthcheck_spare_nodes: 1): ssh_trust, the health gate, the stage and the last "
                "look run on ls-1, ls-2, its shard moves to them, and the head's role (rendezvous, job environment) "
                "moves from ls-0 to ls-1.") in res.stdout, res.stdout[-8000:]
        assert "ssh_trust failed" not in res.stdout and "UNREACHABLE" not in res.stdout
        health = json.loads((tmp_path / "project" / "outputs" / "ls1" / "health.json").read_text())
        assert health["excluded"] == ["ls-0"] and health["job_nodes"] == ["ls-1", "ls-2"], health
        assert health["rendezvous"] == f"{twin.ranked()[1].private_ip}:29400"
        # The head's shard went to the two that answer; they trained (no data error), on two nodes.
        src = tmp_path / "cosmoflow-src"
        every = {str(p.relative_to(src)).removesuffix(".gz") for p in src.rglob("*.tfrecord*")}
        held = [staged(twin, n) for n in twin.ranked()[1:]]
        assert set().union(*held) == every and sum(len(h) for h in held) == len(every)
        assert jobs["ls1"]["status"] == "Completed" and "2 process(es) on 2 node(s)" in logs, logs[-3000:]
        # Nobody marked the listing: it still says idle.
        assert twin.list_nodes()[0]["nodeState"] == "idle" and not twin.nodes[0].usable
        assert re.search(r"ls-1\s+: ok=\d+ .*failed=0", res.stdout)
    finally:
        twin.thaw(twin.ranked()[0]) if twin.nodes else None
        if azurite is not None:
            os.killpg(azurite.pid, 15)
            azurite.wait(10)
        twin.stop()
