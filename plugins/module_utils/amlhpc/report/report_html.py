# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The run's HTML report (``outputs/<run>/report.html``): one self-contained page.

Five sections, each built by a plain function from results in the shapes the run
registers, so tests call them with those shapes directly:

* ``staging``   per-node ``azcopy_stage`` results (files, bytes, seconds, ``progress``
                samples from azcopy's JSON output: ``{t, bytes}`` or, from older results,
                ``{seconds, bytes_over_wire}``) and, where the result carries one, the
                predicted staging time and its bottleneck;
* ``health``    each node's ``healthcheck_checks`` (``amlhpc.health.health.check`` dicts) against
                their thresholds;
* ``nccl``      the nccl-tests output the health check registered (node and cluster runs),
                bus bandwidth by message size;
* ``fsbench``   the shared-mount write/read throughput (``amlhpc_fs_bench`` result or
                elbencho's output);
* ``training``  the job's metrics (``amlhpc.azure.job_spec.read_metrics``): loss and validation
                MAE per epoch.

A section is a dict ``{"id", "title", "summary": [str], "plot": SVG document (UTF-8 bytes,
amlhpc.report.report_plots) or None, "plot_note": why there is no plot, "tables": [{"caption",
"headers", "rows"}]}``; a section without data has no plot and its summary says why.
:func:`render` turns sections into HTML (inline CSS, plots as ``data:image/svg+xml;base64``
images, nothing fetched from anywhere).
Nothing here reads a secret: only the named numeric fields of each result are used.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..health import health
from ..recovery import node_loss
from ..staging.azcopy_sas import redact
from . import report_plots
from .report import STRAY_KINDS, gone_removed

SECTION_IDS = ("staging", "health", "nccl", "fsbench", "training")

Section = dict[str, Any]
Plotter = Callable[[], bytes]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def first_number(text: Any) -> float | None:
    """The first number in a check's value or threshold ("24.3 GB/s (min of 16...)", ">= 20 GB/s")."""
    m = _NUMBER.search(str(text or ""))
    return float(m.group(0)) if m else None


def _f(value: Any, digits: int = 1) -> str:
    return "" if value is None else f"{float(value):.{digits}f}"


def _section(sid: str, title: str) -> Section:
    return {"id": sid, "title": title, "summary": [], "plot": None, "plot_note": "", "tables": []}


def _draw(section: Section, plotter: Plotter) -> None:
    """The section's plot; a result the plot cannot be drawn from loses the plot, not the page
    (its tables stay, and the section says why)."""
    try:
        section["plot"] = plotter()
    except (ArithmeticError, KeyError, TypeError, ValueError) as exc:
        section["plot_note"] = f"plot not drawn: {type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------------------
# Staging
# --------------------------------------------------------------------------------------
def progress_points(result: Mapping[str, Any]) -> list[tuple[float, int]]:
    """(seconds since the start, bytes over the wire) of one node's progress samples, in time order.

    Takes both shapes: ``{"t", "bytes"}`` and ``{"seconds", "bytes_over_wire"}``.
    """
    points = []
    for p in result.get("progress") or []:
        if not isinstance(p, Mapping):
            continue
        t = p.get("t", p.get("seconds"))
        b = p.get("bytes", p.get("bytes_over_wire"))
        if t is None or b is None:
            continue
        points.append((float(t), int(b)))
    return sorted(points)


def rate_points(points: Sequence[tuple[float, int]]) -> list[tuple[float, float]]:
    """MB/s (10^6 bytes/s) between consecutive samples, at the end of each interval.

    The first interval starts at (0 s, 0 bytes): azcopy's first sample comes after it started.
    """
    out = []
    prev_t, prev_b = 0.0, 0
    for t, b in points:
        if t > prev_t:
            out.append((t, (b - prev_b) / (t - prev_t) / 1e6))
            prev_t, prev_b = t, b
    return out


def _prediction(result: Mapping[str, Any]) -> tuple[float | None, str]:
    pred = result.get("prediction")
    if isinstance(pred, Mapping):
        seconds = pred.get("seconds", pred.get("predicted_seconds"))
        return (None if seconds is None else float(seconds)), str(pred.get("bottleneck") or "")
    seconds = result.get("predicted_seconds")
    return (None if seconds is None else float(seconds)), str(result.get("bottleneck") or "")


def _int_or_blank(value: Any) -> str:
    return "" if value is None else str(int(value))


def _named_files(node: str, result: Mapping[str, Any]) -> list[str]:
    """The files a node had wrong (fetched again) or whose blob is gone, as the result names them."""
    out = []
    for key, count_key, what in STRAY_KINDS:
        names = [str(n) for n in result.get(key) or []]
        count = int(result.get(count_key) or len(names))
        if count:
            more = f" (+{count - len(names)} more)" if count > len(names) else ""
            line = f"{node}: {count} file(s) {what}: {', '.join(names)}{more}"
            if key == "gone" and result.get("removed") is not None:
                line += f"; removed {gone_removed(result)}"
            out.append(line)
    return out


def staging_section(results: Mapping[str, Mapping[str, Any] | None]) -> Section:
    """Throughput per node and over time from each node's ``azcopy_stage`` result."""
    sec = _section("staging", "Staging throughput")
    ran = {n: r for n, r in results.items() if isinstance(r, Mapping) and "files" in r}
    if not ran:
        sec["summary"].append("No data: staging did not run in this run (the stage phase was skipped or "
                              "not selected).")
        return sec
    rows = []
    series_total, series_rate = [], []
    for node in sorted(ran):
        r = ran[node]
        pred_s, bottleneck = _prediction(r)
        rows.append([node, str(int(r.get("files", 0))), _int_or_blank(r.get("fetched")), str(int(r.get("bytes", 0))),
                     str(int(r.get("bytes_over_wire", 0))), _f(r.get("seconds", 0.0), 2),
                     _f(r.get("throughput_mb_s", 0.0), 2), str(int(r.get("skipped_existing", 0))),
                     _int_or_blank(r.get("repaired_count")), _int_or_blank(r.get("gone_count")),
                     "" if pred_s is None else f"{pred_s:.3g}", bottleneck])
        sec["summary"].extend(_named_files(node, r))
        pts = progress_points(r)
        if pts:
            start = [] if pts[0][0] == 0 else [(0.0, 0)]
            series_total.append({"label": node, "x": [t for t, _unused in start + pts],
                                 "y": [b / 1e6 for _unused, b in start + pts]})
            rates = rate_points(pts)
            # Drawn as steps: each rate holds over the interval that ends at its sample, the
            # first one from 0 s.
            series_rate.append({"label": node, "x": [0.0] + [t for t, _unused in rates],
                                "y": [rates[0][1] if rates else 0.0] + [v for _unused, v in rates]})
    sec["tables"].append({
        "caption": "Per node: azcopy's result (bytes over the wire are compressed bytes when the blobs are "
                   "gzip-encoded; throughput is over the wire; blank: not in this result)",
        "headers": ["node", "files", "fetched", "bytes on disk", "bytes over the wire", "seconds", "MB/s",
                    "already there", "repaired", "gone", "predicted s", "bottleneck"],
        "rows": rows})
    wire = sum(int(r.get("bytes_over_wire", 0)) for r in ran.values())
    seconds = max(float(r.get("seconds", 0) or 0) for r in ran.values())
    sec["summary"].append(f"{len(ran)} node(s), {sum(int(r.get('files', 0)) for r in ran.values())} files, "
                          f"{wire} bytes over the wire in {seconds:.2f} s"
                          + (f" ({wire / seconds / 1e6:.2f} MB/s together)" if seconds > 0 else ""))
    if not series_total:
        existing = sum(int(r.get("skipped_existing", 0)) for r in ran.values())
        sec["summary"].append(
            "No progress over time: azcopy fetched nothing in this run"
            + (f" ({existing} file(s) were already staged)" if existing else "")
            + " or its result carries no progress samples.")
    else:
        _draw(sec, lambda: report_plots.lines([
            {"title": "Bytes over the wire", "xlabel": "seconds", "ylabel": "MB", "series": series_total},
            {"title": "Throughput between progress samples", "xlabel": "seconds", "ylabel": "MB/s",
             "series": series_rate, "steps": True}]))
    return sec


# --------------------------------------------------------------------------------------
# Health checks
# --------------------------------------------------------------------------------------
def health_section(checks_by_node: Mapping[str, Sequence[Mapping[str, Any]] | None]) -> Section:
    """Every node's checks against their thresholds; the plot shows gated figures as % of threshold."""
    sec = _section("health", "Health checks per node")
    ran = {n: c for n, c in checks_by_node.items() if c}
    if not ran:
        sec["summary"].append("No data: the health check did not run in this run "
                              "(healthcheck_enabled is false, or the phase was not selected).")
        return sec
    verdict = health.report(ran)
    sec["summary"].append(verdict["summary"])
    if verdict["failing"]:
        sec["summary"].append("Failing: " + "; ".join(
            f"{f['node']} ({', '.join(f['reasons'])})" for f in verdict["failing"]))
    rows, gated = [], []
    for node in sorted(ran):
        for c in ran[node]:
            rows.append([node, c["check"], c["status"], c["value"], c["threshold"], c["reason"]])
            value, limit = first_number(c["value"]), first_number(c["threshold"])
            if (c["status"] in (health.PASS, health.FAIL) and str(c["threshold"]).startswith(">=")
                    and value is not None and limit):
                gated.append((f"{node}\n{c['check']}", 100.0 * value / limit, c["status"]))
    sec["tables"].append({"caption": "Checks (value against threshold; a check with no threshold is reported, "
                                     "not gated)",
                          "headers": ["node", "check", "status", "value", "threshold", "reason"], "rows": rows})
    if gated:
        _draw(sec, lambda: report_plots.bars(
            [g[0] for g in gated],
            [{"values": [g[1] for g in gated],
              "colours": [report_plots.PASS_COLOUR if g[2] == health.PASS else report_plots.FAIL_COLOUR
                          for g in gated]}],
            title="Measured as % of the threshold (green pass, red fail)", ylabel="% of threshold",
            hline=(100.0, "threshold")))
    else:
        nodes = sorted(ran)
        counts = {s: [sum(1 for c in ran[n] if c["status"] == s) for n in nodes]
                  for s in (health.PASS, health.FAIL, health.SKIP)}
        sec["summary"].append("No check had a threshold to compare with (no GPU check ran and the VM size has "
                              "no figures, so measured values are reported, not gated): the plot counts "
                              "the checks per node.")
        _draw(sec, lambda: report_plots.bars(
            nodes, [{"label": s, "values": counts[s], "colour": colour} for s, colour in (
                (health.PASS, report_plots.PASS_COLOUR), (health.FAIL, report_plots.FAIL_COLOUR),
                (health.SKIP, report_plots.SKIP_COLOUR))],
            title="Checks per node", ylabel="checks", integer=True))
    return sec


# --------------------------------------------------------------------------------------
# NCCL bus bandwidth
# --------------------------------------------------------------------------------------
def nccl_runs(node_vars: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """``{"node", "test", "text"}`` of every nccl-tests run the health check registered."""
    runs, seen = [], set()
    for hv in node_vars:
        node = str(hv.get("inventory_hostname", "?"))
        for key in ("healthcheck_nccl_node_run", "healthcheck_nccl_cluster_run"):
            reg = hv.get(key)
            for r in (reg.get("results") or []) if isinstance(reg, Mapping) else []:
                if isinstance(r, Mapping) and "stdout" in r and not r.get("skipped"):
                    item = r.get("item") if isinstance(r.get("item"), Mapping) else {}
                    # The cluster runs run once (from each head) and are registered on every
                    # node: each is the head's, once.
                    run = {"node": str(item.get("head", node)), "test": str(item.get("check", key)),
                           "text": f"{r.get('stdout', '')}\n{r.get('stderr', '')}"}
                    if (run["node"], run["test"]) not in seen:
                        seen.add((run["node"], run["test"]))
                        runs.append(run)
    return runs


def node_checks(node_vars: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]] | None]:
    """Each node's ``healthcheck_checks``, a head's with its cluster's multi-node checks
    (judged from the registered cluster runs, as the gate judges them)."""
    # registered once (run_once), on every node alike
    regs = [hv.get("healthcheck_nccl_cluster_run") for hv in node_vars]
    runs = next((r["results"] for r in regs if isinstance(r, Mapping) and r.get("results")), [])
    return health.with_cluster_checks({str(hv.get("inventory_hostname", "?")): hv.get("healthcheck_checks")
                                       for hv in node_vars}, runs)


def _skip_reasons(checks_by_node: Mapping[str, Sequence[Mapping[str, Any]] | None], prefix: str) -> list[str]:
    reasons: dict[str, list[str]] = {}
    for node in sorted(checks_by_node):
        for c in checks_by_node[node] or []:
            if c["check"].startswith(prefix) and c["status"] == health.SKIP:
                reasons.setdefault(c["reason"], [])
                if node not in reasons[c["reason"]]:
                    reasons[c["reason"]].append(node)
    return [f"{r} ({', '.join(nodes)})" for r, nodes in reasons.items()]


def nccl_section(runs: Sequence[Mapping[str, str]],
                 checks_by_node: Mapping[str, Sequence[Mapping[str, Any]] | None]) -> Section:
    """Bus bandwidth (out-of-place, GB/s) by message size of every nccl-tests run."""
    sec = _section("nccl", "NCCL bus bandwidth by message size")
    rows, series = [], []
    for run in runs:
        parsed = health.parse_nccl_tests(run["text"])
        label = f"{run['node']} {run['test']}"
        if not parsed["rows"]:
            sec["summary"].append(f"{label}: nccl-tests printed no result row.")
            continue
        for r in parsed["rows"]:
            rows.append([run["node"], run["test"], str(r["size"]), _f(r["oop_algbw"], 2), _f(r["oop_busbw"], 2),
                         _f(r["ip_busbw"], 2)])
        series.append({"label": label, "x": [r["size"] for r in parsed["rows"]],
                       "y": [r["oop_busbw"] for r in parsed["rows"]]})
    if not series:
        reasons = _skip_reasons(checks_by_node, "nccl_")
        sec["summary"].insert(0, "No data: no NCCL test ran"
                              + (": " + "; ".join(reasons) if reasons else " (the health check did not run).")
                              + ("." if reasons else ""))
        return sec
    sec["summary"].insert(0, f"{len(series)} run(s); the gate uses the busbw at the largest message size.")
    sec["tables"].append({"caption": "nccl-tests result rows (GB/s)",
                          "headers": ["node", "test", "size (B)", "algbw", "busbw", "in-place busbw"],
                          "rows": rows})
    _draw(sec, lambda: report_plots.lines([
        {"title": "Bus bandwidth (out-of-place)", "xlabel": "message size (bytes)", "ylabel": "GB/s",
         "series": series, "logx": True}], width=7.5))
    return sec


# --------------------------------------------------------------------------------------
# Shared-mount throughput
# --------------------------------------------------------------------------------------
def fs_results(node_vars: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per node: ``{"tool", "write_mbps", "read_mbps", ...}`` of the shared-mount benchmark that ran."""
    out = {}
    for hv in node_vars:
        node = str(hv.get("inventory_hostname", "?"))
        eb = hv.get("healthcheck_elbencho_run")
        fb = hv.get("healthcheck_fs_bench_run")
        if isinstance(eb, Mapping) and "stdout" in eb and not eb.get("skipped"):
            parsed = health.parse_elbencho(str(eb["stdout"]))
            out[node] = {"tool": "elbencho", "write_mbps": parsed.get("WRITE"), "read_mbps": parsed.get("READ")}
        elif isinstance(fb, Mapping) and "write_mbps" in fb and not fb.get("skipped"):
            out[node] = {"tool": "amlhpc_fs_bench", "write_mbps": fb.get("write_mbps"),
                         "read_mbps": fb.get("read_mbps"), "files": fb.get("files"),
                         "file_size": fb.get("file_size"), "parallel": fb.get("parallel"),
                         "path": fb.get("path")}
    return out


def fsbench_section(results: Mapping[str, Mapping[str, Any]],
                    checks_by_node: Mapping[str, Sequence[Mapping[str, Any]] | None]) -> Section:
    """Write and read MB/s per node, with the thresholds the checks used."""
    sec = _section("fsbench", "Shared-mount throughput")
    if not results:
        reasons = _skip_reasons(checks_by_node, "fs_")
        sec["summary"].append("No data: no shared-mount test ran"
                              + (": " + "; ".join(reasons) + "." if reasons else
                                 " (the health check did not run, or the mount path does not exist)."))
        return sec
    limits: dict[str, float | None] = {"fs_write": None, "fs_read": None}
    rows = []
    for node in sorted(results):
        r = results[node]
        checks = {c["check"]: c for c in checks_by_node.get(node) or []}
        node_limits = {k: first_number(checks[k]["threshold"]) if k in checks else None for k in limits}
        for k, v in node_limits.items():
            limits[k] = limits[k] if v is None else v
        shape = (f"{r['files']} x {int(r['file_size']) // 2**20} MiB, {r['parallel']} threads"
                 if r.get("files") and r.get("file_size") else "")
        rows.append([node, r["tool"], _f(r.get("write_mbps")), _f(r.get("read_mbps")),
                     _f(node_limits["fs_write"]), _f(node_limits["fs_read"]), shape])
    sec["summary"].append(f"{len(results)} node(s); MB/s = 10^6 bytes/s; "
                          + ("thresholds: write >= {}, read >= {}".format(_f(limits["fs_write"]),
                                                                          _f(limits["fs_read"]))
                             if any(v is not None for v in limits.values())
                             else "no threshold for this VM size (reported, not gated)."))
    sec["tables"].append({"caption": "Per node (MB/s)",
                          "headers": ["node", "tool", "write", "read", "write threshold", "read threshold",
                                      "files"], "rows": rows})
    nodes = sorted(results)
    hline = (limits["fs_write"], "threshold") if limits["fs_write"] is not None else None
    _draw(sec, lambda: report_plots.bars(
        nodes, [{"label": "write", "values": [results[n].get("write_mbps") for n in nodes]},
                {"label": "read", "values": [results[n].get("read_mbps") for n in nodes]}],
        title="Shared-mount throughput per node", ylabel="MB/s", hline=hline))
    return sec


# --------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------
EPOCH_COLUMNS = ("epoch", "train_loss", "val_loss", "val_mae", "epoch_time_s", "samples_per_s")


def training_section(job: Mapping[str, Any] | None) -> Section:
    """Training loss and validation MAE per epoch from the job's metrics."""
    sec = _section("training", "Training loss and validation MAE per epoch")
    if not isinstance(job, Mapping) or not job or job.get("skipped"):
        sec["summary"].append("No data: no training job ran in this run (the submit phase was skipped or not "
                              "selected).")
        return sec
    metrics = job.get("metrics") or {}
    epochs = [e for e in metrics.get("epochs") or [] if isinstance(e, Mapping) and "train_loss" in e]
    sec["summary"].append(f"run {job.get('run_id', '?')}: {job.get('status', '?')}")
    sec["summary"] += node_loss.report_lines(job.get("interruptions"))  # a node lost on the way
    if not epochs:
        sec["summary"].append("No data: the job recorded no finished epoch (metrics.jsonl has no epoch record).")
        return sec
    rows = [[str(e.get("epoch", i)) if c == "epoch" else _f(e.get(c), 4 if "loss" in c or "mae" in c else 2)
             for c in EPOCH_COLUMNS] for i, e in enumerate(epochs)]
    sec["tables"].append({"caption": "Per epoch", "headers": list(EPOCH_COLUMNS), "rows": rows})
    xs = [e.get("epoch", i) for i, e in enumerate(epochs)]
    loss = [{"label": "train loss", "x": xs, "y": [float(e["train_loss"]) for e in epochs]}]
    if all("val_loss" in e for e in epochs):
        loss.append({"label": "validation loss", "x": xs, "y": [float(e["val_loss"]) for e in epochs]})
    panels = [{"title": "Loss per epoch", "xlabel": "epoch", "ylabel": "loss", "series": loss, "integer_x": True}]
    if all("val_mae" in e for e in epochs):
        panels.append({"title": "Validation MAE per epoch", "xlabel": "epoch", "ylabel": "MAE",
                       "series": [{"label": "validation MAE", "x": xs, "y": [float(e["val_mae"]) for e in epochs]}],
                       "integer_x": True})
    else:
        sec["summary"].append("The epochs carry no val_mae (no validation set): only the loss is plotted.")
    _draw(sec, lambda: report_plots.lines(panels))
    return sec


# --------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------
def sections(node_vars: Sequence[Mapping[str, Any]], job: Mapping[str, Any] | None = None) -> list[Section]:
    """The five sections from the nodes' registered results (``amlhpc_cluster_nodes`` shape) and the job."""
    names = [str(hv.get("inventory_hostname", "?")) for hv in node_vars]
    checks = node_checks(node_vars)
    return [
        staging_section({n: hv.get("stage_result") for n, hv in zip(names, node_vars)}),
        health_section(checks),
        nccl_section(nccl_runs(node_vars), checks),
        fsbench_section(fs_results(node_vars), checks),
        training_section(job),
    ]


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:70em;
color:#222;padding:0 1em}
h1{font-size:1.5em;border-bottom:2px solid #0072B2;padding-bottom:.2em}
h2{font-size:1.2em;margin-top:2em;color:#0072B2}
section{margin-bottom:1.5em}
ul.summary{margin:.3em 0 .8em 0}
p.nodata{color:#8a5300;background:#fff6e5;padding:.4em .6em;border-left:3px solid #E69F00}
img{max-width:100%;height:auto;border:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0;font-size:.85em}
caption{text-align:left;font-weight:600;padding:.2em 0}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f0f4f8}
td.pass{color:#007a55;font-weight:600}
td.fail{color:#c0392b;font-weight:600}
td.skip{color:#777}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.85em}
"""


def _table_html(table: Mapping[str, Any]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in table["headers"])
    body = []
    for row in table["rows"]:
        cells = []
        for cell in row:
            text = str(cell)
            cls = f' class="{text}"' if text in (health.PASS, health.FAIL, health.SKIP) else ""
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<table><caption>{html.escape(str(table.get('caption', '')))}</caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def render(secs: Sequence[Section], title: str = "amlhpc run report", summary_lines: Sequence[str] = ()) -> str:
    """One self-contained HTML page: inline CSS, plots as data: URIs."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title>", f"<style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    parts.append("<nav><ul>" + "".join(f'<li><a href="#{s["id"]}">{html.escape(s["title"])}</a></li>'
                                       for s in secs) + "</ul></nav>")
    if summary_lines:
        parts.append('<section id="summary"><h2>Run summary</h2><pre>'
                     + html.escape("\n".join(str(line) for line in summary_lines)) + "</pre></section>")
    for s in secs:
        parts.append(f'<section id="{s["id"]}"><h2>{html.escape(s["title"])}</h2>')
        nodata = not s["tables"] and s["plot"] is None
        if s["summary"]:
            if nodata:
                parts.append("".join(f'<p class="nodata">{html.escape(line)}</p>' for line in s["summary"]))
            else:
                parts.append('<ul class="summary">' + "".join(f"<li>{html.escape(line)}</li>"
                                                              for line in s["summary"]) + "</ul>")
        if s["plot"] is not None:
            data = base64.b64encode(s["plot"]).decode("ascii")
            parts.append(f'<img alt="{html.escape(s["title"])}" src="data:image/svg+xml;base64,{data}">')
        elif s["plot_note"]:
            parts.append(f'<p class="nodata">{html.escape(s["plot_note"])}</p>')
        parts.extend(_table_html(t) for t in s["tables"])
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def report_html(node_vars: Sequence[Mapping[str, Any]], job: Mapping[str, Any] | None = None,
                summary_lines: Sequence[str] = (), title: str = "", cache_dir: str | None = None) -> str:
    """The whole page (the ``amlhpc_report_html`` filter). ``cache_dir`` is accepted and not
    used: it was matplotlib's font cache, and the plots are drawn without matplotlib now."""
    del cache_dir
    run = job.get("run_id") if isinstance(job, Mapping) and job.get("run_id") else ""
    page = render(sections(node_vars, job), title or f"amlhpc run report{': ' + str(run) if run else ''}",
                  summary_lines)
    return redact_page(page)


_DATA_URI = re.compile(r"(data:[A-Za-z0-9.+/-]+;base64,[A-Za-z0-9+/=]*)")


def redact_page(page: str) -> str:
    """The page with the one redaction (azcopy_sas.redact) over every text the run's results put
    in it; the plots' base64 data are left as they are (nothing there is a message)."""
    return "".join(part if _DATA_URI.fullmatch(part) else redact(part) for part in _DATA_URI.split(page))
