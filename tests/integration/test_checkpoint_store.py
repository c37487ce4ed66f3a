"""Issue 43, item 2: checkpoints that outlive any one node, for real: Azurite and the real azcopy.

train.py (the workload venv, one process) copies each epoch checkpoint to a blob folder in the
background (``--checkpoint-store``), keeps the newest ``--checkpoint-store-keep`` there, and a
new attempt with an empty output folder (a new AzureML job, a lost rank 0) resumes from the
store's newest, checked against the manifest's digest. A store that refuses the copy costs one
line, not the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from amlhpc.data.cosmoflow_data import generate  # noqa: E402

PYTHON = str(ROOT / ".venv-workload" / "bin" / "python")
TRAIN = str(ROOT / "workload" / "train.py")
TINY = ["--cube", "16", "--conv-layers", "2", "--conv-size", "4", "--fc1-size", "16", "--fc2-size", "8",
        "--dropout", "0", "--warmup-epochs", "0", "--base-batch-size", "4", "--lr", "0.01", "--workers", "1",
        "--batch-size", "8"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cosmo16")
    generate(str(root), train_universes=2, val_universes=1, cube=16, subvolumes=32, gzip=False, seed=1)
    return root


def train(data: Path, out: Path, store: str, sas_file: Path, azcopy: str, env: dict, *args: str):
    command = [PYTHON, TRAIN, "--data-dir", str(data), "--output-dir", str(out), *TINY,
               "--checkpoint-store", store, "--checkpoint-sas", f"file:{sas_file}", "--azcopy", azcopy, *args]
    run_env = {k: v for k, v in env.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_"))}
    run_env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    return subprocess.run(command, env=run_env, capture_output=True, text=True, timeout=600, check=False)


def blobs(azurite, container: str, prefix: str) -> dict[str, bytes]:
    client = azurite.service().get_container_client(container)
    return {b.name.removeprefix(prefix): client.download_blob(b.name).readall()
            for b in client.list_blobs(name_starts_with=prefix)}


@pytest.mark.parametrize("copier", ["auto", "azcopy"])
def test_checkpoints_reach_the_store_and_a_new_attempt_resumes_from_it(copier, azurite, azcopy, azcopy_env, data,
                                                                       tmp_path):
    """auto: with a SAS, one HTTP request from the training process; azcopy: the real azcopy."""
    container = f"ckpt-resume-{copier}"
    azurite.service().create_container(container)
    sas = tmp_path / "sas"
    sas.write_text(azurite.container_sas(container, "racwdl"))
    store = f"{azurite.endpoint}/{container}/runs/cosmoflow"

    first = train(data, tmp_path / "attempt1", store, sas, azcopy, azcopy_env, "--epochs", "3",
                  "--checkpoint-store-keep", "2", "--checkpoint-copier", copier)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    held = blobs(azurite, container, "runs/cosmoflow/")
    manifest = json.loads(held.pop("latest.json"))
    # The newest is always there; at most two are kept; the manifest names exactly what the store holds.
    assert manifest["latest"]["name"] == "epoch_002.pt" and manifest["latest"]["epoch"] == 2
    assert set(held) == {e["name"] for e in manifest["checkpoints"]} and 1 <= len(held) <= 2, sorted(held)
    newest = held["epoch_002.pt"]
    assert hashlib.sha256(newest).hexdigest() == manifest["latest"]["sha256"]
    assert len(newest) == manifest["latest"]["bytes"]
    record = json.loads((tmp_path / "attempt1" / "checkpoint-store.json").read_text())
    assert record["durable_epoch"] == 2 and record["failures"] == 0
    assert "sig=" not in first.stdout + first.stderr

    # A new attempt: its output folder is empty, as a new AzureML job's is.
    second = train(data, tmp_path / "attempt2", store, sas, azcopy, azcopy_env, "--epochs", "5",
                   "--checkpoint-store-keep", "2", "--checkpoint-copier", copier)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert f"resuming from the checkpoint store: {store}/epoch_002.pt (epoch 3 done" in second.stdout
    fetched = tmp_path / "attempt2" / "checkpoints" / ".from-store" / "epoch_002.pt"
    assert fetched.read_bytes() == newest
    summary = json.loads((tmp_path / "attempt2" / "summary.json").read_text())
    assert summary["epoch"] == 4 and summary["step"] == 5 * 8  # epochs 3 and 4 added to the store's 3
    events = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in
              (tmp_path / "attempt2" / "mlperf.log").read_text().splitlines() if ":::MLLOG" in line]
    resumed = [e["value"] for e in events if e["key"] == "resumed_from_checkpoint"]
    assert resumed == [{"checkpoint": f"{store}/epoch_002.pt", "source": "store", "epoch_done": 3, "step": 24}]
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "epoch_start"] == [4, 5]
    held = blobs(azurite, container, "runs/cosmoflow/")
    assert json.loads(held.pop("latest.json"))["latest"]["name"] == "epoch_004.pt"
    assert "epoch_004.pt" in held and "epoch_000.pt" not in held and len(held) <= 2


@pytest.mark.parametrize("copier", ["auto", "azcopy"])
def test_a_store_that_refuses_the_copy_costs_a_line_not_the_run(copier, azurite, azcopy, azcopy_env, data, tmp_path):
    azurite.service().create_container(f"ckpt-readonly-{copier}")
    sas = tmp_path / "sas"
    token = azurite.container_sas(f"ckpt-readonly-{copier}", "rl")  # no write permission
    sas.write_text(token)
    store = f"{azurite.endpoint}/ckpt-readonly-{copier}/run"
    res = train(data, tmp_path / "out", store, sas, azcopy, azcopy_env, "--epochs", "2", "--checkpoint-copier", copier)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "did not reach" in res.stdout and "training goes on" in res.stdout, res.stdout[-3000:]
    assert token not in res.stdout + res.stderr and "sig=" not in res.stdout + res.stderr
    record = json.loads((tmp_path / "out" / "checkpoint-store.json").read_text())
    assert record["failures"] >= 1 and record["durable_epoch"] is None
    assert blobs(azurite, f"ckpt-readonly-{copier}", "run/") == {}
    assert os.path.exists(tmp_path / "out" / "checkpoints" / "last.pt")  # the local one as before
