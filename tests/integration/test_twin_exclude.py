"""Issue 34, items 4 and 5: a bad node is left out, the run goes on with the good ones, and a
rerun after AmlCompute replaced it takes it back, moving only its shard.

Four twin nodes. The head's GPUs report a fault: a stand-in nvidia-smi on that node only,
replaying the recorded query with uncorrectable ECC errors (fixtures of tests/unit/.../health);
the other nodes have no nvidia-smi (the check is skipped there). The user's group_vars ask for
``healthcheck_on_failure: exclude`` with one spare. site.yml (health gate, data set upload,
stage, submit) then:

* names the head and the check in the verdict and in ``outputs/<run>/health.json``;
* plans the shards over the three good nodes: each keeps its shard of the four-node plan and
  takes a part of the head's, and nothing is staged on the head;
* submits the job on all four nodes, as AzureML places it; ``launch.py`` on the head ends
  without training, the three good nodes meet in torchrun's elastic rendezvous on the first
  good node and train: the job's partition check passes, no sample is read twice.

Check mode then says which node would be left out and how many files would move, changing
nothing. Then the head is replaced (a new machine, no fault, empty disks) and the gate and the
stage run again: the gate passes, the new head fetches exactly its own shard, and the others
fetch nothing and hand the head's files back (removed). (The job on every node is what
test_multinode.py runs.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ACCOUNT_KEY, _spawn_azurite, free_port
from project_copy import make_project_copy
from test_multinode import (ANSIBLE_PLAYBOOK, ROOT, TRAIN_ARGS, assert_learned, azureml_state, job_group_vars,
                            twin_env, user_inventory)

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from twin.cluster import Twin, free_base_port  # noqa: E402

FIX = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "health"
TOOLS = "/opt/amlhpc-standin-tools"
NODES = 4


def gpu_fault(twin: Twin, node) -> None:
    """A node whose GPUs report uncorrectable ECC errors: nvidia-smi answers with the recorded query."""
    body = ("#!/bin/sh\ncase \"$*\" in\n  *--query-gpu=*) cat <<'FIXTURE'\n"
            + (FIX / "nvsmi_gpu_ndv4_ecc.csv").read_text()
            + "FIXTURE\n;;\n  *--query-remapped-rows=*) cat <<'FIXTURE'\n"
            + (FIX / "nvsmi_remap_ndv4_ok.csv").read_text() + "FIXTURE\n;;\n  *) exit 2 ;;\nesac\n")
    script = f"mkdir -p {TOOLS} && cat > {TOOLS}/nvidia-smi <<'STANDIN'\n{body}STANDIN\nchmod 0755 {TOOLS}/nvidia-smi"
    assert twin.exec(node, "sh", "-c", script).returncode == 0


def staged(twin: Twin, node) -> set[str]:
    out = twin.exec(node, "bash", "-c", "cd /mnt/scratch/cosmoflow 2>/dev/null && find . -name '*.tfrecord*' "
                    "-not -path './.*' -printf '%P\\n'").stdout
    return set(out.split())


def fetched(stdout: str) -> dict[str, int]:
    """Files each node fetched, from the stage's report lines."""
    return {h: int(n) for h, n in re.findall(r"(hx-\d+): \d+ files, (\d+) fetched", stdout)}


def test_exclude_a_bad_node_then_take_it_back(tmp_path):
    twin = Twin(NODES, tmp_path / "twin", prefix="hx", base_port=free_base_port(NODES, start=54000, stop=54100))
    azurite = None
    try:
        twin.start()
        port = free_port()
        (tmp_path / "azurite").mkdir()
        azurite = _spawn_azurite(port, tmp_path / "azurite", host=twin.gateway)
        ranked = twin.ranked()
        head = ranked[0]
        gpu_fault(twin, head)
        project = make_project_copy(tmp_path / "project")
        group_vars = {
            **job_group_vars(twin),
            # No --n-train: the good nodes' shards differ by a file, and the job reads them evenly.
            "submit_train_args": {k: v for k, v in TRAIN_ARGS.items() if k not in ("n_train", "n_valid")},
            "amlhpc_project_dir": str(project),
            "submit_download_dir": str(tmp_path / "out"),
            "stage_account_url": f"http://{twin.gateway}:{port}/devstoreaccount1",
            "stage_container": "cosmoflow",
            "stage_azcopy_src": str(ROOT / ".tools" / "bin" / "azcopy"),
            "prepare_dataset_src": str(tmp_path / "cosmoflow-src"),
            "prepare_dataset_generate": True,
            "prepare_dataset_train_universes": 1,
            "prepare_dataset_account_key": ACCOUNT_KEY,
            "prepare_dataset_create_container": True,
            "healthcheck_tool_dirs": [TOOLS],
            "healthcheck_fs_files": 2,
            "healthcheck_fs_file_size_mb": 4,
            "healthcheck_on_failure": "exclude",
            "healthcheck_spare_nodes": 1,
        }
        inv = user_inventory(twin, tmp_path / "inventory", "hx", group_vars)
        with open(tmp_path / "inventory" / "group_vars" / "all" / "main.yml", "a") as f:
            f.write("stage_sas: \"{{ lookup('amlhpc.azureml.blob_sas', stage_account_url, container=stage_container, "
                    "account_key=prepare_dataset_account_key) }}\"\n")
        state = azureml_state(twin, tmp_path, audit_reads=True)

        def run(name: str, tags: str = "healthcheck,prepare_dataset,stage,submit",
                *extra: str) -> subprocess.CompletedProcess:
            res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "site.yml", "--tags", tags,
                                  "-e", f"submit_name={name}", *extra],
                                 cwd=project, env=twin_env(state, project), capture_output=True, text=True, timeout=900,
                                 check=False)
            (tmp_path / f"{name}.log").write_text(res.stdout + res.stderr)
            return res

        # 1. The head's GPUs are faulty: it is left out, the three others train.
        first = run("hx1")
        jobs = json.loads(state.read_text())["jobs"]
        logs = Path(jobs["hx1"]["logs"]).read_text() if "hx1" in jobs else ""
        assert first.returncode == 0, first.stdout[-8000:] + logs[-4000:]
        health = json.loads((project / "outputs" / "hx1" / "health.json").read_text())
        assert health["action"] == "exclude" and health["excluded"] == ["hx-0"], health
        assert health["job_nodes"] == ["hx-1", "hx-2", "hx-3"]
        bad = {c["check"]: c for c in health["nodes"]["hx-0"]["checks"]}
        assert bad["gpu_health"]["status"] == "fail" and "uncorrectable ECC" in bad["gpu_health"]["reason"], bad
        assert health["rendezvous"] == f"{ranked[1].private_ip}:29400"
        assert "excluding 1 of 4 node(s)" in first.stdout

        src = tmp_path / "cosmoflow-src"
        every = {str(p.relative_to(src)).removesuffix(".gz") for p in src.rglob("*.tfrecord*")}
        held = {f"hx-{i}": staged(twin, n) for i, n in enumerate(ranked)}  # inventory names, in rank order
        assert held["hx-0"] == set(), "the excluded node was staged"
        assert sum(len(v) for v in held.values()) == len(every) and set().union(*held.values()) == every
        # The three good nodes fetched their shards; nothing was staged for the head.
        counts = fetched(first.stdout)
        assert "hx-0" not in counts and sorted(counts) == ["hx-1", "hx-2", "hx-3"], counts
        assert sum(counts.values()) == len(every)

        # The job ran on all four nodes; the head's launcher ended at once, three nodes trained.
        assert "was excluded by the health gate" in logs and "3 process(es) on 3 node(s)" in logs, logs[-4000:]
        reads = json.loads((tmp_path / "runs" / "hx1" / "reads.json").read_text())
        train = {p.removeprefix("/data/cosmoflow/"): v["count"] for p, v in reads.items() if "/train/" in p}
        epochs = TRAIN_ARGS["epochs"]
        assert set(train) <= every and all(1 <= c <= epochs for c in train.values()), train  # once an epoch at most
        assert_learned(tmp_path / "out")
        # Every good node reads as many files an epoch as the smallest shard (whole batches of 2,
        # one process a node), and the job says how many stay unread.
        smallest = min(len([n for n in held[h] if n.startswith("train/")]) for h in ("hx-1", "hx-2", "hx-3"))
        assert sum(train.values()) == epochs * 3 * (smallest // 2 * 2), (sum(train.values()), smallest)
        assert "stay unread (--uneven-shards even)" in logs, logs[-4000:]

        # 2. Check mode says which node would be left out and how many files would move, and
        # changes nothing (no health.json, no file staged or removed).
        check = run("hx-check", "healthcheck,stage", "--check")
        assert check.returncode == 0, check.stdout[-8000:]
        assert "excluding 1 of 4 node(s) (healthcheck_spare_nodes: 1): hx-0 (gpu_health: " in check.stdout
        moving = len([n for n in every if int(n.rsplit("_", 1)[1][:3]) < 16])  # hx-0's suffixes 000-015
        assert f"Left out by the health gate: hx-0; the plan gives their {moving} file(s)" in check.stdout
        # Against what is staged now (issue 42): those files moved in step 1, nothing would be fetched.
        assert "check mode: 0 file(s) would be fetched now (hx-1 0, hx-2 0, hx-3 0)" in check.stdout, \
            check.stdout[-4000:]
        assert not (project / "outputs" / "hx-check").exists()
        assert {f"hx-{i}": staged(twin, n) for i, n in enumerate(ranked)} == held

        # 3. AmlCompute replaces the head: a new machine with no fault. The gate passes, the new head
        # fetches its own shard only (what moved), the others fetch nothing and give its files back.
        twin.replace_node(head.slot)
        twin.write_nodes_file(tmp_path / "inventory" / "nodes.json")
        twin.save_state(tmp_path / "twin.json")
        second = run("hx2", "healthcheck,stage")
        assert second.returncode == 0, second.stdout[-8000:]
        health = json.loads((project / "outputs" / "hx2" / "health.json").read_text())
        assert health["action"] == "pass" and health["job_nodes"] == ["hx-0", "hx-1", "hx-2", "hx-3"]
        after = {f"hx-{i}": staged(twin, n) for i, n in enumerate(twin.ranked())}
        moved_back = (held["hx-1"] | held["hx-2"] | held["hx-3"]) - (after["hx-1"] | after["hx-2"] | after["hx-3"])
        assert len(after["hx-0"]) == moving and after["hx-0"] == moved_back, "the new head holds its shard only"
        assert fetched(second.stdout) == {"hx-0": moving, "hx-1": 0, "hx-2": 0, "hx-3": 0}
        assert sum(len(v) for v in after.values()) == len(every) and set().union(*after.values()) == every
    finally:
        if azurite is not None:
            os.killpg(azurite.pid, 15)
            azurite.wait(10)
        twin.stop()
