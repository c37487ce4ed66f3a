#!/usr/bin/env python3
"""What the stage's plan ships to each node, and what it costs the controller, at 512 nodes and
524,288 files: the exact handoff (issue 40) beside 2.1.0's Bloom filter.

Measured, in CPU time of this process (one core), on a CosmoFlow-shaped listing (train and
validation files ``univ_ics_2019-03_a<U>_<SSS>.tfrecord.gz`` of about 16 MiB, each with its size
on disk and SHA-256, as ``prepare_dataset`` records them):

* the plan (``plan_shards`` balanced and ``plan_summary``: what ``azcopy_shards`` returns);
* 2.1.0's extra: the Bloom filter of every name (``known_names``, the same to every node);
* today's extra: each node's folder read (``azcopy_handoff.read_command``'s output, made
  here as the node would print it) parsed, and each node's exact lists (``plan_handoff``), for
  a rerun (each node holds its shard) and after the cluster shrank by one node (node-local
  storage: every node holds its shard of the larger plan, and hands files on);
* plan bytes per node: the JSON of what the stage task gets (its shard entry, and the Bloom
  filter or its handoff lists), and the bytes each node's read sends back.

    python3 bench/stage_plan_bench.py [--nodes 512] [--files 524288]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from amlhpc.staging.azcopy_handoff import MARK, plan_handoff  # noqa: E402
from amlhpc.staging.azcopy_sync import manifest_text  # noqa: E402
from amlhpc.staging.shards import Blob, plan_shards, plan_summary  # noqa: E402


class BloomNameSet:
    """2.1.0's ``azcopy_files.NameSet`` (10 bits a name, 7 hashes), kept here for the comparison."""

    def __init__(self, bits: int) -> None:
        self.bits = max(64, bits)
        self.data = bytearray((self.bits + 7) // 8)

    @classmethod
    def of(cls, names: list[str]) -> BloomNameSet:
        s = cls(len(names) * 10)
        for n in names:
            digest = hashlib.blake2b(n.encode(), digest_size=16).digest()
            a, b = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little") | 1
            for i in range(7):
                p = (a + i * b) % s.bits
                s.data[p >> 3] |= 1 << (p & 7)
        return s

    def dump(self) -> str:
        return f"{self.bits}:{base64.b64encode(bytes(self.data)).decode()}"


def listing(files: int, seed: int = 1) -> list[Blob]:
    rng = random.Random(seed)
    out = []
    for i in range(files):
        u, s = divmod(i, 64)
        split = "validation" if u % 8 == 7 else "train"
        raw = 16 * 2**20
        wire = int(raw * rng.uniform(0.2, 0.23))
        out.append(Blob(f"{split}/univ_ics_2019-03_a{u:06d}_{s:03d}.tfrecord.gz", wire, raw, "gzip",
                        hashlib.sha256(str(i).encode()).hexdigest()))
    return out


def node_read(entry: dict, rank: int) -> str:
    """What ``read_command`` prints on a node-local folder holding exactly ``entry``'s files."""
    files = {r["name"][:-3]: r["raw_size"] for r in entry["expected"]}
    names = base64.b64encode(b"\0".join(n.encode() for n in files) + b"\0").decode()
    manifest = base64.b64encode(manifest_text(files).encode()).decode()
    return f"{MARK} files {names}\n{MARK} manifest {rank}.json {manifest}\n"


def cpu(fn, *args, **kw):
    start = time.process_time()
    out = fn(*args, **kw)
    return out, time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--files", type=int, default=524288)
    a = ap.parse_args()
    hosts = [f"node-{i}" for i in range(a.nodes)]
    blobs = listing(a.files)
    print(f"{a.nodes} nodes, {a.files} files; {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}")

    shards, t_plan = cpu(plan_shards, hosts, "balanced", blobs)
    plan, t_summary = cpu(plan_summary, shards, "balanced")
    bloom, t_bloom = cpu(lambda: BloomNameSet.of([b.name for b in blobs]).dump())
    reads = {h: node_read(plan["shards"][h], plan["shards"][h]["rank"]) for h in hosts}
    handoff, t_handoff = cpu(plan_handoff, plan, reads, shared=False)
    assert all(not v["handed"] and not v["gone"] for v in handoff.values())

    # The cluster shrinks by one node: every node still holds its shard of the larger plan.
    smaller = hosts[:-1]
    plan2 = plan_summary(plan_shards(smaller, "balanced", blobs), "balanced")
    reads2 = {h: reads[h] for h in smaller}
    handoff2, t_handoff2 = cpu(plan_handoff, plan2, reads2, shared=False)
    handed = [len(handoff2[h]["handed"]) for h in smaller]

    entry_bytes = [len(json.dumps(plan["shards"][h])) for h in hosts]
    read_bytes = [len(reads[h]) for h in hosts]
    hand_bytes = [len(json.dumps(handoff[h])) for h in hosts]
    hand2_bytes = [len(json.dumps(handoff2[h])) for h in smaller]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    n = a.nodes
    print()
    print("| per node | 2.1.0 (Bloom filter) | exact handoff |")
    print("| --- | --- | --- |")
    print(f"| plan bytes to the node (shard entry + names) | {mean(entry_bytes) + len(bloom):,.0f} "
          f"({mean(entry_bytes):,.0f} + {len(bloom):,}) | {mean(entry_bytes) + mean(hand_bytes):,.0f} "
          f"({mean(entry_bytes):,.0f} + {mean(hand_bytes):,.0f}); after a shrink "
          f"{mean(entry_bytes) + mean(hand2_bytes):,.0f} |")
    print(f"| bytes the node's read sends back | 0 | {mean(read_bytes):,.0f} |")
    print(f"| all nodes together | {(mean(entry_bytes) + len(bloom)) * n / 1e6:,.1f} MB | "
          f"{(mean(entry_bytes) + mean(hand_bytes)) * n / 1e6:,.1f} MB to the nodes, "
          f"{sum(read_bytes) / 1e6:,.1f} MB back |")
    print()
    print("| controller CPU | 2.1.0 | exact handoff |")
    print("| --- | --- | --- |")
    print(f"| plan (plan_shards + plan_summary) | {t_plan + t_summary:.2f} s | {t_plan + t_summary:.2f} s |")
    print(f"| names for the nodes | {t_bloom:.2f} s (Bloom filter) | {t_handoff:.2f} s (rerun), "
          f"{t_handoff2:.2f} s (after a shrink: {mean(handed):.0f} files handed per node) |")
    print(f"| per node (names) | {t_bloom / n * 1000:.1f} ms | {t_handoff / n * 1000:.1f} ms rerun, "
          f"{t_handoff2 / (n - 1) * 1000:.1f} ms after a shrink |")


if __name__ == "__main__":
    main()
