"""Fidelity to the MLPerf HPC CosmoFlow reference (issue 36, item 4): the epoch default, the
MLPerf keys, staging inside the timed run, unequal node shards refused, one fixed
``--n-train`` subset. docs/workload.md cites the reference for each rule."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types

import pytest
from conftest import HANG_S, TINY_MODEL, WORKLOAD, end_group, free_port
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


def _can_unshare() -> bool:
    try:
        proc = subprocess.run(["unshare", "--uts", "true"], capture_output=True, timeout=HANG_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _two_nodes(data_dirs, out, *extra):
    """Two processes, each on a node of its own: its own hostname (a UTS namespace, so the
    ranks' all-gathered hostnames make two nodes) and its own data folder, started the way
    mpirun starts them (OpenMPI variables); the network is the machine's."""
    port, procs = free_port(), []
    for rank, data_dir in enumerate(data_dirs):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "OMPI_", "PMI_"))}
        env |= {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "OMPI_COMM_WORLD_RANK": str(rank),
                "OMPI_COMM_WORLD_SIZE": str(len(data_dirs)), "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "AZ_BATCH_MASTER_NODE": f"127.0.0.1:{port}"}
        cmd = [sys.executable, str(WORKLOAD / "train.py"), "--data-dir", str(data_dir),
               "--data-scope", "node", "--batch-size", "4", "--output-dir", str(out / str(rank)),
               *TINY_MODEL, *extra]
        procs.append(subprocess.Popen(["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                                       f"wfid-node{rank}", *cmd],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    try:
        outputs = [p.communicate(timeout=HANG_S)[0] for p in procs]
    finally:
        for p in procs:
            end_group(p)
    return [p.returncode for p in procs], outputs


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare --uts (root) to give each process a hostname")
def test_unequal_node_shards_are_refused_and_n_train_reads_them_evenly(tiny_data, tmp_path):
    """Node 0 holds 34 training files, node 1 30: today's code cut both to 30 without a word."""
    shards = [tmp_path / "node0", tmp_path / "node1"]
    train_files = sorted((tiny_data / "train").iterdir())
    valid_files = sorted((tiny_data / "validation").iterdir())
    for shard, train_part, valid_part in zip(shards, (train_files[:34], train_files[34:]),
                                             (valid_files[:16], valid_files[16:])):
        for split, part in (("train", train_part), ("validation", valid_part)):
            (shard / split).mkdir(parents=True)
            for f in part:
                (shard / split / f.name).symlink_to(f)
    codes, outputs = _two_nodes(shards, tmp_path / "refused", "--epochs", "1")
    sentence = ("train: data scope node reads the same number of files on every node, but the shards differ "
                "(34 files on node 0; 30 on node 1); stage shards of one size, or give --n-train a "
                "multiple of 2 up to 60.")
    assert codes[0] != 0 and codes[1] != 0
    for output in outputs:
        assert "2 process(es) on 2 node(s)" in outputs[0] and sentence in output, output[-3000:]
    codes, outputs = _two_nodes(shards, tmp_path / "even", "--epochs", "1", "--n-train", "60")
    assert codes == [0, 0], "\n".join(o[-3000:] for o in outputs)
    summary = json.loads((tmp_path / "even" / "0" / "summary.json").read_text())
    assert summary["num_nodes"] == 2 and summary["step"] == 30 // 4
