"""The standard-library List Blobs (amlhpc.staging.blob_rest) against Azurite, beside the SDK's own
listing of the same container: names, sizes, MD5, encoding and metadata alike, page by page;
a missing container is None; a wrong SAS is refused, named, and the SAS is not in the message."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

import pytest

from amlhpc.staging.azcopy_sas import container_sas
from amlhpc.staging.blob_rest import BlobRestError, list_container


def test_the_listing_is_the_sdk_s_page_by_page(azurite):
    import hashlib

    from azure.storage.blob import ContentSettings
    from conftest import ACCOUNT, ACCOUNT_KEY

    client = azurite.service().create_container("restlist")
    for i in range(5):
        data = b"z" * (100 + i)
        client.upload_blob(f"train/univ_{i:03d}.tfrecord.gz", data,
                           content_settings=ContentSettings(content_encoding="gzip",
                                                            content_md5=bytearray(hashlib.md5(data).digest())),
                           metadata={"amlhpc_raw_bytes": str(400 + i)})
    client.upload_blob("other/readme.txt", b"hello")
    now = datetime.now(timezone.utc)
    sas = container_sas(ACCOUNT, "restlist", ACCOUNT_KEY, permission="rl", start=now - timedelta(minutes=5),
                        expiry=now + timedelta(hours=1))
    sdk = {b.name: (b.size, base64.b64encode(bytes(b.content_settings.content_md5)).decode()
                    if b.content_settings.content_md5 else None, b.content_settings.content_encoding or "",
                    dict(b.metadata or {})) for b in client.list_blobs(include=["metadata"])}
    for page_size in (None, 2):
        listed = list_container(azurite.endpoint, "restlist", sas, page_size=page_size)
        assert {b.name: (b.size, b.content_md5, b.content_encoding, b.metadata) for b in listed} == sdk
        assert len(listed) == 6
    assert [b.name for b in list_container(azurite.endpoint, "restlist", "?" + sas, "train/")] == \
        [f"train/univ_{i:03d}.tfrecord.gz" for i in range(5)]
    missing = container_sas(ACCOUNT, "nosuchcontainer", ACCOUNT_KEY, permission="rl",
                            start=now - timedelta(minutes=5), expiry=now + timedelta(hours=1))
    assert list_container(azurite.endpoint, "nosuchcontainer", missing) is None

    bad = container_sas(ACCOUNT, "restlist", base64.b64encode(b"x" * 64).decode(), permission="rl",
                        start=now - timedelta(minutes=5), expiry=now + timedelta(hours=1))
    with pytest.raises(BlobRestError) as refused:
        list_container(azurite.endpoint, "restlist", bad)
    assert refused.value.status == 403 and "sig=" not in str(refused.value)
    assert bad.split("sig=")[1] not in str(refused.value)


def test_an_upload_that_finds_everything_there_does_not_import_the_sdk(azurite, tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import ACCOUNT, ACCOUNT_KEY

    from amlhpc.data.dataset_prep import compress_all, upload_prepared

    src = tmp_path / "src" / "train"
    src.mkdir(parents=True)
    for i in range(2):
        (src / f"univ_{i}.tfrecord").write_bytes(bytes(range(256)) * (40 + i))
    key = {"account_name": ACCOUNT, "account_key": ACCOUNT_KEY}
    first = upload_prepared(compress_all(str(tmp_path / "src"), str(tmp_path / "work")), azurite.endpoint,
                            "noimport", key, create_container=True)
    assert first["uploaded"] == 2
    rerun = ("import json, sys\nfrom amlhpc.data.dataset_prep import compress_all, upload_prepared\n"
             "counts = upload_prepared(compress_all(sys.argv[1], sys.argv[2]), sys.argv[3], 'noimport',\n"
             "                         {'account_name': sys.argv[4], 'account_key': sys.argv[5]})\n"
             "print(json.dumps([counts, sorted(m for m in sys.modules if m.startswith('azure'))]))\n")
    root = Path(__file__).resolve().parents[2]

    def again() -> tuple[dict, list]:
        res = subprocess.run([sys.executable, "-c", rerun, str(tmp_path / "src"), str(tmp_path / "work"),
                              azurite.endpoint, ACCOUNT, ACCOUNT_KEY], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, PYTHONPATH=str(root / "plugins" / "module_utils")), check=False)
        assert res.returncode == 0, res.stderr[-2000:]
        return tuple(json.loads(res.stdout))

    counts, imported = again()
    assert counts["uploaded"] == 0 and counts["already_there"] == 2 and imported == [], (counts, imported)
    (src / "univ_1.tfrecord").write_bytes(b"changed" * 100)  # one file to upload: the SDK does it
    counts, imported = again()
    assert counts["uploaded"] == 1 and "azure.storage.blob" in imported
