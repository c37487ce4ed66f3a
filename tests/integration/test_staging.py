"""Staging end to end: gzip-encoded upload to Azurite, plan, stage with the real azcopy.

Covers the issue's acceptance: plans for 1, 3, 4, 5 and 70 nodes; every file staged exactly
once and byte-identical to the original after decompression; azcopy killed mid-run and
Azurite stopped mid-run, then a rerun completes without fetching finished files again and
without a half-written file ever under a final name; an expired SAS is one sentence; the
SAS is in no file left behind.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from staging_helpers import ROOT, WORKLOAD, assert_identical_subset, upload_dataset

from amlhpc.staging.azcopy import STAGING_DIRNAME, StageError
from amlhpc.sdk.blob_listing import list_blobs
from amlhpc.data.cosmoflow_data import generate, sample_name
from amlhpc.staging.shards import plan_shards

sys.path.insert(0, str(WORKLOAD))
from cosmoflow.stage import read_sas, stage_for_this_node  # noqa: E402


@pytest.fixture(scope="module")
def dataset(azurite, tmp_path_factory):
    """2 training + 1 validation universes (192 files, cube 8), uploaded gzip-encoded."""
    base = tmp_path_factory.mktemp("cosmo")
    generate(str(base / "raw"), train_universes=2, val_universes=1, cube=8)
    return upload_dataset(azurite, base / "raw", base / "gz", "cosmoflow", "v07")


@pytest.fixture(scope="module")
def slow_dataset(azurite, tmp_path_factory):
    """24 incompressible 256 KiB files, for interrupting a stage mid-run."""
    base = tmp_path_factory.mktemp("slow")
    rng = random.Random(7)
    for i in range(24):
        path = base / "raw" / "train" / sample_name(i // 4, i % 64)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(256 * 1024))
    return upload_dataset(azurite, base / "raw", base / "gz", "cosmoslow", "")


def _stage(azurite, azcopy, data, stage_dir, rank, n, mode, sas, **kw):
    return stage_for_this_node(account_url=azurite.endpoint, container=data.container, prefix=data.prefix,
                               stage_dir=str(stage_dir), sas=sas, node_rank=rank, num_nodes=n, shard_mode=mode,
                               azcopy=azcopy, **kw)


@pytest.mark.parametrize(("nodes", "mode"), [(1, "suffix"), (3, "suffix"), (4, "balanced"), (5, "suffix")])
def test_every_file_staged_exactly_once_and_identical(azurite, azcopy, dataset, tmp_path, nodes, mode):
    sas = azurite.container_sas(dataset.container, "rl")
    stage_dir = tmp_path / "beeond"  # shared by every node, as BeeOND is
    per_node = []
    for rank in range(nodes):
        out = _stage(azurite, azcopy, dataset, stage_dir, rank, nodes, mode, sas)
        assert out["changed"] and out["skipped_existing"] == 0
        per_node.append(out["files"])
    files = assert_identical_subset(stage_dir, dataset)
    assert sorted(files) == dataset.names  # all 192, each once (a dict cannot hold a name twice)
    assert sum(per_node) == len(dataset.names)
    assert all(n.endswith(".tfrecord") for n in files)
    assert not (stage_dir / STAGING_DIRNAME).exists()
    # A second run changes nothing and fetches nothing.
    again = _stage(azurite, azcopy, dataset, stage_dir, nodes - 1, nodes, mode, sas)
    assert not again["changed"] and again["bytes_over_wire"] == 0 and again["files"] == per_node[-1]


def test_seventy_nodes_balanced_every_file_once(azurite, azcopy, dataset, tmp_path):
    sas = azurite.container_sas(dataset.container, "rl")
    listing = list_blobs(azurite.endpoint, dataset.container, dataset.prefix, credential=sas)
    assert len(listing) == 192 and all(b.gzip_encoded and b.raw_size for b in listing)
    shards = plan_shards([f"node-{i}" for i in range(70)], "balanced", listing)
    names = [b.name for s in shards for b in s.blobs]
    assert sorted(names) == sorted(b.name for b in listing) and len(set(names)) == 192
    assert {s.files for s in shards} == {2, 3}
    # Stage three of the seventy shards (first, middle, last) and check each against its plan.
    stage_dir = tmp_path / "beeond"
    expect = set()
    for rank in (0, 34, 69):
        out = _stage(azurite, azcopy, dataset, stage_dir, rank, 70, "balanced", sas)
        assert out["files"] == shards[rank].files
        assert out["bytes"] == shards[rank].raw_bytes
        expect |= {b.name[:-3] for b in shards[rank].blobs}
    assert set(assert_identical_subset(stage_dir, dataset)) == expect
    with pytest.raises(StageError, match="70 nodes would leave 6 of them without data: use shard mode 'balanced'"):
        _stage(azurite, azcopy, dataset, stage_dir, 0, 70, "suffix", sas)


def _stage_in_subprocess(azurite, azcopy, data, stage_dir: Path, sas: str) -> subprocess.Popen:
    """A stage of the whole slow data set by one node, throttled, one file at a time."""
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]);"
        "from cosmoflow.stage import read_sas, stage_for_this_node;"
        "print(json.dumps(stage_for_this_node(account_url=sys.argv[2], container=sys.argv[3], prefix='',"
        " stage_dir=sys.argv[4], sas=read_sas('env:TEST_SAS'), node_rank=0, num_nodes=1, shard_mode='balanced',"
        " azcopy=sys.argv[5], cap_mbps=8)))")
    env = dict(os.environ, TEST_SAS=sas, AZCOPY_CONCURRENCY_VALUE="1",
               PYTHONPATH=str(ROOT / "plugins" / "module_utils"))
    return subprocess.Popen([sys.executable, "-c", code, str(WORKLOAD), azurite.endpoint, data.container,
                             str(stage_dir), azcopy], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_progress(stage_dir: Path, proc: subprocess.Popen, at_least: int, limit: float = 30.0) -> int:
    """Wait until azcopy has finished ``at_least`` files in the staging folder; return how many."""
    staging = stage_dir / STAGING_DIRNAME / "0"
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done = [p for p in staging.rglob("*") if p.is_file() and not p.name.startswith(".azDownload-")]
        if len(done) >= at_least:
            return len(done)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("the stage made no progress")


def _check_no_partial_under_final_names(stage_dir: Path, data) -> None:
    assert_identical_subset(stage_dir, data)


@pytest.mark.slow
def test_killed_azcopy_resumes_without_refetching(azurite, azcopy, slow_dataset, tmp_path):
    sas = azurite.container_sas(slow_dataset.container, "rl")
    stage_dir = tmp_path / "beeond"
    proc = _stage_in_subprocess(azurite, azcopy, slow_dataset, stage_dir, sas)
    _wait_for_progress(stage_dir, proc, at_least=4)
    os.killpg(proc.pid, signal.SIGKILL)  # the stage and its azcopy, mid-run
    proc.wait()
    staging = stage_dir / STAGING_DIRNAME / "0"
    finished = [p for p in staging.rglob("*") if p.is_file() and not p.name.startswith(".azDownload-")]
    assert 4 <= len(finished) < 24
    _check_no_partial_under_final_names(stage_dir, slow_dataset)
    out = _stage(azurite, azcopy, slow_dataset, stage_dir, 0, 1, "balanced", sas)
    assert out["skipped_existing"] >= len(finished)  # not fetched again
    assert out["bytes_over_wire"] <= (24 - len(finished)) * 256 * 1024 + 24 * 1024
    assert sorted(assert_identical_subset(stage_dir, slow_dataset)) == slow_dataset.names


@pytest.mark.slow
def test_azurite_outage_mid_run_then_rerun(azurite, azcopy, slow_dataset, tmp_path):
    sas = azurite.container_sas(slow_dataset.container, "rl", hours=3)
    stage_dir = tmp_path / "beeond"
    proc = _stage_in_subprocess(azurite, azcopy, slow_dataset, stage_dir, sas)
    try:
        _wait_for_progress(stage_dir, proc, at_least=3)
        azurite.stop()
        try:
            proc.wait(timeout=5)  # azcopy retries; give up on it after a while, as an operator would
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _check_no_partial_under_final_names(stage_dir, slow_dataset)
    finally:
        azurite.start()
    out = _stage(azurite, azcopy, slow_dataset, stage_dir, 0, 1, "balanced", sas)
    assert out["skipped_existing"] >= 3
    assert sorted(assert_identical_subset(stage_dir, slow_dataset)) == slow_dataset.names


def test_expired_sas_is_one_clear_sentence(azurite, azcopy, dataset, tmp_path):
    expired = azurite.container_sas(dataset.container, "rl", hours=-0.05, start_offset_hours=-1)
    with pytest.raises(StageError) as info:
        _stage(azurite, azcopy, dataset, tmp_path / "s", 0, 1, "suffix", expired)
    message = str(info.value)
    assert message.startswith("The SAS token expired at ") and message.endswith(
        ": generate a new one (read and list) and run again.")
    assert message.count(". ") == 0 and "sig=" not in message


def test_forged_sas_is_refused_by_the_service_in_one_sentence(azurite, azcopy, dataset, tmp_path):
    sas = azurite.container_sas(dataset.container, "rl")
    forged = sas.replace("sig=", "sig=AAAA")
    with pytest.raises(StageError) as info:
        # suffix mode with the SDK present lists first: the listing is refused
        _stage(azurite, azcopy, dataset, tmp_path / "s", 0, 1, "suffix", forged)
    assert "refused" in str(info.value) and "AAAA" not in str(info.value)


def test_sas_is_in_no_file_left_behind(azurite, azcopy, dataset, tmp_path):
    sas = azurite.container_sas(dataset.container, "rl")
    signature = [kv for kv in sas.split("&") if kv.startswith("sig=")][0][4:]
    before = set(os.listdir(tempfile.gettempdir()))
    stage_dir = tmp_path / "beeond"
    _stage(azurite, azcopy, dataset, stage_dir, 0, 2, "suffix", sas)
    leftovers = [n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("amlhpc-azcopy-")]
    assert leftovers == []
    for path in stage_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert signature.encode() not in data and b"sig=" not in data, path
    manifest = json.loads((stage_dir / ".amlhpc-staged" / "0.json").read_text())
    assert len(manifest["files"]) == 96


def test_read_sas_refuses_a_literal_token(monkeypatch, tmp_path):
    monkeypatch.setenv("MY_SAS", "sp=rl&sig=abc")
    assert read_sas("env:MY_SAS") == "sp=rl&sig=abc"
    (tmp_path / "sas").write_text("sp=r&sig=x\n")
    assert read_sas(f"file:{tmp_path / 'sas'}") == "sp=r&sig=x"
    with pytest.raises(ValueError, match="a literal SAS token was given: pass it as env:VAR or file:PATH"):
        read_sas("sp=rl&sig=abc")
    with pytest.raises(ValueError, match="NOPE is not set"):
        read_sas("env:NOPE")


def test_sas_with_write_permission_is_warned_about(azurite, azcopy, dataset, tmp_path):
    seen = []
    out = _stage(azurite, azcopy, dataset, tmp_path / "s", 4, 5, "suffix", azurite.container_sas(dataset.container, "rwl"),
                 progress=seen.append)
    assert out["files"] > 0
    assert {"warning": "The SAS token grants more than read and list (sp=rwl: also write): a staging token "
                       "should be sp=rl only."} in seen
    assert any(p.get("final") and p["percent"] == 100 for p in seen)


def test_without_the_sdk_suffix_mode_stages_and_balanced_is_refused(azurite, azcopy, dataset, tmp_path, monkeypatch):
    import cosmoflow.stage as stage_module
    monkeypatch.setattr(stage_module, "sdk_available", lambda: False)
    sas = azurite.container_sas(dataset.container, "rl")
    with pytest.raises(StageError, match="balanced shard mode lists the container, which needs the Python package "
                                         "azure-storage-blob; it is not installed here"):
        _stage(azurite, azcopy, dataset, tmp_path / "b", 0, 2, "balanced", sas)
    out = _stage(azurite, azcopy, dataset, tmp_path / "s", 1, 2, "suffix", sas)  # suffixes 032-063, no listing
    files = assert_identical_subset(tmp_path / "s", dataset)
    assert out["files"] == len(files) == 96
    assert all(32 <= int(name[-12:-9]) <= 63 for name in files)
