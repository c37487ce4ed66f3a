#!/usr/bin/env python3
"""Controller CPU of the HTML report's plots: this tree's SVG renderer beside the old
matplotlib (Agg, PNG) one, on the same calls.

The calls are the ones ``report_html`` makes for a representative 32-node run (staging
progress and throughput of every node, the health check's bars with one failing node, every
node's NCCL sweep from 8 B to 8 GiB and a cluster run on a log2 axis, the shared mount's
bars, and 30 epochs of training), recorded once and replayed in a fresh Python process per
renderer, so that imports count. Per renderer: CPU seconds (``time.process_time``) of the
import, of each plot and of all of it, and the process's whole CPU including Python's own
start (the median of ``--repeat`` processes), and the plots' bytes.

The old renderer is ``plugins/module_utils/amlhpc/report/report_plots.py`` at ``--old-rev`` (git
show into a temporary folder); it needs matplotlib, so it is skipped where matplotlib is not
importable (``--python`` names the interpreter that runs both; /work/main's .venv has it).

    .venv/bin/python bench/report_plots_bench.py [--nodes 32] [--repeat 5] [--old-rev 2b84a11]
                                                 [--html /tmp/svg-sample.html]

``--html`` also writes the whole page of that run (``report_html.report_html``) there.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODULE = "plugins/module_utils/amlhpc/report/report_plots.py"
COLLECTION = "ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc."


def amlhpc(name: str) -> Any:
    """The collection's module_utils module ``name`` as the filter imports it (ansible.cfg's
    .cache/collections link to this checkout: `make setup` or any pytest run makes it)."""
    path = str(ROOT / ".cache" / "collections")
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(COLLECTION + name)


# ----------------------------------------------------------------------------- the run
def nccl_text(sizes: list[int], peak: float, half: int) -> str:
    """nccl-tests output (out-of-place and in-place columns) for a bandwidth curve reaching ``peak``
    GB/s at large sizes, half of it at ``half`` bytes."""
    rows = ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong"]
    for size in sizes:
        bus = peak * size / (size + half)
        alg = bus / 1.75
        us = size / (alg * 1e3)
        rows.append(f"  {size:>10d}  {size // 4:>12d}     float     sum      -1  {us:7.1f}  {alg:6.2f}  {bus:6.2f}"
                    f"      0  {us:7.1f}  {alg:6.2f}  {bus:6.2f}      0")
    rows.append(f"# Avg bus bandwidth    : {peak / 2:.4f}")
    return "\n".join(rows) + "\n"


def run_vars(nodes: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``amlhpc_cluster_nodes``-shaped node variables and the job of a representative run."""
    health = amlhpc("health")
    rnd = random.Random(7)
    sizes = [2 ** e for e in range(3, 34)]
    node_vars = []
    for i in range(nodes):
        name = f"nd-{i:03d}"
        total, t, progress = 0, 0.0, []
        for _unused in range(12):
            t += rnd.uniform(0.8, 1.2)
            total += int(rnd.uniform(150e6, 260e6))
            progress.append({"t": round(t, 2), "bytes": total})
        slow = i == 5
        busbw = 190.0 if slow else rnd.uniform(232.0, 240.0)
        checks = [health.check("h2d_bandwidth", health.PASS, f"{rnd.uniform(21, 25):.1f} GB/s", ">= 20 GB/s"),
                  health.check("nccl_all_reduce_node", health.FAIL if slow else health.PASS, f"{busbw:.2f} GB/s",
                               ">= 228 GB/s", "busbw below the floor" if slow else ""),
                  health.check("fs_write", health.PASS, f"{rnd.uniform(1100, 2300):.1f} MB/s", ">= 1000 MB/s"),
                  health.check("fs_read", health.PASS, f"{rnd.uniform(3000, 5200):.1f} MB/s", ">= 1000 MB/s")]
        node_vars.append({
            "inventory_hostname": name,
            "stage_result": {"files": 192, "bytes": total * 3, "bytes_over_wire": total, "seconds": t,
                             "throughput_mb_s": total / t / 1e6, "skipped_existing": 0, "progress": progress},
            "healthcheck_checks": checks,
            "healthcheck_nccl_node_run": {"results": [{
                "item": {"check": "nccl_all_reduce_node"}, "stderr": "",
                "stdout": nccl_text(sizes, busbw, int(rnd.uniform(20e6, 40e6)))}]},
            "healthcheck_fs_bench_run": {"write_mbps": rnd.uniform(1100, 2300), "read_mbps": rnd.uniform(3000, 5200),
                                         "files": 16, "file_size": 256 * 2 ** 20, "parallel": 8},
        })
    epochs = [{"epoch": e, "train_loss": 0.9 * math.exp(-e / 8) + 0.05, "val_loss": 0.95 * math.exp(-e / 9) + 0.07,
               "val_mae": 0.6 * math.exp(-e / 10) + 0.1, "epoch_time_s": 31.0, "samples_per_s": 2048.0}
              for e in range(30)]
    return node_vars, {"run_id": "cosmoflow-bench", "status": "Completed", "metrics": {"epochs": epochs}}


def record_calls(node_vars: list[dict[str, Any]], job: dict[str, Any]) -> list[dict[str, Any]]:
    """The report_plots calls report_html makes for that run, as JSON-able dicts."""
    report_html, report_plots = amlhpc("report_html"), amlhpc("report_plots")
    calls: list[dict[str, Any]] = []

    def recorder(kind):
        def record(*args, **kwargs):
            calls.append({"kind": kind, "args": args, "kwargs": kwargs})
            return b""
        return record
    saved = report_plots.lines, report_plots.bars
    report_plots.lines, report_plots.bars = recorder("lines"), recorder("bars")
    try:
        secs = report_html.sections(node_vars, job)
    finally:
        report_plots.lines, report_plots.bars = saved
    for call, sec in zip(calls, [s for s in secs if s["plot"] is not None]):
        call["section"] = sec["id"]
    return json.loads(json.dumps(calls))


# ----------------------------------------------------------------------------- one process
def worker(module_path: str, calls_path: str) -> None:
    """Import the renderer at ``module_path`` and replay the calls; print CPU seconds as JSON."""
    t0 = time.process_time()
    spec = importlib.util.spec_from_file_location("report_plots_under_test", module_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    t1 = time.process_time()
    calls = json.loads(Path(calls_path).read_text())
    plots, size = [], 0
    for call in calls:
        start = time.process_time()
        out = getattr(mod, call["kind"])(*call["args"], **call["kwargs"])
        plots.append(time.process_time() - start)
        size += len(out)
    total = time.process_time() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"import_s": t1 - t0, "plots_s": plots, "total_s": total, "bytes": size,
                      "process_s": usage.ru_utime + usage.ru_stime,
                      "matplotlib_loaded": "matplotlib" in sys.modules}))


def page_worker(nodes: int, html: str) -> None:
    """The whole page of the run through report_html, import included; print CPU seconds as JSON."""
    node_vars, job = run_vars(nodes)
    t0 = time.process_time()
    report_html = amlhpc("report_html")
    page = report_html.report_html(node_vars, job, [f"nodes: {nodes}"])
    total = time.process_time() - t0
    if html:
        Path(html).write_text(page)
    print(json.dumps({"total_s": total, "bytes": len(page), "matplotlib_loaded": "matplotlib" in sys.modules}))


def run_worker(python: str, *args: str) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([python, __file__, *args], check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = json.loads(out)
    got["child_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return got


def median_run(python: str, repeat: int, *args: str) -> dict[str, Any]:
    runs = [run_worker(python, *args) for _unused in range(repeat)]
    pick = sorted(runs, key=lambda r: r["total_s"])[len(runs) // 2]
    pick["range_s"] = (min(r["total_s"] for r in runs), max(r["total_s"] for r in runs))
    pick["child_median_s"] = statistics.median(r["child_s"] for r in runs)
    return pick


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def old_module(rev: str, folder: str) -> str | None:
    try:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{MODULE}"], check=True,
                              capture_output=True, text=True).stdout
    except subprocess.CalledProcessError:
        return None
    path = os.path.join(folder, "report_plots_old.py")
    Path(path).write_text(text)
    return path


def has_matplotlib(python: str) -> bool:
    return subprocess.run([python, "-c", "import matplotlib"], capture_output=True).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--old-rev", default="2b84a11", help="a commit whose report_plots.py is the matplotlib one")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--html", default="", help="also write the run's whole page here")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--page-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.page_worker:
        page_worker(args.nodes, args.html)
        return

    node_vars, job = run_vars(args.nodes)
    calls = record_calls(node_vars, job)
    print(f"CPU: {cpu_name()} ({os.cpu_count()} cores); Python {platform.python_version()}; "
          f"{args.nodes} nodes, {len(calls)} plots ({', '.join(c['section'] for c in calls)}); "
          f"median of {args.repeat} fresh processes each")
    with tempfile.TemporaryDirectory() as tmp:
        calls_path = os.path.join(tmp, "calls.json")
        Path(calls_path).write_text(json.dumps(calls))
        renderers = [("svg (this tree)", str(ROOT / MODULE))]
        old = old_module(args.old_rev, tmp)
        if old is None:
            print(f"old renderer: {args.old_rev}:{MODULE} not found, skipped")
        elif not has_matplotlib(args.python):
            print(f"old renderer: matplotlib is not importable by {args.python}, skipped")
        else:
            renderers.append((f"matplotlib png ({args.old_rev})", old))
        print(f"{'renderer':<28} {'import s':>9} {'plots s':>8} {'total s':>8} {'range s':>13} "
              f"{'process s':>10} {'bytes':>9}  per plot s")
        for name, path in renderers:
            r = median_run(args.python, args.repeat, "--worker", path, calls_path)
            print(f"{name:<28} {r['import_s']:9.3f} {sum(r['plots_s']):8.3f} {r['total_s']:8.3f} "
                  f"{r['range_s'][0]:6.3f}-{r['range_s'][1]:.3f} {r['child_median_s']:10.3f} {r['bytes']:9d}  "
                  + " ".join(f"{p:.3f}" for p in r["plots_s"])
                  + ("  (imported matplotlib)" if r["matplotlib_loaded"] else ""))
    page = median_run(args.python, args.repeat, "--page-worker", "--nodes", str(args.nodes),
                      *(["--html", args.html] if args.html else []))
    print(f"whole page (report_html.report_html, import included): {page['total_s']:.3f} s CPU "
          f"({page['range_s'][0]:.3f}-{page['range_s'][1]:.3f}), process {page['child_median_s']:.3f} s, "
          f"{page['bytes']} bytes; matplotlib imported: {page['matplotlib_loaded']}"
          + (f"; written to {args.html}" if args.html else ""))


if __name__ == "__main__":
    main()
