# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""TFRecord files and ``tf.train.Example`` messages, without TensorFlow.

A TFRecord file is a sequence of records::

    uint64  length            (little endian)
    uint32  masked_crc32c(length bytes)
    byte    data[length]
    uint32  masked_crc32c(data)

CosmoFlow stores one ``tf.train.Example`` per record with two features: ``x``, the raw
bytes of an int16 cube (D x D x D x 4 channels), and ``y``, four float32 parameters.

CRC32C uses ``google_crc32c`` when it is installed (hardware accelerated; needed for real
16 MiB samples) and a pure-Python table otherwise (fine for the small test cubes).

gzip-compressed files inflate with ISA-L (the ``isal`` package, ~2x zlib's speed) when it is
installed, zlib otherwise. A truncated or corrupt gzip stream raises :class:`TFRecordError`
naming the file; the gzip trailer (CRC-32 and size of the member) is checked whenever a reader
reads a file to its end.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import BinaryIO

try:  # optional acceleration
    import google_crc32c as _gcrc  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment
    _gcrc = None
try:  # optional acceleration: ISA-L inflate
    from isal import igzip as _igzip  # type: ignore[import-not-found]
    from isal import isal_zlib as _isal_zlib  # type: ignore[import-not-found]
    _GZIP_ERRORS: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, _isal_zlib.error)
except ImportError:  # pragma: no cover - depends on the environment
    _igzip = None
    _GZIP_ERRORS = (EOFError, OSError, zlib.error)

GZIP_BACKEND = "isal" if _igzip is not None else "zlib"

_MASK_DELTA = 0xA282EAD8


def _make_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _unused in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``."""
    if _gcrc is not None:
        return _gcrc.value(bytes(data) if not isinstance(data, bytes) else data)
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in bytes(data):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """The masked CRC that TFRecord stores."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class TFRecordError(ValueError):
    """A corrupt or truncated record; the message names the file and the offset."""


def encode_record(data: bytes) -> bytes:
    """One framed TFRecord record holding ``data``."""
    header = struct.pack("<Q", len(data))
    return b"".join((header, struct.pack("<I", masked_crc32c(header)), data,
                     struct.pack("<I", masked_crc32c(data))))


def open_maybe_gzip(path: str, use_isal: bool = True) -> BinaryIO:
    """Open a ``.tfrecord`` or gzip-compressed file (detected by its magic, not its name); gzip
    inflates with ISA-L when it is installed and ``use_isal``."""
    raw = open(path, "rb")  # noqa: SIM115 - returned to the caller
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        if use_isal and _igzip is not None:
            return _igzip.IGzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def _read(stream: BinaryIO, n: int, name: str, offset: int) -> bytes:
    try:
        return stream.read(n)
    except _GZIP_ERRORS as exc:  # truncated member, bad trailer CRC or size, corrupt deflate data
        what = "truncated" if isinstance(exc, EOFError) else "corrupt"
        raise TFRecordError(f"{name}: {what} gzip stream near record offset {offset}: "
                            f"{type(exc).__name__}: {exc}") from None


def iter_records(stream: BinaryIO, name: str = "<stream>", check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, data)`` for each record; offsets are in the uncompressed stream. The
    iteration reads to the end of the stream, so a gzip member's trailer is checked once the
    last record has been taken and the caller asks for the next."""
    offset = 0
    while True:
        header = _read(stream, 12, name, offset)
        if not header:
            return
        if len(header) < 12:
            raise TFRecordError(f"{name}: truncated record header at offset {offset}")
        length, length_crc = struct.unpack("<QI", header)
        if check_crc and masked_crc32c(header[:8]) != length_crc:
            raise TFRecordError(f"{name}: corrupt record at offset {offset}: length CRC mismatch")
        data = _read(stream, length, name, offset)
        footer = _read(stream, 4, name, offset)
        if len(data) < length or len(footer) < 4:
            raise TFRecordError(f"{name}: truncated record at offset {offset}: expected {length} bytes")
        if check_crc and masked_crc32c(data) != struct.unpack("<I", footer)[0]:
            raise TFRecordError(f"{name}: corrupt record at offset {offset}: data CRC mismatch")
        yield offset, data
        offset += 12 + length + 4


def read_records(path: str, check_crc: bool = True) -> list[bytes]:
    """All records of a plain or gzip-compressed TFRecord file."""
    with open_maybe_gzip(path) as stream:
        return [data for _unused, data in iter_records(stream, path, check_crc)]


# --- protobuf wire format, just enough for tf.train.Example -----------------------------

def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def encode_example(features: Mapping[str, bytes | Sequence[float] | Sequence[int]]) -> bytes:
    """Serialize a ``tf.train.Example``.

    ``bytes`` values become a BytesList, sequences of floats a FloatList (packed float32),
    sequences of ints an Int64List (packed varints).
    """
    entries = []
    for key in sorted(features):
        value = features[key]
        if isinstance(value, (bytes, bytearray, memoryview)):
            feature = _field(1, _field(1, bytes(value)))  # Feature.bytes_list{value}
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            packed = b"".join(_varint(v & 0xFFFFFFFFFFFFFFFF) for v in value)
            feature = _field(3, _field(1, packed))  # Feature.int64_list{packed value}
        else:
            packed = struct.pack(f"<{len(value)}f", *value)
            feature = _field(2, _field(1, packed))  # Feature.float_list{packed value}
        entries.append(_field(1, _field(1, key.encode()) + _field(2, feature)))  # map entry
    return _field(1, b"".join(entries))  # Example.features


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _iter_fields(buf: memoryview) -> Iterator[tuple[int, int, memoryview | int]]:
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated field")
            yield number, wire, buf[pos:pos + length]
            pos += length
        elif wire == 0:
            value, pos = _read_varint(buf, pos)
            yield number, wire, value
        elif wire == 5:
            yield number, wire, buf[pos:pos + 4]
            pos += 4
        elif wire == 1:
            yield number, wire, buf[pos:pos + 8]
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire}")


def decode_example(data: bytes | memoryview) -> dict[str, memoryview | list[float] | list[int]]:
    """Parse a ``tf.train.Example``: BytesList -> memoryview of the first value (zero copy),
    FloatList -> list of floats, Int64List -> list of ints."""
    out: dict[str, memoryview | list[float] | list[int]] = {}
    for number, _unused, features in _iter_fields(memoryview(data)):
        if number != 1:
            continue
        for fnum, _unused, entry in _iter_fields(features):  # type: ignore[arg-type]
            if fnum != 1:
                continue
            key, value = "", None
            for enum_, _unused, part in _iter_fields(entry):  # type: ignore[arg-type]
                if enum_ == 1:
                    key = bytes(part).decode()  # type: ignore[arg-type]
                elif enum_ == 2:
                    value = _decode_feature(part)  # type: ignore[arg-type]
            if value is not None:
                out[key] = value
    return out


def _decode_feature(buf: memoryview) -> memoryview | list[float] | list[int]:
    for kind, _unused, payload in _iter_fields(buf):
        values = list(_iter_fields(payload))  # type: ignore[arg-type]
        if kind == 1:
            return values[0][2] if values else memoryview(b"")  # type: ignore[return-value]
        if kind == 2:
            floats: list[float] = []
            for _unused, wire, v in values:
                raw = bytes(v)  # type: ignore[arg-type]
                floats.extend(struct.unpack(f"<{len(raw) // 4}f", raw))
            return floats
        if kind == 3:
            ints: list[int] = []
            for _unused, wire, v in values:
                if wire == 0:
                    ints.append(_signed64(v))  # type: ignore[arg-type]
                else:
                    pos, mv = 0, v  # packed
                    while pos < len(mv):  # type: ignore[arg-type]
                        n, pos = _read_varint(mv, pos)  # type: ignore[arg-type]
                        ints.append(_signed64(n))
            return ints
    raise ValueError("empty Feature")


def _signed64(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


def write_tfrecord(path: str, records: Sequence[bytes], compress: bool = False) -> None:
    """Write records to ``path`` (gzip-compressed when ``compress``)."""
    payload = b"".join(encode_record(r) for r in records)
    if compress:
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as gz:
            gz.write(payload)
    else:
        with open(path, "wb") as f:
            f.write(payload)


__all__ = [
    "GZIP_BACKEND",
    "TFRecordError",
    "crc32c",
    "decode_example",
    "encode_example",
    "encode_record",
    "iter_records",
    "masked_crc32c",
    "open_maybe_gzip",
    "read_records",
    "write_tfrecord",
]
