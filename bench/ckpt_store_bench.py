"""What the durable checkpoint store costs the training, side by side on this machine.

train.py (the workload venv, one process, CPU) trains the reference network's shape (kernel 3,
conv 32, 5 conv layers, fc 128/64) on 32^3 cubes, which makes a checkpoint of about 38 MB (the
weights and Keras SGD's momentum), for ``--epochs`` epochs, a checkpoint every epoch; runs
without the store and with it (Azurite and the real azcopy, ``--checkpoint-cap-mbps`` 400)
alternate, ``--pairs`` times (``--copier``: the store's copier, http with the SAS by default, or azcopy). For each run: the CPU seconds of the whole job (the training
process, its DataLoader workers, azcopy: this process's RUSAGE_CHILDREN), the seconds of its
epoch loops (metrics.jsonl), and, with the store, what the store itself spent (its thread's
CPU and azcopy's, from wait4) and the training thread's time in ``put()``.

    .venv/bin/python bench/ckpt_store_bench.py [--pairs 3] [--epochs 4] [--copier auto|http|azcopy]

Prints a table and one line of medians; the figures in docs/performance.md came from it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from amlhpc.data.cosmoflow_data import generate  # noqa: E402

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="  # Azurite's
PYTHON = str(ROOT / ".venv-workload" / "bin" / "python")
AZCOPY = str(ROOT / ".tools" / "bin" / "azcopy")
MODEL = ["--cube", "32", "--conv-layers", "5", "--conv-size", "32", "--kernel-size", "3", "--fc1-size", "128",
         "--fc2-size", "64", "--dropout", "0.5", "--warmup-epochs", "0", "--batch-size", "4", "--workers", "1",
         "--log-every", "0", "--resume", "none", "--checkpoint-every", "1", "--keep-checkpoints", "1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    name = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")
    return f"{name}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"


def children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def one_run(data: Path, out: Path, store: str | None, sas_file: Path, epochs: int, copier: str = "auto") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_"))}
    env.update(CUDA_VISIBLE_DEVICES="", AZCOPY_LOG_LOCATION=str(out / "azlogs"),
               AZCOPY_JOB_PLAN_LOCATION=str(out / "azplans"))
    argv = [PYTHON, str(ROOT / "workload" / "train.py"), "--data-dir", str(data), "--output-dir", str(out),
            "--epochs", str(epochs), *MODEL]
    if store:
        argv += ["--checkpoint-store", store, "--checkpoint-sas", f"file:{sas_file}", "--azcopy", AZCOPY,
                 "--checkpoint-cap-mbps", "400", "--checkpoint-copier", copier]
    cpu0, t0 = children_cpu(), time.monotonic()
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600, check=False)
    cpu, wall = children_cpu() - cpu0, time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"train.py failed: {res.stdout[-2000:]}{res.stderr[-2000:]}")
    epochs_s = sum(json.loads(x)["epoch_time_s"] for x in (out / "metrics.jsonl").read_text().splitlines()
                   if '"kind": "epoch"' in x)
    row = {"store": bool(store), "job_cpu_s": cpu, "wall_s": wall, "epoch_loops_s": epochs_s,
           "ckpt_mb": (out / "checkpoints" / "last.pt").stat().st_size / 1e6}
    if store:
        rec = json.loads((out / "checkpoint-store.json").read_text())
        row.update(store_cpu_s=rec["copy_cpu_seconds"], handoff_s=rec["handoff_seconds"],
                   uploaded=len(rec["uploaded_epochs"]), failures=rec["failures"])
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--copier", choices=("auto", "http", "azcopy"), default="auto",
                   help="--checkpoint-copier of the runs with the store (auto: http with the SAS)")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_unused: sys.exit(143))  # Azurite is stopped on the way out
    from azure.storage.blob import BlobServiceClient, ContainerSasPermissions, generate_container_sas

    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        work = Path(tmp)
        port = free_port()
        azurite = subprocess.Popen([str(ROOT / ".tools" / "bin" / "azurite-blob"), "--blobHost", "127.0.0.1",
                                    "--blobPort", str(port), "--location", str(work / "azurite"), "--silent",
                                    "--skipApiVersionCheck", "--loose", "--disableTelemetry"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    time.sleep(0.2)
            BlobServiceClient.from_connection_string(
                f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={endpoint};"
            ).create_container("checkpoints")
            now = datetime.now(timezone.utc)
            sas_file = work / "sas"
            sas_file.write_text(generate_container_sas(ACCOUNT, "checkpoints", account_key=KEY,
                                                       permission=ContainerSasPermissions.from_string("racwdl"),
                                                       start=now - timedelta(minutes=5), expiry=now + timedelta(hours=6)))
            data = work / "data"
            generate(str(data), train_universes=2, val_universes=1, cube=32, subvolumes=32, gzip=False, seed=1)
            rows = []
            for pair in range(args.pairs):
                for with_store in ((False, True) if pair % 2 == 0 else (True, False)):
                    out = work / f"run{len(rows)}"
                    rows.append(one_run(data, out, f"{endpoint}/checkpoints/run{len(rows)}" if with_store else None,
                                        sas_file, args.epochs, args.copier))
                    r = rows[-1]
                    print(f"{'store' if r['store'] else 'none ':5}  job CPU {r['job_cpu_s']:7.1f} s  epoch loops "
                          f"{r['epoch_loops_s']:6.1f} s  wall {r['wall_s']:6.1f} s"
                          + (f"  store CPU {r['store_cpu_s']:.2f} s, put() {r['handoff_s'] * 1e3:.2f} ms, "
                             f"{r['uploaded']} copies of {r['ckpt_mb']:.1f} MB" if r["store"] else ""), flush=True)
        finally:
            os.killpg(azurite.pid, 15)
            azurite.wait(10)
    base = [r for r in rows if not r["store"]]
    withs = [r for r in rows if r["store"]]

    def med(rs, k):
        return statistics.median(r[k] for r in rs)

    cpu_delta = (med(withs, "job_cpu_s") - med(base, "job_cpu_s")) / med(base, "job_cpu_s") * 100
    loop_delta = (med(withs, "epoch_loops_s") - med(base, "epoch_loops_s")) / med(base, "epoch_loops_s") * 100
    store_share = med(withs, "store_cpu_s") / med(base, "job_cpu_s") * 100
    print(f"\n{cpu_model()}; copier {args.copier}; {args.pairs} pairs x {args.epochs} epochs, checkpoint "
          f"{med(withs, 'ckpt_mb'):.1f} MB "
          f"per epoch.\nmedians: job CPU {med(base, 'job_cpu_s'):.1f} s without, {med(withs, 'job_cpu_s'):.1f} s with "
          f"the store ({cpu_delta:+.1f} %); the store's own CPU {med(withs, 'store_cpu_s'):.2f} s "
          f"({store_share:.1f} % of the job's); epoch loops {med(base, 'epoch_loops_s'):.1f} s vs "
          f"{med(withs, 'epoch_loops_s'):.1f} s ({loop_delta:+.1f} %); the training thread's put() "
          f"{med(withs, 'handoff_s') / args.epochs * 1e3:.2f} ms per checkpoint")
    return 0


if __name__ == "__main__":
    sys.exit(main())
