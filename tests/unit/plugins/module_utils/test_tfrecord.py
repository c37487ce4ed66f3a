from __future__ import annotations

import gzip
import struct

import pytest

from amlhpc.data import tfrecord
from amlhpc.data.cosmoflow_data import generate, sample_name
from amlhpc.data.tfrecord import TFRecordError, decode_example, encode_example, read_records, write_tfrecord


def test_crc32c_known_vectors():
    # RFC 3720 (iSCSI) test vectors for CRC-32C.
    assert tfrecord.crc32c(b"") == 0
    assert tfrecord.crc32c(bytes(32)) == 0x8A9136AA
    assert tfrecord.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert tfrecord.crc32c(b"123456789") == 0xE3069283


def test_pure_python_crc_matches_accelerated(monkeypatch):
    data = bytes(range(256)) * 7
    fast = tfrecord.crc32c(data)
    monkeypatch.setattr(tfrecord, "_gcrc", None)
    assert tfrecord.crc32c(data) == fast


def test_record_framing_matches_tensorflow_layout():
    rec = tfrecord.encode_record(b"abc")
    length, length_crc = struct.unpack("<QI", rec[:12])
    assert length == 3 and length_crc == tfrecord.masked_crc32c(rec[:8])
    assert rec[12:15] == b"abc"
    assert struct.unpack("<I", rec[15:])[0] == tfrecord.masked_crc32c(b"abc")


def test_example_round_trip():
    ex = decode_example(encode_example({"x": b"\x01\x02" * 10, "y": [0.5, -1.0, 0.25, 1.0], "n": [3, -4]}))
    assert bytes(ex["x"]) == b"\x01\x02" * 10
    assert ex["y"] == [0.5, -1.0, 0.25, 1.0]
    assert ex["n"] == [3, -4]


@pytest.mark.parametrize("compress", [False, True])
def test_file_round_trip_plain_and_gzip(tmp_path, compress):
    path = str(tmp_path / "f.tfrecord")
    write_tfrecord(path, [b"one", b"two" * 100], compress=compress)
    assert read_records(path) == [b"one", b"two" * 100]
    with open(path, "rb") as f:
        assert (f.read(2) == b"\x1f\x8b") is compress


def test_flipped_byte_names_file_and_offset(tmp_path):
    path = tmp_path / "f.tfrecord"
    write_tfrecord(str(path), [b"first", b"second-record"])
    data = bytearray(path.read_bytes())
    second = 12 + 5 + 4
    data[second + 12 + 3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(TFRecordError, match=rf"{path}: corrupt record at offset {second}: data CRC mismatch"):
        read_records(str(path))


def test_truncated_file_is_reported(tmp_path):
    path = tmp_path / "f.tfrecord"
    write_tfrecord(str(path), [b"0123456789"])
    path.write_bytes(path.read_bytes()[:-6])
    with pytest.raises(TFRecordError, match="truncated record at offset 0"):
        read_records(str(path))


def test_generator_layout_and_content(tmp_path):
    files = generate(str(tmp_path), train_universes=2, val_universes=1, cube=4, subvolumes=3, gzip=True, seed=7)
    assert len(files) == 9
    assert sorted(p.name for p in (tmp_path / "validation").iterdir()) == [
        sample_name(2, s, gzip=True) for s in range(3)]
    assert sample_name(2, 1, gzip=True) == "univ_ics_2019-03_a000002_001.tfrecord.gz"
    with gzip.open(files[0].path) as f:
        assert f.read(1)  # really gzip
    (record,) = read_records(files[0].path)
    ex = decode_example(record)
    assert len(bytes(ex["x"])) == 4 ** 3 * 4 * 2
    assert ex["y"] == pytest.approx(list(files[0].y), rel=1e-6)
    assert all(-1.0 <= v <= 1.0 for v in ex["y"])


def test_generator_is_deterministic(tmp_path):
    a = generate(str(tmp_path / "a"), 1, 0, cube=4, subvolumes=2, seed=3)
    b = generate(str(tmp_path / "b"), 1, 0, cube=4, subvolumes=2, seed=3)
    assert [open(f.path, "rb").read() for f in a] == [open(f.path, "rb").read() for f in b]


def test_counts_follow_the_parameters(tmp_path):
    """Channel means grow with y: the data carries a learnable signal."""
    import array
    files = generate(str(tmp_path), 1, 0, cube=8, subvolumes=16, seed=1)
    pairs = []
    for f in files:
        ex = decode_example(read_records(f.path)[0])
        values = array.array("h", bytes(ex["x"]))
        pairs.append((ex["y"][0], sum(values[0::4]) / (len(values) / 4)))
    low = [m for y, m in pairs if y < -0.3]
    high = [m for y, m in pairs if y > 0.3]
    assert low and high and max(low) < min(high)


def test_subvolume_out_of_range():
    with pytest.raises(ValueError, match="outside 0..63"):
        sample_name(0, 64)
