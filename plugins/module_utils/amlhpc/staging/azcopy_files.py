# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The files of a stage on disk: final names, azcopy's leftovers, and the check of each file.

A staged file is checked against what the plan knows of its blob: its size after staging
(always, when known) and, with ``verify="checksum"``, the SHA-256 of its bytes, which
``prepare_dataset`` records in the blob's metadata (``amlhpc_raw_sha256``, computed on the
decompressed bytes). Standard library only.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .azcopy_paths import MANIFEST_DIRNAME, STAGING_DIRNAME, inside
from ..data.tfrecord import masked_crc32c

AZCOPY_TEMP_PREFIX = ".azDownload-"
VERIFY_MODES = ("size", "checksum")


@dataclass
class ExpectedFile:
    """A file the plan puts on this node: the blob name and, when known, its size and SHA-256 after staging.

    ``size`` is the blob's size (bytes over the wire), for the staging-time model.
    """

    blob: str
    raw_size: int | None = None
    gzip_encoded: bool = False
    sha256: str | None = None
    size: int | None = None

    def staged_name(self, decompress: bool) -> str:
        return final_name(self.blob, decompress and self.gzip_encoded)


def is_gzip_file(path: str) -> bool:
    """True when the file is gzip data and not a TFRecord that happens to start like one."""
    with open(path, "rb") as f:
        head = f.read(12)
    if head[:3] != b"\x1f\x8b\x08":
        return False
    if len(head) == 12 and int.from_bytes(head[8:12], "little") == masked_crc32c(head[:8]):
        return False  # a TFRecord header whose length happens to start with 1f 8b 08
    return True


def final_name(rel: str, decompressed: bool) -> str:
    """The name a staged file gets: ``.gz`` dropped when its content was decompressed."""
    return rel[:-3] if decompressed and rel.endswith(".gz") else rel


def sha256_file(path: str, chunk: int = 4 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                return h.hexdigest()
            h.update(block)


def locate(stage_dir: str, e: ExpectedFile, decompress: bool) -> str | None:
    """The path of ``e`` on disk (its final name, or the blob's name when it stayed compressed), or None."""
    for name in (e.staged_name(decompress), e.blob):
        path = os.path.join(stage_dir, name)
        if os.path.isfile(path):
            return path
    return None


def check_file(stage_dir: str, e: ExpectedFile, decompress: bool, verify: str = "size") -> str | None:
    """Why the staged copy of ``e`` is not right ("missing", "size N, plan M", "checksum"), or None."""
    path = locate(stage_dir, e, decompress)
    if path is None:
        return "missing"
    size = os.path.getsize(path)
    if e.raw_size is not None and size != e.raw_size:
        return f"size {size}, plan {e.raw_size}"
    # The checksum is of the decompressed bytes: a file that stayed compressed is checked by size only.
    as_planned = path == os.path.join(stage_dir, e.staged_name(decompress)) and (decompress or not e.gzip_encoded)
    if verify == "checksum" and e.sha256 and as_planned and sha256_file(path) != e.sha256.lower():
        return "checksum"
    return None


def private_azcopy_env(base: Mapping[str, str], workdir: str) -> dict[str, str]:
    """Environment that keeps azcopy's job plans and logs in ``workdir`` (mode 0700)."""
    env = dict(base)
    env["AZCOPY_LOG_LOCATION"] = os.path.join(workdir, "logs")
    env["AZCOPY_JOB_PLAN_LOCATION"] = os.path.join(workdir, "plans")
    env.setdefault("AZCOPY_DISABLE_SYSLOG", "true")
    for key in ("AZCOPY_LOG_LOCATION", "AZCOPY_JOB_PLAN_LOCATION"):
        os.makedirs(env[key], mode=0o700, exist_ok=True)
    return env


def walk_files(root: str, skip_hidden_stage_dirs: bool = False) -> list[str]:
    """Files under ``root``, relative with ``/``, sorted (optionally outside the stage's own folders)."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        if skip_hidden_stage_dirs:
            dirs[:] = [d for d in dirs if d not in (STAGING_DIRNAME, MANIFEST_DIRNAME)]
        for name in files:
            out.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return sorted(out)


def remove_partial(staging: str) -> int:
    """Remove azcopy's temporary ``.azDownload-*`` files left by a killed run; return how many."""
    n = 0
    if not os.path.isdir(staging):
        return 0
    for rel in walk_files(staging):
        if os.path.basename(rel).startswith(AZCOPY_TEMP_PREFIX):
            os.unlink(os.path.join(staging, rel))
            n += 1
    return n


def finalize(staging: str, stage_dir: str, decompress: bool) -> dict[str, int]:
    """Move every complete file from ``staging`` to its final name under ``stage_dir``.

    Returns ``{final relative name: size}``. A ``.gz`` file whose content is no longer gzip
    (azcopy decompressed it) loses the ``.gz``. A name that would leave ``stage_dir``
    (:func:`azcopy_paths.inside`) raises UnsafePath before anything is moved.
    """
    done: dict[str, int] = {}
    moves = []
    for rel in walk_files(staging):
        if os.path.basename(rel).startswith(AZCOPY_TEMP_PREFIX):
            continue
        src = os.path.join(staging, rel)
        decompressed = decompress and rel.endswith(".gz") and not is_gzip_file(src)
        name = final_name(rel, decompressed)
        moves.append((src, name, inside(stage_dir, name)))
    for src, name, dst in moves:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)
        done[name] = os.path.getsize(dst)
    return done


def shown(names: Iterable[str], limit: int = 5) -> str:
    """``a, b, c`` or ``a, b, c, d, e and 7 more``."""
    names = list(names)
    text = ", ".join(names[:limit])
    return text + (f" and {len(names) - limit} more" if len(names) > limit else "")
