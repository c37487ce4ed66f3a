"""Fidelity to the MLPerf HPC CosmoFlow reference (issue 36, item 4): the epoch default, the
MLPerf keys, staging inside the timed run, unequal node shards refused, one fixed
``--n-train`` subset. docs/workload.md cites the reference for each rule."""

from __future__ import annotations

import json
import os
import shutil
import sys
import types

import pytest
from conftest import TINY_MODEL
from cosmoflow import train
from cosmoflow.schedule import parse_decay

SMALL = ["--epochs", "1", "--n-train", "32", "--n-valid", "16"]


def mllog_events(out):
    return [json.loads(line[len(":::MLLOG "):]) for line in (out / "mlperf.log").read_text().splitlines()]


def test_epochs_default_to_the_references_128_so_every_decay_boundary_applies():
    args = train.build_parser().parse_args([])
    assert args.epochs == 128  # configs/cosmo.yaml: n_epochs 128
    assert all(epoch < args.epochs for epoch, _unused in parse_decay(args.decay))


def test_the_log_holds_the_seed_and_the_number_of_ranks(tiny_data, tmp_path, master_port):
    out = tmp_path / "o"
    assert train.main(["--data-dir", str(tiny_data), *SMALL, "--seed", "7", "--output-dir", str(out),
                       *TINY_MODEL]) == 0
    events = mllog_events(out)
    values = {e["key"]: e["value"] for e in events if e["event_type"] == "POINT_IN_TIME"}
    assert values["seed"] == 7 and values["number_of_ranks"] == 1 and values["number_of_nodes"] == 1
    keys = [e["key"] for e in events]
    # Logged in init, as the submission's other facts.
    assert keys.index("init_start") < keys.index("seed") < keys.index("init_stop")
    assert keys.index("init_start") < keys.index("number_of_ranks") < keys.index("init_stop")


@pytest.fixture()
def copy_stage(monkeypatch, tiny_data):
    """Stands in for cosmoflow.stage: 'stages' by copying the data set into the stage dir."""
    def stage_for_this_node(**kwargs):
        shutil.copytree(tiny_data, kwargs["stage_dir"], dirs_exist_ok=True)
        return {"files": 96}

    module = types.ModuleType("cosmoflow.stage")
    module.stage_for_this_node = stage_for_this_node
    module.read_sas = lambda spec: os.environ[spec.partition(":")[2]]
    monkeypatch.setitem(sys.modules, "cosmoflow.stage", module)
    monkeypatch.setenv("AMLHPC_STAGE_SAS", "sv=2024&sig=SECRETSIG")


def test_staging_is_logged_inside_the_timed_run_as_the_reference_stages(copy_stage, tmp_path, master_port):
    """mlcommons/hpc cosmoflow: init_stop and run_start, then staging_start/stop in
    get_datasets; init stays short whatever the data set's size (init_stop must come within
    30 minutes of init_start)."""
    out = tmp_path / "o"
    assert train.main(["--account", "mydata", "--container", "cosmo", "--stage-dir", str(tmp_path / "stage"),
                       *SMALL, "--output-dir", str(out), *TINY_MODEL]) == 0
    keys = [e["key"] for e in mllog_events(out)]
    order = [keys.index(k) for k in ("init_start", "init_stop", "run_start", "staging_start", "staging_stop",
                                     "epoch_start", "run_stop")]
    assert order == sorted(order), keys


def test_n_train_reads_one_fixed_subset_the_first_files_by_name(tiny_data, tmp_path, master_port):
    """The reference takes the first n_train files (sorted) and shuffles within them every
    epoch. Every training file after the first 32 is damaged (a flipped byte fails its CRC):
    a run that draws another subset in some epoch reads one of them and stops."""
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    files = sorted((data / "train").iterdir())
    assert len(files) == 64
    for path in files[32:]:
        raw = bytearray(path.read_bytes())
        raw[-8] ^= 0xFF
        path.write_bytes(bytes(raw))
    args = list(TINY_MODEL)
    args[args.index("--workers") + 1] = "0"
    out = tmp_path / "o"
    assert train.main(["--data-dir", str(data), "--epochs", "3", "--n-train", "32", "--n-valid", "16",
                       "--output-dir", str(out), *args]) == 0
    events = [e for e in mllog_events(out) if e["key"] in ("train_samples", "eval_samples")]
    assert [(e["key"], e["value"]) for e in events] == [("train_samples", 32), ("eval_samples", 16)]
