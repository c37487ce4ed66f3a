"""Check the staging-time model (amlhpc.staging.azcopy_model) against the seeds' figures and against Azurite here.

1. The seeds: 4 nodes, CosmoFlow v0.7 (5.1 TB, 1.1 TB gzip-encoded), about 35 min
   uncompressed and about 13 min gzip-encoded. The default rates are fitted to these two
   figures (see the model's docstring), so this row checks the arithmetic and shows which
   limit each case hits and how far the others are; it is not an independent validation.
2. Azurite on 127.0.0.1 with the real azcopy, one node: the rates are measured on a
   calibration set (``BENCH_CAL_UNIVERSES`` universes, default 1), uncompressed and
   gzip-encoded, together with azcopy's fixed start cost (a one-file run); the model then
   predicts a set ``BENCH_UNIVERSES`` (default 3) times larger, which is staged and timed.
   Printed side by side: predicted and measured seconds, and the bottleneck named.

Files: cube 64 CosmoFlow-format samples (2 MiB each), 8 generated and copied under 64
names per universe (generating is slow in pure Python). On loopback the wire is no limit:
the NIC row is azcopy's own per-node rate, and gzip-encoded data is decompression-bound.
Wall times on a shared 2-core machine wander by tens of percent; CPU time is printed too.
"""

from __future__ import annotations

import os
import platform
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
from amlhpc.staging.azcopy_model import Rates, predict  # noqa: E402
from amlhpc.data.cosmoflow_data import generate, sample_name  # noqa: E402
from amlhpc.data.dataset_prep import compress_all, upload_prepared  # noqa: E402
from staging_bench import _port, _upload_plain  # noqa: E402  (bench/ is on sys.path: the script's folder)

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="  # Azurite's public key
AZCOPY = os.path.join(ROOT, ".tools", "bin", "azcopy")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def seeds() -> None:
    print("== the seeds' figures (4 nodes, CosmoFlow v0.7), default rates ==")
    rates = Rates()
    print(f"rates: NIC {rates.nic_gbps:g} Gbps, account egress {rates.egress_gbps:g} Gbps, azcopy per node "
          f"{rates.azcopy_mb_s:g} MB/s uncompressed, {rates.decompress_mb_s:g} MB/s decompressed")
    print(f"{'case':<16} {'wire TB':>8} {'disk TB':>8} {'seed min':>9} {'model min':>10}  bottleneck (other limits, min)")
    for case, wire, raw, seed in (("uncompressed", 5.1e12, 5.1e12, 35), ("gzip-encoded", 1.1e12, 5.1e12, 13)):
        out = predict([int(wire / 4)] * 4, [int(raw / 4)] * 4, rates)
        others = ", ".join(f"{k} {v / 60:.1f}" for k, v in out["limits_s"].items() if k != out["bottleneck"])
        print(f"{case:<16} {wire / 1e12:>8.1f} {raw / 1e12:>8.1f} {seed:>9} {out['minutes']:>10.1f}  "
              f"{out['bottleneck']} ({others})")
    for nodes in (16, 64):
        out = predict([int(1.1e12 / nodes)] * nodes, [int(5.1e12 / nodes)] * nodes, rates)
        print(f"  {nodes} nodes, gzip-encoded: {out['minutes']:.1f} min, {out['bottleneck']}")
    print()


def _sas(container: str) -> str:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    now = datetime.now(timezone.utc)
    return generate_container_sas(ACCOUNT, container, account_key=KEY,
                                  permission=ContainerSasPermissions(read=True, list=True),
                                  start=now - timedelta(minutes=5), expiry=now + timedelta(hours=1))


def _stage(endpoint: str, container: str, dest: str, pattern: str) -> dict:
    c0 = os.times()
    out = stage_shard(StageSource(azcopy=AZCOPY, source_url=blob_url(endpoint, container), sas=_sas(container)),
                      ShardPlan(stage_dir=dest, rank=0, include_pattern=pattern, decompress=True))
    c1 = os.times()
    out["cpu_s"] = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    shutil.rmtree(dest)
    return out


def _layout(seeds_, root: str, universes: int, first: int = 0) -> None:
    os.makedirs(os.path.join(root, "train"), exist_ok=True)
    for u in range(first, first + universes):
        for s in range(64):
            shutil.copyfile(seeds_[s % len(seeds_)].path, os.path.join(root, "train", sample_name(u, s)))


def azurite(cal_universes: int, big_universes: int) -> None:
    work = tempfile.mkdtemp(prefix="amlhpc-bench-")
    port = _port()
    proc = subprocess.Popen([os.path.join(ROOT, ".tools", "bin", "azurite-blob"), "--blobHost", "127.0.0.1",
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
        seeds_ = generate(os.path.join(work, "seed"), train_universes=1, val_universes=0, cube=64, subvolumes=8)
        sets = {"cal": cal_universes, "big": big_universes}
        first = 0
        for name, universes in sets.items():
            raw = os.path.join(work, f"raw-{name}")
            _layout(seeds_, raw, universes, first)
            first += universes
            _upload_plain(raw, endpoint, f"plain-{name}")
            upload_prepared(compress_all(raw, os.path.join(work, f"gz-{name}")), endpoint, f"gzip-{name}",
                            {"account_name": ACCOUNT, "account_key": KEY}, create_container=True)
        # azcopy's fixed cost: start, enumerate, end-of-job report (one small file).
        one = "*_000.tfrecord"
        overhead = min(_stage(endpoint, "plain-cal", os.path.join(work, f"o{i}"), one)["seconds"] for i in range(2))
        everything = "*.tfrecord;*.tfrecord.gz"
        cal = {kind: min((_stage(endpoint, f"{kind}-cal", os.path.join(work, f"c{kind}{i}"), everything)
                          for i in range(2)), key=lambda r: r["seconds"]) for kind in ("plain", "gzip")}
        azcopy_mb_s = cal["plain"]["bytes_over_wire"] / max(cal["plain"]["seconds"] - overhead, 1e-3) / 1e6
        decompress_mb_s = cal["gzip"]["bytes"] / max(cal["gzip"]["seconds"] - overhead, 1e-3) / 1e6
        rates = Rates(nic_gbps=100.0, egress_gbps=100.0, azcopy_mb_s=round(azcopy_mb_s, 1),
                      decompress_mb_s=round(decompress_mb_s, 1), overhead_s=round(overhead, 2))
        print(f"== Azurite on 127.0.0.1, one node, azcopy 10.32.2; {cpu_name()}, {os.cpu_count()} cores (shared) ==")
        print(f"calibration ({cal_universes} universe(s), {cal['plain']['files']} files): azcopy start {overhead:.2f} s, "
              f"{azcopy_mb_s:.1f} MB/s uncompressed, {decompress_mb_s:.1f} MB/s decompressed (bytes on disk)")
        print(f"{'set':<26} {'wire MB':>8} {'disk MB':>8} {'predicted s':>12} {'measured s':>11} {'error':>7} "
              f"{'azcopy CPU s':>13}  bottleneck")
        for kind in ("plain", "gzip"):
            runs = [_stage(endpoint, f"{kind}-big", os.path.join(work, f"b{kind}{i}"), everything) for i in range(2)]
            best = min(runs, key=lambda r: r["seconds"])
            pred = predict([best["bytes_over_wire"]], [best["bytes"]], rates,
                           gzip_per_node=[best["bytes_over_wire"] if kind == "gzip" else 0])
            err = (pred["seconds"] - best["seconds"]) / best["seconds"] * 100
            label = f"{kind} ({big_universes} universes)"
            print(f"{label:<26} {best['bytes_over_wire'] / 1e6:>8.1f} {best['bytes'] / 1e6:>8.1f} "
                  f"{pred['seconds']:>12.2f} {best['seconds']:>11.2f} {err:>+6.0f}% {best['cpu_s']:>13.2f}  "
                  f"{pred['bottleneck']}")
        print("(best of 2 runs each; 'NIC' here is azcopy's per-node rate on loopback)")
        print(f"stage_model for the local profile: {{'azcopy_mb_s': {rates.azcopy_mb_s:g}, "
              f"'decompress_mb_s': {rates.decompress_mb_s:g}, 'overhead_s': {rates.overhead_s:g}}}")
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    seeds()
    if os.environ.get("BENCH_SEEDS_ONLY"):
        return 0
    azurite(int(os.environ.get("BENCH_CAL_UNIVERSES", "1")), int(os.environ.get("BENCH_UNIVERSES", "3")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
