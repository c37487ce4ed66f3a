"""The DALI input path against the CPU path, on the same files (DALI's CPU pipeline: no GPU here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from amlhpc.cosmoflow_data import generate
from amlhpc.tfrecord import TFRecordError
from conftest import TINY_MODEL
from cosmoflow import dali_input as cdali
from cosmoflow import data as cdata
from cosmoflow import train

TF_WRITTEN = Path(__file__).parent / "fixtures" / "tf_written"
ROOT = Path(__file__).resolve().parents[2]
needs_dali = pytest.mark.skipif(cdali.unavailable([], cuda=True) is not None,
                                reason="nvidia-dali is not installed (requirements-workload.txt)")


@needs_dali
def test_dali_and_the_cpu_path_give_identical_tensors_on_tensorflow_written_files(tmp_path):
    files = [str(TF_WRITTEN / "tf_plain.tfrecord")]
    dali = cdali.DaliBatches(files, 8, 4, 2, shard=0, num_shards=1, shuffle=False, seed=0, num_batches=1,
                             device_id=None, index_dir=str(tmp_path / "idx"))
    (x, y), = list(dali)
    cpu = cdata.CosmoFlowDataset(files, cube=8, records_per_file=2)
    want_x = torch.stack([cpu[k][0] for k in range(2)])
    want_y = torch.stack([cpu[k][1] for k in range(2)])
    assert x.dtype == torch.int16 and x.shape == (2, 8, 8, 8, 4)
    assert torch.equal(x, want_x) and torch.equal(y, want_y)
    assert torch.equal(cdata.to_model_input(x), cdata.to_model_input(want_x))  # what the step sees


@needs_dali
def test_dali_shards_cover_every_sample_once_an_epoch_with_the_cpu_paths_tensors(tmp_path):
    generate(str(tmp_path / "data"), 1, 0, cube=8, subvolumes=12, seed=6)
    files = cdata.list_files(str(tmp_path / "data"), "train")
    cpu = cdata.CosmoFlowDataset(files, cube=8)
    by_y = {tuple(cpu[i][1].tolist()): cpu[i][0] for i in range(len(cpu))}
    assert len(by_y) == 12
    for epoch in range(2):
        seen = []
        for rank in range(2):
            dali = cdali.DaliBatches(files, 8, 4, 3, shard=rank, num_shards=2, shuffle=True, seed=1,
                                     num_batches=2, device_id=None, index_dir=str(tmp_path / "idx"))
            for _unused in range(epoch):
                list(dali)
            for x, y in dali:
                for k in range(3):
                    key = tuple(y[k].tolist())
                    assert torch.equal(x[k], by_y[key])
                    seen.append(key)
        assert sorted(seen) == sorted(by_y)


def test_indexes_match_dalis_tfrecord2idx_and_are_made_once(tmp_path):
    tool = Path(sys.executable).parent / "tfrecord2idx"
    if not tool.exists():
        pytest.skip("DALI's tfrecord2idx is not installed")
    src = str(TF_WRITTEN / "tf_plain.tfrecord")
    subprocess.run([sys.executable, str(tool), src, str(tmp_path / "theirs.idx")], check=True)
    (ours,) = cdali.ensure_indexes([src], str(tmp_path / "idx"))
    assert Path(ours).read_text() == (tmp_path / "theirs.idx").read_text()
    made = os.stat(ours).st_mtime_ns
    cdali.ensure_indexes([src], str(tmp_path / "idx"))
    assert os.stat(ours).st_mtime_ns == made
    grown = tmp_path / "grown.tfrecord"
    grown.write_bytes(Path(src).read_bytes())
    (index,) = cdali.ensure_indexes([str(grown)], str(tmp_path / "idx"))
    grown.write_bytes(Path(src).read_bytes() * 2)
    cdali.ensure_indexes([str(grown)], str(tmp_path / "idx"))
    assert len(Path(index).read_text().splitlines()) == 4  # stale index made again


def test_index_of_a_broken_header_names_file_and_offset(tmp_path):
    blob = bytearray((TF_WRITTEN / "tf_plain.tfrecord").read_bytes())
    second = len(blob) // 2
    blob[second + 2] ^= 0x04
    path = tmp_path / "broken.tfrecord"
    path.write_bytes(bytes(blob))
    with pytest.raises(TFRecordError, match=rf"broken\.tfrecord: corrupt record at offset {second}: length CRC"):
        cdali.index_lines(str(path))


def test_why_dali_does_not_read(tmp_path):
    if cdali.unavailable([], cuda=True) is None:
        assert "plain TFRecords only and 1 file(s) are gzip (tf_gzip.tfrecord.gz)" in \
            cdali.unavailable([str(TF_WRITTEN / "tf_gzip.tfrecord.gz")], cuda=True)
        assert cdali.unavailable([str(TF_WRITTEN / "tf_plain.tfrecord")], cuda=False) == \
            "DALI feeds GPUs and this rank has none"
    # A Python without site-packages (no DALI, no torch) says what to install.
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; from cosmoflow import dali_input; "
            "print(dali_input.unavailable(['a.tfrecord'], cuda=True))")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT / "workload"),
                          str(ROOT / "plugins" / "module_utils")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "NVIDIA DALI is not installed (pip install nvidia-dali-cuda120==2.4.0)"


def test_train_says_which_input_it_reads_with(tiny_data, tmp_path, master_port, capsys):
    args = ["--data-dir", str(tiny_data), "--batch-size", "8", "--output-dir", str(tmp_path / "o"), *TINY_MODEL,
            "--n-train", "16", "--n-valid", "8", "--epochs", "1"]
    with pytest.raises(SystemExit, match=r"--input dali: .+; use --input auto or cpu"):
        train.main([*args, "--input", "dali"])
    assert train.main(args) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "input:" in line]
    assert len(lines) == 1 and lines[0].startswith("[cosmoflow] input: the CPU path (")


def test_the_image_installs_dali_and_checks_it_imports():
    text = (ROOT / "workload" / "Dockerfile").read_text()
    pip = text[text.index("pip install"):text.index("&& python -c")]
    assert f"nvidia-dali-cuda120=={cdali.DALI_VERSION}" in pip
    assert "nvidia.dali" in text[text.index("&& python -c"):]
