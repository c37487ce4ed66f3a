"""The staging pieces added for issue 13: progress series, identity auth, gone and handed files, the time model."""

from __future__ import annotations

import pytest

from amlhpc.staging.azcopy import (
    ProgressSeries,
    auth_env,
    copy_download_command,
    with_auth_env,
)
from amlhpc.staging.azcopy_handoff import local_handoff
from amlhpc.staging.azcopy_model import Rates, predict, predict_node, rates_from


def test_progress_series_is_capped_spread_and_ends_on_the_last_point():
    s = ProgressSeries(cap=16)
    for i in range(1000):
        s.add(i * 0.5, i * 1000, i // 10)
    pts = s.series()
    assert 8 <= len(pts) <= 16
    assert pts[0] == {"t": 0.0, "bytes": 0, "files": 0}
    assert pts[-1] == {"t": 499.5, "bytes": 999000, "files": 99}
    ts = [p["t"] for p in pts]
    assert ts == sorted(ts) and max(b - a for a, b in zip(ts, ts[1:])) <= 2 * 500 / (len(pts) - 2)


def test_identity_modes_put_no_token_in_argv_and_set_azcopy_auto_login():
    assert auth_env("sas") == {}
    assert auth_env("managed_identity") == {"AZCOPY_AUTO_LOGIN_TYPE": "MSI"}
    assert auth_env("managed_identity", msi_client_id="1111-2222") == {
        "AZCOPY_AUTO_LOGIN_TYPE": "MSI", "AZCOPY_MSI_CLIENT_ID": "1111-2222"}
    assert auth_env("azure_cli") == {"AZCOPY_AUTO_LOGIN_TYPE": "AZCLI"}
    assert auth_env("service_principal", tenant_id="t", client_id="c", client_secret="s3cr3t-value") == {
        "AZCOPY_AUTO_LOGIN_TYPE": "SPN", "AZCOPY_TENANT_ID": "t", "AZCOPY_SPA_APPLICATION_ID": "c",
        "AZCOPY_SPA_CLIENT_SECRET": "s3cr3t-value"}
    with pytest.raises(ValueError, match="auth service_principal needs client_secret"):
        auth_env("service_principal", tenant_id="t", client_id="c")
    with pytest.raises(ValueError, match="auth must be one of sas, managed_identity, service_principal, azure_cli"):
        auth_env("key")
    # An inherited auto-login setting does not leak into another mode.
    env = with_auth_env({"PATH": "/bin", "AZCOPY_AUTO_LOGIN_TYPE": "SPN", "AZCOPY_SPA_CLIENT_SECRET": "x"}, "sas")
    assert env == {"PATH": "/bin"}
    argv = copy_download_command("azcopy", "https://a.blob.core.windows.net/c", "", "/d")
    assert argv[2] == "https://a.blob.core.windows.net/c" and not any("sig=" in a for a in argv)


PLAN = [{"name": "train/u_a1_000.tfrecord.gz", "gzip": True}]


def test_gone_files_are_this_nodes_and_not_listed_anywhere(tmp_path):
    train = tmp_path / "train"
    train.mkdir()
    for name in ("u_a1_000.tfrecord", "u_a1_001.tfrecord", "u_a2_000.tfrecord", "u_a1_040.tfrecord"):
        (train / name).write_bytes(b"x")
    # shared storage, suffix mode, this node has 000-001: a2_000 and a1_001 have no blob any
    # more; 040 is another node's (not this node's suffix: never a candidate)
    assert local_handoff(str(tmp_path), 0, PLAN, set(), suffixes=[0, 1], shared=True) == {
        "handed": [], "gone": ["train/u_a1_001.tfrecord", "train/u_a2_000.tfrecord"]}
    # a file another node's shard holds now (balanced mode moves files) is not gone, and stays
    listed = {"train/u_a1_000.tfrecord.gz", "train/u_a2_000.tfrecord.gz", "train/u_a1_040.tfrecord.gz"}
    assert local_handoff(str(tmp_path), 0, PLAN, listed, suffixes=[0, 1], shared=True) == {
        "handed": [], "gone": ["train/u_a1_001.tfrecord"]}


def test_on_node_local_storage_every_file_outside_the_shard_is_gone_or_handed(tmp_path):
    """A node-local folder is this node's alone: a data file of any suffix, or one an earlier
    rank's manifest lists (the node moved up a rank), is either gone (no blob) or handed to
    the node whose shard holds it now."""
    train = tmp_path / "train"
    train.mkdir()
    for name in ("u_a1_000.tfrecord", "u_a1_001.tfrecord", "u_a1_040.tfrecord", "odd-name.bin", "notes.txt"):
        (train / name).write_bytes(b"x")
    staged = tmp_path / ".amlhpc-staged"
    staged.mkdir()
    (staged / "3.json").write_text('{"key": "listed", "files": {"train/odd-name.bin": 1}}')
    (staged / "3.progress.json").write_text("{}")
    listed = {"train/u_a1_000.tfrecord.gz", "train/u_a1_040.tfrecord.gz", "train/odd-name.bin"}
    assert local_handoff(str(tmp_path), 0, PLAN, listed, suffixes=[0, 1], shared=False) == {
        "gone": ["train/u_a1_001.tfrecord"], "handed": ["train/odd-name.bin", "train/u_a1_040.tfrecord"]}
    # the same folder read as shared storage: rank 3's files are rank 3's, 040 another suffix's
    assert local_handoff(str(tmp_path), 0, PLAN, listed, suffixes=[0, 1], shared=True) == {
        "handed": [], "gone": ["train/u_a1_001.tfrecord"]}
    # an empty listing: nothing can be called handed (notes.txt is no data file and listed nowhere)
    assert local_handoff(str(tmp_path), 0, PLAN, set(), suffixes=[0, 1], shared=False) == {
        "handed": [], "gone": ["train/odd-name.bin", "train/u_a1_001.tfrecord", "train/u_a1_040.tfrecord"]}


def test_model_reproduces_the_seed_figures_and_names_the_bottleneck():
    rates = Rates()
    plain = predict([int(5.1e12 / 4)] * 4, [int(5.1e12 / 4)] * 4, rates)
    gz = predict([int(1.1e12 / 4)] * 4, [int(5.1e12 / 4)] * 4, rates)
    assert 33 <= plain["minutes"] <= 37 and plain["bottleneck"] == "NIC"
    assert 12 <= gz["minutes"] <= 14 and gz["bottleneck"] == "decompression CPU"
    # 64 nodes gzip-encoded: 200 Gbps of egress is no longer enough for 4x the bytes over the wire
    many = predict([int(4 * 1.1e12 / 64)] * 64, [int(4 * 5.1e12 / 64)] * 64, Rates(egress_gbps=50))
    assert many["bottleneck"] == "account egress"
    # a slower NIC than azcopy can use becomes the limit for uncompressed data
    assert predict([10**12], [10**12], Rates(nic_gbps=1))["bottleneck"] == "NIC"
    assert predict([10**12], [10**12], Rates(nic_gbps=1))["nic_is_card"] is True
    node = predict_node(10**9, 10**9, Rates(egress_gbps=0.001), nodes=4, wire_total=4 * 10**9)
    assert node["bottleneck"] == "account egress" and node["seconds"] == pytest.approx(32000, rel=1e-3)
    with pytest.raises(ValueError, match="unknown staging-model rate"):
        rates_from({"nic": 1})
    assert rates_from({"nic_gbps": "100", "egress_gbps": ""}).nic_gbps == 100.0
