# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Prepare a data set for staging: gzip files in parallel, upload them gzip-encoded.

Each file is compressed once (deterministically: ``mtime=0``, so the same input always
gives the same bytes and MD5) and uploaded as ``<name>.gz`` with ``Content-Encoding: gzip``,
``Content-MD5``, and, in the metadata, the size before compression (``amlhpc_raw_bytes``) and
the SHA-256 of the uncompressed bytes (``amlhpc_raw_sha256``). The stage then downloads with
``azcopy --decompress`` and checks every file's size, and with ``stage_verify: checksum`` its
content, against them. (The seed
case: CosmoFlow v0.7, 5.1 TB of TFRecords, is 1.1 TB gzip-encoded.)

Idempotent: a blob that already exists with the same size, MD5 and metadata is skipped
(one uploaded before the checksum was recorded is uploaded again, once). A rerun does not
compress again what it compressed before: ``work_dir`` keeps the compressed copies and a
record (``.amlhpc-prepared.json``) of each one's source as it was then (size, modification
and change times, inode) and of the copy (size, MD5, the source's SHA-256). A source that
still matches, with its copy in place at the recorded size, is neither read nor compressed
again; any difference (the file rewritten, touched, replaced, another level) compresses it
again. So a rerun over the full data set (5.1 TB) stats its files instead of gzipping them.

Compression runs in a process pool (CPU bound), uploads in a thread pool (I/O bound).
What is there already is listed with the standard library (``blob_rest``; with an account
key, through a container SAS made from it for the listing, ``azcopy_sas.container_sas``); the
Azure SDK (azure-storage-blob) is imported only where something is to be uploaded or the
container to be created, so a rerun that uploads nothing does not import it (about 0.4 s of
CPU).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, Optional, Tuple

from ..staging.azcopy_sas import container_sas
from ..sdk.blob_listing import account_name
from ..staging.blob_rest import list_container

RAW_BYTES_METADATA = "amlhpc_raw_bytes"
RAW_SHA256_METADATA = "amlhpc_raw_sha256"
DEFAULT_PATTERNS = (".tfrecord",)


@dataclass(frozen=True)
class Prepared:
    """One compressed file ready to upload."""

    source: str  # path of the original
    blob: str  # blob name (prefix/relative path + .gz)
    gz_path: str  # the compressed copy
    size: int  # compressed bytes
    raw_size: int  # original bytes
    md5: str  # base64 MD5 of the compressed bytes (as Content-MD5)
    raw_sha256: str = ""  # hex SHA-256 of the original (decompressed) bytes

    @property
    def metadata(self) -> dict[str, str]:
        return {RAW_BYTES_METADATA: str(self.raw_size), RAW_SHA256_METADATA: self.raw_sha256}


def find_files(root: str, suffixes: Sequence[str] = DEFAULT_PATTERNS) -> list[str]:
    """Files under ``root`` whose name ends with one of ``suffixes``, relative, sorted."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.endswith(tuple(suffixes)):
                out.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return sorted(out)


def _gzip_one(args: tuple[str, str, int]) -> tuple[int, int, str, str]:
    src, dst, level = args
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(src, "rb") as f:
        data = f.read()
    packed = gzip.compress(data, compresslevel=level, mtime=0)
    tmp = f"{dst}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(packed)
    os.replace(tmp, dst)
    return (len(data), len(packed), base64.b64encode(hashlib.md5(packed).digest()).decode(),  # noqa: S324 - Content-MD5
            hashlib.sha256(data).hexdigest())


RECORD = ".amlhpc-prepared.json"


def _source_key(path: str) -> list[int]:
    """What says a source file is as it was: size, modification and change times (ns), inode."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _load_record(work_dir: str, level: int) -> dict[str, list]:
    """The previous run's record of ``work_dir`` (rel -> source key + copy), or {} (none, another
    level, unreadable)."""
    try:
        with open(os.path.join(work_dir, RECORD), encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict) or record.get("level") != level or not isinstance(record.get("files"), dict):
        return {}
    return record["files"]


def _reusable(entry: object, key: list[int], gz_path: str) -> bool:
    if not (isinstance(entry, list) and len(entry) == 7 and entry[:4] == key):
        return False
    try:
        return os.path.getsize(gz_path) == entry[4]
    except OSError:
        return False


def compress_all(root: str, work_dir: str, prefix: str = "", level: int = 6, workers: int | None = None,
                 suffixes: Sequence[str] = DEFAULT_PATTERNS, stats: dict[str, int] | None = None) -> list[Prepared]:
    """gzip every data file under ``root`` into ``work_dir`` (same layout, ``.gz`` added), in
    parallel, except those whose copy in ``work_dir`` the record shows current (module
    docstring). ``stats``, where given, gets ``compressed`` and ``reused`` counts."""
    rels, jobs, record, keys, results = _plan(root, work_dir, level, suffixes)
    if not jobs:
        return []
    todo = [i for i, res in enumerate(results) if res is None]
    workers = workers or max(1, min(len(todo), os.cpu_count() or 1))
    if todo and workers == 1:
        for i in todo:
            results[i] = _gzip_one(jobs[i])
    elif todo:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = pool.map(_gzip_one, [jobs[i] for i in todo], chunksize=max(1, len(todo) // (workers * 4)))
            for i, res in zip(todo, done):
                results[i] = res
    if todo or set(record) != set(rels):
        # the record, rewritten whole (atomically): the files of this run, as compressed
        files = {r: [*k, size, md5, sha] for r, k, (_raw, size, md5, sha) in zip(rels, keys, results)}
        os.makedirs(work_dir, exist_ok=True)
        tmp = os.path.join(work_dir, f"{RECORD}.tmp-{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"level": level, "files": files}, fh)
        os.replace(tmp, os.path.join(work_dir, RECORD))
    if stats is not None:
        stats.update(compressed=len(todo), reused=len(jobs) - len(todo))
    return _prepared(prefix, rels, jobs, results)


# (files, jobs, record, source keys, reused results): what _plan returns
Plan = Tuple[List[str], List[Tuple[str, str, int]], Dict[str, list], List[List[int]], List[Optional[Tuple[int, int, str, str]]]]


def _plan(root: str, work_dir: str, level: int, suffixes: Sequence[str], rels: list[str] | None = None) -> Plan:
    """The data files (relative), their (source, copy, level) jobs, the record, each source's key,
    and each file's (raw bytes, gzip bytes, MD5, SHA-256) from the record where its copy is
    current (None where it is to be compressed). ``rels``: the files, where already found."""
    rels = find_files(root, suffixes) if rels is None else rels
    jobs = [(os.path.join(root, r), os.path.join(work_dir, r + ".gz"), level) for r in rels]
    if not jobs:
        return rels, jobs, {}, [], []
    record = _load_record(work_dir, level)
    keys = [_source_key(src) for src, _dst, _lvl in jobs]
    results: list[tuple[int, int, str, str] | None] = [
        (record[r][0], record[r][4], record[r][5], record[r][6]) if _reusable(record.get(r), k, dst) else None
        for r, k, (_src, dst, _lvl) in zip(rels, keys, jobs)]
    return rels, jobs, record, keys, results


def _prepared(prefix: str, rels: Sequence[str], jobs: Sequence[tuple[str, str, int]],
              results: Sequence[tuple[int, int, str, str] | None]) -> list[Prepared]:
    pre = prefix.strip("/")
    out = []
    for rel, (src, dst, _unused), res in zip(rels, jobs, results):
        raw, size, md5, sha = res  # type: ignore[misc]  # every file compressed or reused by now
        blob = f"{pre}/{rel}.gz" if pre else f"{rel}.gz"
        out.append(Prepared(source=src, blob=blob, gz_path=dst, size=size, raw_size=raw, md5=md5, raw_sha256=sha))
    return out


def already_prepared(root: str, work_dir: str, account_url: str, container: str, credential: Any, prefix: str = "",
                     level: int = 6, suffixes: Sequence[str] = DEFAULT_PATTERNS,
                     rels: list[str] | None = None) -> dict[str, Any] | None:
    """What :func:`compress_all` (its ``stats``) and :func:`upload_prepared` would count for a
    data set with nothing left to do, found without doing anything: every file's compressed
    copy current by the record (nothing to compress, the record not to rewrite) and every blob
    in the container as it should be, listed with the standard library. None where anything
    is to do, where there are no files, or where only the SDK can list (no SAS, no key).
    ``rels``: the files, where already found."""
    rels, jobs, record, _keys, results = _plan(root, work_dir, level, suffixes, rels)
    if not jobs or any(res is None for res in results) or set(record) != set(rels):
        return None
    if isinstance(credential, str):
        credential = credential.strip().lstrip("?")
    sas = listing_sas(container, credential)
    if sas is None:
        return None
    listed = list_container(account_url, container, sas)
    if listed is None:
        return None
    prepared = _prepared(prefix, rels, jobs, results)
    if _missing(prepared, {b.name: (b.size, b.content_md5, b.metadata) for b in listed}):
        return None
    return {**_counts(prepared, [], 0), "compressed": 0, "reused": len(prepared)}


def upload_result(counts: dict[str, Any], seconds: float) -> dict[str, Any]:
    """dataset_upload's result from the counts of the compress and upload steps (their
    ``compressed``/``reused`` stats included)."""
    ratio = counts["gzip_bytes"] / counts["raw_bytes"] if counts["raw_bytes"] else 1.0
    return {"changed": counts["uploaded"] > 0, "ratio": round(ratio, 4), "seconds": round(seconds, 3), **counts}


def needs_upload(prepared: Prepared, existing: dict[str, tuple[int, str | None, dict[str, str]]]) -> bool:
    """False when a blob of that name, size, MD5 and metadata (raw size and checksum) is there already."""
    have = existing.get(prepared.blob)
    if have is None or have[0] != prepared.size or have[1] != prepared.md5:
        return True
    meta = have[2] if len(have) > 2 else {}
    return any(meta.get(k) != v for k, v in prepared.metadata.items())


def upload_prepared(prepared: Sequence[Prepared], account_url: str, container: str, credential: Any,
                    workers: int = 8, create_container: bool = False,
                    progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Upload the compressed files gzip-encoded (skipping those already there); return counts.

    ``credential``: a SAS token, an account key (``{"account_name": ..., "account_key": ...}``
    or the SDK's StorageSharedKeyCredential), or another SDK credential (then the SDK lists)."""
    if isinstance(credential, str):
        credential = credential.strip().lstrip("?")
    sas = listing_sas(container, credential)
    listed = list_container(account_url, container, sas) if sas is not None else None
    todo = _missing(prepared, {b.name: (b.size, b.content_md5, b.metadata) for b in listed or []})
    if listed is not None and not todo:
        return _counts(prepared, todo, 0)  # everything is there: no SDK import, no client

    from azure.core.exceptions import ResourceExistsError  # noqa: PLC0415
    from azure.storage.blob import ContainerClient, ContentSettings  # noqa: PLC0415

    client = ContainerClient(account_url.rstrip("/"), container, credential=credential,
                             max_single_put_size=64 * 1024 * 1024)
    try:
        if create_container:
            try:
                client.create_container()
            except ResourceExistsError:
                pass
        if sas is None:  # a credential the standard library cannot list with
            existing = {}
            for props in client.list_blobs(include=["metadata"]):
                md5 = props.content_settings.content_md5 if props.content_settings else None
                existing[props.name] = (int(props.size), base64.b64encode(bytes(md5)).decode() if md5 else None,
                                        dict(props.metadata or {}))
            todo = _missing(prepared, existing)

        def put(p: Prepared) -> int:
            with open(p.gz_path, "rb") as f:
                client.upload_blob(
                    p.blob, f, length=p.size, overwrite=True,
                    content_settings=ContentSettings(content_type="application/octet-stream", content_encoding="gzip",
                                                     content_md5=bytearray(base64.b64decode(p.md5))),
                    metadata=p.metadata)
            if progress is not None:
                progress(p.blob)
            return p.size

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            uploaded_bytes = sum(pool.map(put, todo))
    finally:
        client.close()
    return _counts(prepared, todo, uploaded_bytes)


def _missing(prepared: Sequence[Prepared], existing: dict[str, tuple[int, str | None, dict[str, str]]]) -> list[Prepared]:
    return [p for p in prepared if needs_upload(p, existing)]


def _counts(prepared: Sequence[Prepared], todo: Sequence[Prepared], uploaded_bytes: int) -> dict[str, Any]:
    return {"files": len(prepared), "uploaded": len(todo), "already_there": len(prepared) - len(todo),
            "uploaded_bytes": uploaded_bytes, "raw_bytes": sum(p.raw_size for p in prepared),
            "gzip_bytes": sum(p.size for p in prepared)}


def listing_sas(container: str, credential: Any) -> str | None:
    """The SAS the standard library lists with: the one given, or, for an account key, a
    container SAS with read and list permission for the next hour, made from the key; None
    for any other credential."""
    if isinstance(credential, str):
        return credential
    if isinstance(credential, dict):
        name, key = credential.get("account_name"), credential.get("account_key")
    else:  # the SDK's StorageSharedKeyCredential has both; an identity has neither
        name, key = getattr(credential, "account_name", None), getattr(credential, "account_key", None)
    if not (name and key):
        return None
    now = datetime.now(timezone.utc)
    return container_sas(name, container, key, permission="rl", start=now - timedelta(minutes=5),
                         expiry=now + timedelta(hours=1))


# dataset_upload's arguments: the module's spec, and its action's check before it answers on the controller.
UPLOAD_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "src": {"type": "path", "required": True},
    "work_dir": {"type": "path", "required": True},
    "suffixes": {"type": "list", "elements": "str", "default": [".tfrecord"]},
    "account_url": {"type": "str", "required": True},
    "container": {"type": "str", "required": True},
    "prefix": {"type": "str", "default": ""},
    "sas": {"type": "str", "no_log": True},
    "account_key": {"type": "str", "no_log": True},
    "create_container": {"type": "bool", "default": False},
    "level": {"type": "int", "default": 6},
    "workers": {"type": "int", "default": 0},
    "upload_workers": {"type": "int", "default": 8},
}
UPLOAD_REQUIRED_ONE_OF = [("sas", "account_key")]
UPLOAD_MUTUALLY_EXCLUSIVE = [("sas", "account_key")]


def upload_credential(params: dict[str, Any]) -> Any:
    """The credential dataset_upload's ``params`` give: the account key (with the account's
    name), else the SAS."""
    if params["account_key"]:
        return {"account_name": account_name(params["account_url"]), "account_key": params["account_key"]}
    return params["sas"]


def missing_answer(params: dict[str, Any], rels: list[str]) -> dict[str, Any]:
    """dataset_upload's result in check mode, where it compresses and uploads nothing: whether
    any blob of the ``rels`` files is missing, from a listing."""
    pre = params["prefix"].strip("/")
    wanted = {f"{pre}/{r}.gz" if pre else f"{r}.gz" for r in rels}
    sas = listing_sas(params["container"], upload_credential(params))  # list_container strips a leading "?"
    listed = list_container(params["account_url"], params["container"], sas or "", pre) or []
    missing = wanted - {b.name for b in listed}
    return {"changed": bool(missing), "files": len(rels), "missing": len(missing)}


def upload_answer(params: dict[str, Any], check_mode: bool) -> dict[str, Any] | None:
    """dataset_upload's result where reading is all it takes, else None: in check mode
    :func:`missing_answer`; otherwise a data set with nothing left to do
    (:func:`already_prepared`), changed false with the counts the module would report. None
    where the module has files to compress or blobs to upload, or no files (it says so)."""
    started = time.monotonic()
    rels = find_files(params["src"], params["suffixes"])
    if not rels:
        return None
    if check_mode:
        return missing_answer(params, rels)
    counts = already_prepared(params["src"], params["work_dir"], params["account_url"], params["container"],
                              upload_credential(params), prefix=params["prefix"], level=params["level"],
                              suffixes=params["suffixes"], rels=rels)
    return None if counts is None else upload_result(counts, time.monotonic() - started)
