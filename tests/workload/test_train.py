from __future__ import annotations

import json
import sys
import types

import pytest
import torch

from amlhpc.cosmoflow_data import generate
from cosmoflow import train
from conftest import TINY_MODEL


def read_metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_short_cpu_run_learns(tiny_data, tmp_path, master_port):
    out = tmp_path / "outputs"
    rc = train.main(["--data-dir", str(tiny_data), "--epochs", "5", "--batch-size", "4",
                     "--output-dir", str(out), *TINY_MODEL])
    assert rc == 0
    records = read_metrics(out)
    epochs = [r for r in records if r["kind"] == "epoch"]
    steps = [r for r in records if r["kind"] == "step"]
    assert len(epochs) == 5 and len(steps) == 5 * 64 // 4
    assert epochs[-1]["train_loss"] < 0.85 * epochs[0]["train_loss"]
    assert epochs[-1]["val_loss"] < epochs[0]["val_loss"]
    first, last = (sum(s["loss"] for s in chunk) / len(chunk) for chunk in (steps[:16], steps[-16:]))
    assert last < first
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epoch"] == 4 and summary["world_size"] == 1
    state = torch.load(out / "checkpoints" / "last.pt")
    assert state["epoch"] == 4 and state["config"]["cube"] == 16


def test_resume_continues_after_the_last_checkpoint(tiny_data, tmp_path, master_port, monkeypatch):
    out = tmp_path / "outputs"
    args = ["--data-dir", str(tiny_data), "--batch-size", "8", "--output-dir", str(out), *TINY_MODEL]
    args[args.index("--resume") + 1] = "auto"
    assert train.main(["--epochs", "1", *args]) == 0
    monkeypatch.setenv("MASTER_PORT", str(int(master_port) + 1))
    assert train.main(["--epochs", "2", *args]) == 0
    epochs = [r for r in read_metrics(out) if r["kind"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [0, 1]
    assert epochs[1]["step"] == 16  # 8 steps an epoch, counted on from the checkpoint


def test_max_steps_stops_early(tiny_data, tmp_path, master_port):
    out = tmp_path / "o"
    assert train.main(["--data-dir", str(tiny_data), "--epochs", "3", "--max-steps", "3",
                       "--output-dir", str(out), *TINY_MODEL]) == 0
    assert json.loads((out / "summary.json").read_text())["step"] == 3


def test_learning_rate_schedule():
    decay = train.parse_decay("32:0.25,64:0.125")
    assert train.learning_rate(0, 0.016, 0.001, 4, decay) == 0.001
    assert train.learning_rate(2, 0.016, 0.001, 4, decay) == pytest.approx(0.0085)
    assert train.learning_rate(10, 0.016, 0.001, 4, decay) == 0.016
    assert train.learning_rate(40, 0.016, 0.001, 4, decay) == 0.004
    assert train.learning_rate(70, 0.016, 0.001, 4, decay) == 0.002


def test_account_name_becomes_a_blob_url():
    assert train.account_url("mydata") == "https://mydata.blob.core.windows.net"
    assert train.account_url("http://127.0.0.1:10000/devstoreaccount1") == "http://127.0.0.1:10000/devstoreaccount1"


@pytest.fixture()
def fake_stage(monkeypatch, tiny_data):
    """Stands in for cosmoflow.stage (the staging helper's module): records its call and
    'stages' by generating the data set into the stage dir."""
    calls = []

    def stage_for_this_node(**kwargs):
        calls.append(kwargs)
        if kwargs["container"] == "broken":
            raise RuntimeError(f"azcopy failed for {kwargs['account_url']}?{kwargs['sas']}")
        generate(kwargs["stage_dir"], 2, 1, cube=16, subvolumes=32, seed=1)
        return {"files": 96}

    def read_sas(spec):
        kind, _unused, ref = spec.partition(":")
        assert kind == "env"
        import os
        return os.environ[ref]

    module = types.ModuleType("cosmoflow.stage")
    module.stage_for_this_node, module.read_sas = stage_for_this_node, read_sas
    monkeypatch.setitem(sys.modules, "cosmoflow.stage", module)
    monkeypatch.setenv("AMLHPC_STAGE_SAS", "sv=2024&sig=SECRETSIG")
    return calls


def test_staging_hook_stages_then_trains_from_the_stage_dir(fake_stage, tmp_path, master_port, capsys):
    out, stage_dir = tmp_path / "outputs", tmp_path / "stage"
    rc = train.main(["--account", "mydata", "--container", "cosmo", "--stage-dir", str(stage_dir),
                     "--shard-mode", "balanced", "--epochs", "1", "--output-dir", str(out), *TINY_MODEL])
    assert rc == 0
    (call,) = fake_stage
    assert call["account_url"] == "https://mydata.blob.core.windows.net"
    assert call["sas"] == "sv=2024&sig=SECRETSIG"
    assert (call["node_rank"], call["num_nodes"], call["shard_mode"]) == (0, 1, "balanced")
    assert call["stage_dir"] == str(stage_dir)
    assert (stage_dir / "train").is_dir() and (out / "summary.json").exists()
    assert "SECRETSIG" not in capsys.readouterr().out


def test_staging_failure_stops_every_rank_without_leaking_the_sas(fake_stage, tmp_path, master_port, capsys):
    with pytest.raises(SystemExit, match="staging failed"):
        train.main(["--account", "mydata", "--container", "broken", "--stage-dir", str(tmp_path / "s"),
                    "--epochs", "1", "--output-dir", str(tmp_path / "o"), *TINY_MODEL])
    captured = capsys.readouterr()
    assert "azcopy failed" in captured.err and "<SAS>" in captured.err
    assert "SECRETSIG" not in captured.err + captured.out


def test_sas_from_the_workspace_key_vault(monkeypatch):
    from cosmoflow import sas

    class Run:
        @staticmethod
        def get_context():
            return Run()

        def get_secret(self, name):
            return {"cosmo-sas": "sig=FROMKV"}.get(name)

    core = types.ModuleType("azureml.core")
    core.Run = Run
    monkeypatch.setitem(sys.modules, "azureml", types.ModuleType("azureml"))
    monkeypatch.setitem(sys.modules, "azureml.core", core)
    assert sas.resolve_sas("aml-secret:cosmo-sas") == "sig=FROMKV"
    with pytest.raises(RuntimeError, match="'other' is empty or missing"):
        sas.resolve_sas("aml-secret:other")
    with pytest.raises(ValueError, match="keyvault"):
        sas.resolve_sas("keyvault:http://not-https/x")
