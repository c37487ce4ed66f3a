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
