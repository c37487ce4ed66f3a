"""Staging throughput on this machine: gzip-encoded (azcopy --decompress) vs uncompressed.

Azurite on 127.0.0.1 and the real azcopy. The same CosmoFlow-format files (cube 64: 2 MiB
each, as compressible as the generator's particle counts; 8 generated samples copied under
the names of BENCH_UNIVERSES universes, since generating is slow in pure Python) are uploaded twice, once as they are and
once gzip-encoded, then one node stages each through amlhpc.staging.azcopy.stage_shard. Reports
bytes over the wire, bytes on disk, seconds and MB/s for both. On loopback the wire is not
the bottleneck, so this measures azcopy's and the disk's cost of decompressing; on Azure,
where the wire is, the gzip-encoded set moves ~4.6x fewer bytes (5.1 TB -> 1.1 TB).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))

from amlhpc.staging.azcopy import ShardPlan, StageSource, blob_url, stage_shard  # noqa: E402
from amlhpc.data.cosmoflow_data import generate, sample_name  # noqa: E402
from amlhpc.data.dataset_prep import compress_all, upload_prepared  # noqa: E402

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="  # Azurite's public key


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _upload_plain(root: str, endpoint: str, container: str) -> None:
    from azure.storage.blob import ContainerClient
    client = ContainerClient(endpoint, container, credential={"account_name": ACCOUNT, "account_key": KEY})
    client.create_container()
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                client.upload_blob(os.path.relpath(path, root), f, overwrite=True)
    client.close()


def main() -> int:
    universes = int(os.environ.get("BENCH_UNIVERSES", "1"))
    work = tempfile.mkdtemp(prefix="amlhpc-bench-")
    port = _port()
    azurite = subprocess.Popen([os.path.join(ROOT, ".tools", "bin", "azurite-blob"), "--blobHost", "127.0.0.1",
                                "--blobPort", str(port), "--location", os.path.join(work, "azurite"), "--silent",
                                "--skipApiVersionCheck", "--loose", "--disableTelemetry"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
        raw = os.path.join(work, "raw")
        t = time.perf_counter()
        seeds = generate(os.path.join(work, "seed"), train_universes=1, val_universes=0, cube=64, subvolumes=8)
        os.makedirs(os.path.join(raw, "train"))
        for u in range(universes):
            for s in range(64):
                shutil.copyfile(seeds[s % len(seeds)].path, os.path.join(raw, "train", sample_name(u, s)))
        print(f"generated {len(seeds)} samples (cube 64), laid out as {universes * 64} files, "
              f"in {time.perf_counter() - t:.1f} s")
        _upload_plain(raw, endpoint, "plain")
        t = time.perf_counter()
        prepared = compress_all(raw, os.path.join(work, "gz"))
        gz_s = time.perf_counter() - t
        counts = upload_prepared(prepared, endpoint, "gzipped", {"account_name": ACCOUNT, "account_key": KEY},
                                 create_container=True)
        print(f"gzip in parallel: {counts['raw_bytes'] / 1e6:.1f} MB -> {counts['gzip_bytes'] / 1e6:.1f} MB "
              f"(ratio {counts['gzip_bytes'] / counts['raw_bytes']:.3f}) in {gz_s:.2f} s "
              f"({counts['raw_bytes'] / gz_s / 1e6:.0f} MB/s on {os.cpu_count()} CPUs)")
        from azure.storage.blob import ContainerSasPermissions, generate_container_sas
        now = datetime.now(timezone.utc)
        print(f"\n{'set':<10} {'wire MB':>8} {'disk MB':>8} {'seconds':>8} {'wire MB/s':>9} {'disk MB/s':>9}")
        for container in ("plain", "gzipped"):
            sas = generate_container_sas(ACCOUNT, container, account_key=KEY,
                                         permission=ContainerSasPermissions(read=True, list=True),
                                         start=now - timedelta(minutes=5), expiry=now + timedelta(hours=1))
            best = None
            for attempt in range(2):
                dest = os.path.join(work, f"stage-{container}-{attempt}")
                out = stage_shard(StageSource(azcopy=os.path.join(ROOT, ".tools", "bin", "azcopy"),
                                              source_url=blob_url(endpoint, container), sas=sas),
                                  ShardPlan(stage_dir=dest, rank=0, include_pattern="*.tfrecord;*.tfrecord.gz",
                                            decompress=True))
                best = out if best is None or out["seconds"] < best["seconds"] else best
                shutil.rmtree(dest)
            print(f"{container:<10} {best['bytes_over_wire'] / 1e6:>8.1f} {best['bytes'] / 1e6:>8.1f} "
                  f"{best['seconds']:>8.2f} {best['bytes_over_wire'] / best['seconds'] / 1e6:>9.1f} "
                  f"{best['bytes'] / best['seconds'] / 1e6:>9.1f}")
        print("(best of 2 runs each; each run includes azcopy's ~2 s start and end-of-job report)")
    finally:
        os.killpg(azurite.pid, 9)
        azurite.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
