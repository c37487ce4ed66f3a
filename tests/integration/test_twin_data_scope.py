"""Issue 10, defect 1: the job's data scope follows the storage layout, on the twin.

The data set lies where staging leaves it: on node-local scratch each node holds its own
shard; on BeeOND (the twin's shared scratch volume) every node sees all of it. The submit
play (site.yml --tags submit, the user's inventory with beeond_enabled on or off) submits the
job to the twin's AzureML, which runs it on the nodes (2 nodes x 2 processes). Every training
and validation sample is read exactly once in the epoch, across all ranks, in both layouts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_multinode import (ANSIBLE_PLAYBOOK, ROOT, TRAIN_ARGS, azureml_state, job_group_vars, twin_env,
                            user_inventory)

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from twin.cluster import Twin, docker, free_base_port  # noqa: E402

NODES, PROCS = 2, 2


def generate(where: Path) -> list[str]:
    subprocess.run([str(ROOT / ".venv-workload" / "bin" / "python"), "-m", "amlhpc.data.cosmoflow_data", "--out",
                    str(where), "--cube", "16", "--subvolumes", "8", "--train-universes", "2",
                    "--val-universes", "1"], check=True, timeout=300, capture_output=True,
                   env={"PYTHONPATH": str(ROOT / "plugins" / "module_utils"), "PATH": "/usr/bin:/bin"})
    return sorted(str(p.relative_to(where)) for p in where.rglob("*.tfrecord"))


def place(twin: Twin, src: Path, files: list[str], shared: bool, tmp: Path) -> None:
    """Where staging leaves the data: all of it on the shared scratch, or a shard per node."""
    shards = [files] if shared else [files[i::NODES] for i in range(NODES)]
    for node, shard in zip(twin.ranked(), shards):
        part = tmp / f"part-{node.slot}" / "cosmoflow"
        for name in shard:
            (part / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / name, part / name)
        docker("cp", str(part), f"{node.container}:/mnt/scratch/")


@pytest.mark.parametrize("beeond", [False, True], ids=["node-local", "beeond"])
def test_every_sample_read_once_per_epoch(beeond, tmp_path, project):
    with Twin(NODES, tmp_path / "twin", prefix=f"amlhpc-twin-scope-{int(beeond)}", base_port=free_base_port(NODES),
              shared_scratch=beeond) as twin:
        files = generate(tmp_path / "src")
        place(twin, tmp_path / "src", files, beeond, tmp_path)
        group_vars = {**job_group_vars(twin), "beeond_enabled": beeond,
                      # Every file, read once: no subset (test_multinode's n_train is for its 3 nodes),
                      # one epoch.
                      "submit_train_args": {**{k: v for k, v in TRAIN_ARGS.items() if k not in ("n_train", "n_valid")},
                                            "epochs": 1},
                      "submit_process_count_per_node": PROCS, "submit_download_dir": str(tmp_path / "out")}
        inv = user_inventory(twin, tmp_path / "inventory", "scope", group_vars)
        state = azureml_state(twin, tmp_path, audit_reads=True)
        res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "site.yml", "--tags", "submit"], cwd=project,
                             env=twin_env(state, project), capture_output=True, text=True, timeout=900, check=False)
        logs = Path(json.loads(state.read_text())["jobs"]["cosmoflow"]["logs"]).read_text()
        assert res.returncode == 0, res.stdout[-4000:] + logs[-4000:]
        assert f"{NODES * PROCS} process(es) on {NODES} node(s)" in logs
        reads = json.loads((tmp_path / "runs" / "cosmoflow" / "reads.json").read_text())
        counts = {p.removeprefix("/data/cosmoflow/"): v["count"] for p, v in reads.items()}
        assert counts == {name: 1 for name in files}, (
            f"{sum(counts.values())} reads of {len(counts)} files; the data set has {len(files)}")
