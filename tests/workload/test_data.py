from __future__ import annotations

import gzip
import os
import resource

import numpy as np
import pytest
import torch
from amlhpc.data.cosmoflow_data import generate
from amlhpc.data.tfrecord import TFRecordError, decode_example, encode_example, read_records, write_tfrecord
from cosmoflow import data as cdata


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_reader_round_trip_on_generated_files(tmp_path, compress):
    written = generate(str(tmp_path), train_universes=1, val_universes=1, cube=8, subvolumes=3,
                       gzip=compress, seed=3)
    files = cdata.list_files(str(tmp_path), "train")
    assert [os.path.basename(f) for f in files] == [os.path.basename(w.path) for w in written if w.split == "train"]
    assert all(f.endswith(".tfrecord.gz" if compress else ".tfrecord") for f in files)
    ds = cdata.CosmoFlowDataset(files, cube=8)
    for i, entry in enumerate(w for w in written if w.split == "train"):
        x, y = ds[i]
        raw = decode_example(read_records(entry.path)[0])["x"]
        counts = np.frombuffer(raw, dtype="<i2").reshape(8, 8, 8, 4)
        assert x.dtype == torch.int16 and x.shape == (8, 8, 8, 4)  # workers hand over int16
        np.testing.assert_array_equal(x.numpy(), counts)
        np.testing.assert_allclose(cdata.to_model_input(x).numpy(), np.log1p(counts.astype(np.float32)),
                                   rtol=1e-6)
        np.testing.assert_array_equal(y.numpy(), np.asarray(entry.y, dtype=np.float32))
    assert len(cdata.list_files(str(tmp_path), "validation")) == 3


def test_raw_counts_without_log(tmp_path):
    generate(str(tmp_path), 1, 0, cube=4, subvolumes=1, seed=0)
    # With raw=False an item is the (x, y) pair; pylint reads the raw branch's return only.
    x_log, _unused = cdata.CosmoFlowDataset(  # pylint: disable=unpacking-non-sequence
        cdata.list_files(str(tmp_path), "train"), 4, raw=False)[0]
    x_raw, _unused = cdata.CosmoFlowDataset(  # pylint: disable=unpacking-non-sequence
        cdata.list_files(str(tmp_path), "train"), 4, apply_log=False, raw=False)[0]
    torch.testing.assert_close(x_log, torch.log1p(x_raw))
    assert x_raw.max() > 1 and float(x_raw.max()).is_integer()


def test_device_transform_matches_the_reference_over_every_int16():
    """to_model_input (torch's vectorised log1p, where the model runs) against the reference's
    log(x + 1) in float64, over every int16 value; -1 -> -inf and < -1 -> nan as TF gives."""
    counts = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.log1p(counts.astype(np.float64)).astype(np.float32)
    got = cdata.to_model_input(torch.from_numpy(counts)).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=2e-7, equal_nan=True)
    np.testing.assert_allclose(cdata.preprocess(counts), expected, rtol=2e-7, equal_nan=True)


FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "tf_written")


@pytest.mark.parametrize("name", ["tf_plain.tfrecord", "tf_gzip.tfrecord.gz"])
def test_files_written_by_tensorflow(name):
    """Written by tf.io.TFRecordWriter (fixtures/tf_written/make_tf_written.py), not by us."""
    ds = cdata.CosmoFlowDataset([os.path.join(FIXTURES, name)], cube=8, records_per_file=2)
    for k in range(2):
        x, y = ds[k]
        expected = (np.arange(8 ** 3 * 4) * 37 + k) % 50
        np.testing.assert_array_equal(x.numpy().ravel(), expected)
        np.testing.assert_allclose(y.numpy(), [0.1 * k, -0.2, 0.3, 0.4], rtol=1e-6)


def _gz_member(tmp_path):
    plain = tmp_path / "m.tfrecord"
    _two_record_file(plain)
    return gzip.compress(plain.read_bytes(), mtime=0)


@pytest.mark.parametrize("use_isal", [True, False], ids=["isal", "zlib"])
def test_truncated_gzip_names_the_file(tmp_path, monkeypatch, use_isal):
    from amlhpc.data import tfrecord
    if not use_isal:
        monkeypatch.setattr(tfrecord, "_igzip", None)
    path = tmp_path / "t.tfrecord.gz"
    path.write_bytes(_gz_member(tmp_path)[:-30])
    with pytest.raises(TFRecordError, match=r"t\.tfrecord\.gz: (truncated|corrupt) gzip stream"):
        cdata.CosmoFlowDataset([str(path)], cube=4, records_per_file=2)[1]


@pytest.mark.parametrize("use_isal", [True, False], ids=["isal", "zlib"])
def test_gzip_trailer_crc_is_checked_when_the_file_is_read_to_its_end(tmp_path, monkeypatch, use_isal):
    from amlhpc.data import tfrecord
    if not use_isal:
        monkeypatch.setattr(tfrecord, "_igzip", None)
    blob = bytearray(_gz_member(tmp_path))
    blob[-8] ^= 0x01  # the trailer's CRC-32 of the uncompressed data; the records are intact
    path = tmp_path / "crc.tfrecord.gz"
    path.write_bytes(bytes(blob))
    ds = cdata.CosmoFlowDataset([str(path)], cube=4, records_per_file=2)
    with pytest.raises(TFRecordError, match=r"crc\.tfrecord\.gz: corrupt gzip stream.*CRC"):
        ds[1]


def test_isal_inflates_when_installed():
    from amlhpc.data import tfrecord
    pytest.importorskip("isal")
    assert tfrecord.GZIP_BACKEND == "isal"


def test_loader_plan_from_cores():
    nd96 = cdata.plan_loader(96, 8, gpu=True)
    assert (nd96.workers, nd96.pin_threads) == (9, 2) and nd96.workers * nd96.prefetch_factor >= 8
    assert cdata.plan_loader(2, 1, gpu=False).workers == 1
    assert cdata.plan_loader(96, 8, gpu=True, workers=4, prefetch_factor=3, pin_threads=1) == \
        cdata.LoaderPlan(4, 3, 1)


def test_pinned_batches_keep_the_loader_order(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("pinning needs CUDA")
    generate(str(tmp_path), 1, 0, cube=4, subvolumes=8, seed=2)
    ds = cdata.CosmoFlowDataset(cdata.list_files(str(tmp_path), "train"), cube=4)
    plain = cdata.make_loader(ds, 2, 0, 1, shuffle=True, workers=0)
    pinned = cdata.make_loader(ds, 2, 0, 1, shuffle=True, workers=0, pin_memory=True, pin_threads=3,
                               slots=False)
    for (a, _unused), (b, _unused) in zip(plain, pinned):
        assert b.is_pinned() and torch.equal(a, b)


def _two_record_file(path, cube=4):
    rng = np.random.default_rng(0)
    recs = [encode_example({"x": rng.integers(0, 9, cube ** 3 * 4, dtype=np.int16).tobytes(),
                            "y": [0.1, 0.2, 0.3, 0.4]}) for _unused in range(2)]
    write_tfrecord(str(path), recs)
    return recs


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_flipped_data_byte_names_file_and_offset(tmp_path, compress):
    plain = tmp_path / "a.tfrecord"
    recs = _two_record_file(plain)
    blob = bytearray(plain.read_bytes())
    second = 12 + len(recs[0]) + 4  # offset of record 2 in the uncompressed stream
    blob[second + 12 + 100] ^= 0x01  # one bit inside record 2's data
    path = tmp_path / ("a.tfrecord.gz" if compress else "b.tfrecord")
    path.write_bytes(gzip.compress(bytes(blob)) if compress else bytes(blob))
    ds = cdata.CosmoFlowDataset([str(path)], cube=4, records_per_file=2)
    ds[0]  # the first record is intact
    with pytest.raises(TFRecordError) as err:
        ds[1]
    assert str(path) in str(err.value)
    assert f"offset {second}" in str(err.value) and "data CRC" in str(err.value)


def test_flipped_length_byte_is_a_length_crc_error(tmp_path):
    path = tmp_path / "c.tfrecord"
    _two_record_file(path)
    blob = bytearray(path.read_bytes())
    blob[3] ^= 0x10
    path.write_bytes(bytes(blob))
    with pytest.raises(TFRecordError, match=r"c\.tfrecord: corrupt record at offset 0: length CRC"):
        cdata.CosmoFlowDataset([str(path)], cube=4)[0]


def test_truncated_file_is_reported(tmp_path):
    path = tmp_path / "d.tfrecord"
    _two_record_file(path)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(TFRecordError, match="d.tfrecord: truncated record at offset"):
        cdata.CosmoFlowDataset([str(path)], cube=4, records_per_file=2)[1]


def test_wrong_cube_size_says_so(tmp_path):
    generate(str(tmp_path), 1, 0, cube=4, subvolumes=1)
    with pytest.raises(TFRecordError, match=r"x holds 512 bytes, expected 4096 for a 8\^3 x 4 int16 cube"):
        cdata.CosmoFlowDataset(cdata.list_files(str(tmp_path), "train"), cube=8)[0]


def test_missing_split_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="validation"):
        cdata.list_files(str(tmp_path), "validation")


def test_shards_are_disjoint_equal_and_reshuffled():
    shards = [cdata.ShardSampler(23, r, 4, shuffle=True, seed=5) for r in range(4)]
    seen = [list(s) for s in shards]
    assert all(len(s) == 23 // 4 for s in seen)
    flat = [i for s in seen for i in s]
    assert len(flat) == len(set(flat))
    for s in shards:
        s.set_epoch(1)
    assert [list(s) for s in shards] != seen
    capped = cdata.ShardSampler(23, 0, 4, num_samples=2)
    assert len(list(capped)) == len(capped) == 2


def test_loader_with_workers_reads_each_sample_once(tmp_path):
    written = generate(str(tmp_path), 1, 0, cube=4, subvolumes=12, seed=2)
    ds = cdata.CosmoFlowDataset(cdata.list_files(str(tmp_path), "train"), cube=4)
    ys = []
    for rank in range(2):
        loader = cdata.make_loader(ds, batch_size=3, shard=rank, num_shards=2, shuffle=True, workers=2)
        for x, y in loader:
            assert x.shape == (3, 4, 4, 4, 4) and x.dtype == torch.int16
            ys.extend(tuple(round(v, 5) for v in row) for row in y.tolist())
    expected = {tuple(round(float(np.float32(v)), 5) for v in w.y) for w in written}
    assert len(ys) == 12 and set(ys) == expected


def _batches(loader, epochs=2):
    out = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        out.append([(x.clone(), y.clone()) for x, y in loader])
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_slots_give_the_collated_batches_in_the_same_order(tmp_path, workers):
    generate(str(tmp_path), 1, 0, cube=4, subvolumes=14, seed=3)
    ds = cdata.CosmoFlowDataset(cdata.list_files(str(tmp_path), "train"), cube=4)
    for rank in range(2):
        args = dict(batch_size=2, shard=rank, num_shards=2, shuffle=True, seed=7, num_samples=6, workers=workers)
        slots = cdata.make_loader(ds, **args)
        collated = cdata.make_loader(ds, slots=False, **args)
        assert isinstance(slots, cdata.SlotBatches) and len(slots) == len(collated) == 3
        got, want = _batches(slots), _batches(collated)
        assert [len(e) for e in got] == [3, 3]
        assert not torch.equal(got[0][0][1], got[1][0][1])  # reshuffled per epoch
        for (gx, gy), (wx, wy) in zip(sum(got, []), sum(want, [])):
            assert gx.dtype == torch.int16 and torch.equal(gx, wx) and torch.equal(gy, wy)


def test_slots_are_reused_not_allocated_per_batch(tmp_path):
    generate(str(tmp_path), 1, 0, cube=4, subvolumes=24, seed=4)
    ds = cdata.CosmoFlowDataset(cdata.list_files(str(tmp_path), "train"), cube=4)
    loader = cdata.make_loader(ds, 2, 0, 1, shuffle=True, workers=2, prefetch_factor=2)
    assert loader.xs.shape[0] == 2 * 2 + 2 and loader.xs.is_shared()
    start = loader.xs.data_ptr()
    end = start + loader.xs.numel() * loader.xs.element_size()
    ptrs = set()
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            assert start <= x.data_ptr() < end and loader.ys.data_ptr() <= y.data_ptr()
            ptrs.add(x.data_ptr())
    assert len(ptrs) <= loader.xs.shape[0]  # 24 batches through 6 slots


def test_an_epoch_left_early_frees_its_slots(tmp_path):
    generate(str(tmp_path), 1, 0, cube=4, subvolumes=20, seed=5)
    ds = cdata.CosmoFlowDataset(cdata.list_files(str(tmp_path), "train"), cube=4)
    loader = cdata.make_loader(ds, 2, 0, 1, shuffle=False, workers=1, prefetch_factor=2)
    for k, _batch in enumerate(loader):  # --max-steps leaves the epoch after 2 of 10 batches
        if k == 1:
            break
    xs = [x.clone() for x, _unused in loader]
    assert len(xs) == 10
    assert torch.equal(torch.cat(xs), torch.stack([ds[i][0] for i in range(20)]))


def test_slots_are_pinned_on_cuda(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("pinning needs CUDA")
    generate(str(tmp_path), 1, 0, cube=4, subvolumes=8, seed=2)
    ds = cdata.CosmoFlowDataset(cdata.list_files(str(tmp_path), "train"), cube=4)
    slots = cdata.make_loader(ds, 2, 0, 1, shuffle=True, workers=2, pin_memory=True)
    collated = cdata.make_loader(ds, 2, 0, 1, shuffle=True, workers=0, slots=False)
    assert slots.pinned
    device = torch.device("cuda", 0)
    for (a, _unused), (b, _unused2) in zip(collated, slots):
        assert b.is_pinned() and torch.equal(b.to(device, non_blocking=True).cpu(), a)


def test_slot_pool_says_how_to_hold_a_batch():
    pool = cdata.SlotPool(2)
    assert {pool.take(), pool.take()} == {0, 1}
    with pytest.raises(RuntimeError, match="all 2 batch slots are in use: hold no batch past the next one"):
        pool.take()
    pool.give_back(1)
    assert pool.take() == 1
    pool.reset()
    assert sorted([pool.take(), pool.take()]) == [0, 1]


def test_slot_filling_touches_no_fresh_memory_per_sample(tmp_path):
    # 2 MiB samples, above malloc's mmap threshold: a record kept alive while the next one is read
    # made the heap grow and shrink every batch, a page fault per 4 KiB of every other sample.
    rng = np.random.default_rng(1)
    files = []
    for k in range(8):
        path = tmp_path / f"s{k}.tfrecord"
        write_tfrecord(str(path), [encode_example({"x": rng.integers(0, 9, 64 ** 3 * 4, dtype=np.int16).tobytes(),
                                                   "y": [0.1 * k, 0.2, 0.3, 0.4]})])
        files.append(str(path))
    ds = cdata.CosmoFlowDataset(files, cube=64)
    loader = cdata.make_loader(ds, 4, 0, 1, shuffle=True, workers=0)
    for epoch in range(6):
        loader.sampler.set_epoch(epoch)
        if epoch == 2:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _batch in loader:
            pass
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / (4 * len(ds))
    assert faults < 50, f"{faults:.0f} page faults a sample (a 2 MiB sample has 512 pages)"
