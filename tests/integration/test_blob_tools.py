"""The test tools themselves: Azurite answers the SDK, and the real azcopy moves bytes."""

from __future__ import annotations

import subprocess


def test_azcopy_round_trip_through_azurite(azurite, azcopy, azcopy_env, tmp_path):
    service = azurite.service()
    service.create_container("roundtrip")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"x" * 100_000)
    sas = azurite.container_sas("roundtrip", permission="racwl")
    url = f"{azurite.endpoint}/roundtrip"
    up = subprocess.run([azcopy, "copy", str(src / "a.bin"), f"{url}/a.bin?{sas}", "--from-to", "LocalBlob"],
                        env=azcopy_env, capture_output=True, text=True, timeout=120, check=False)
    assert up.returncode == 0, up.stdout + up.stderr
    names = [b.name for b in service.get_container_client("roundtrip").list_blobs()]
    assert names == ["a.bin"]
    dst = tmp_path / "dst"
    down = subprocess.run([azcopy, "copy", f"{url}/a.bin?{sas}", str(dst / "a.bin"), "--from-to", "BlobLocal"],
                          env=azcopy_env, capture_output=True, text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert (dst / "a.bin").read_bytes() == b"x" * 100_000


def test_the_standard_library_sas_is_accepted_and_a_wrong_key_is_not(azurite, azcopy, azcopy_env, tmp_path):
    """The blob_sas lookup's token (amlhpc.staging.azcopy_sas.container_sas, no Azure SDK): azcopy lists
    and reads the container with it (a recursive copy of the container); the same token signed
    with another key is refused, so the service does check the signature."""
    import base64
    from datetime import datetime, timedelta, timezone

    from amlhpc.staging.azcopy_sas import container_sas
    from conftest import ACCOUNT, ACCOUNT_KEY

    service = azurite.service()
    service.create_container("stdlibsas")
    service.get_container_client("stdlibsas").upload_blob("train/a_000.tfrecord", b"y" * 5000)
    now = datetime.now(timezone.utc)
    url = f"{azurite.endpoint}/stdlibsas"

    def azcopy_container(key: str, dest: str) -> subprocess.CompletedProcess:
        sas = container_sas(ACCOUNT, "stdlibsas", key, permission="rl", start=now - timedelta(minutes=5),
                            expiry=now + timedelta(hours=1))
        return subprocess.run([azcopy, "copy", f"{url}?{sas}", str(tmp_path / dest), "--recursive",
                               "--from-to", "BlobLocal"], env=azcopy_env, capture_output=True, text=True,
                              timeout=120, check=False)

    good = azcopy_container(ACCOUNT_KEY, "good")
    assert good.returncode == 0, good.stdout + good.stderr
    assert (tmp_path / "good" / "stdlibsas" / "train" / "a_000.tfrecord").read_bytes() == b"y" * 5000
    bad = azcopy_container(base64.b64encode(b"not the account key, 64 bytes long......................").decode(),
                           "bad")
    assert bad.returncode != 0, bad.stdout
    assert not list((tmp_path / "bad").rglob("*.tfrecord"))
