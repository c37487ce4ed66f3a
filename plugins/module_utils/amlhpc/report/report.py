# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The short report that ends a run of site.yml: what ran, what was skipped and why,
bytes staged and staging throughput, training loss per step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..recovery import node_loss
from ..health import pair_gate_report
from ..staging.azcopy_sas import redact

# Ansible's `| bool` truth (ansible.module_utils.parsing.convert_bool, non-strict), kept here so
# that the pure logic imports only the standard library (the workload's venv has no Ansible).
_TRUE = frozenset(("y", "yes", "on", "1", "true", "t"))


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value == 1
    return str(value).strip().lower() in _TRUE


# The roles' switches: (phase, the role's switch, the switch's value in the role's
# defaults/main.yml, whether the role runs on the controller rather than on the nodes).
# A role whose switch is off ends at once (ansible.builtin.meta: end_role) and registers
# nothing; the report reads the switch itself, once, from the hosts' variables. A switch
# the inventory does not set has the role's default (tests/unit checks the two agree).
SWITCHES = (
    ("cluster", "aml_cluster_manage", True, True),
    ("ssh_trust", "ssh_trust_enabled", True, False),
    ("nvme_raid", "nvme_raid_enabled", True, False),
    ("gpu_clocks", "gpu_clocks_enabled", True, False),
    ("nccl", "nccl_enabled", True, False),
    ("beeond", "beeond_enabled", False, False),
    ("healthcheck", "healthcheck_enabled", True, False),
)

# The node variables the report reads (the report play passes them to amlhpc_cluster_nodes).
SWITCH_KEYS = tuple(switch for _phase, switch, _default, _controller in SWITCHES)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _names(names: Sequence[str], shown: int) -> str:
    more = f" (+{len(names) - shown} more)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def skipped_phases(node_vars: Sequence[Mapping[str, Any]], controller_vars: Mapping[str, Any],
                   shown: int = 8) -> list[str]:
    """One "phase: skipped on <hosts>: <switch> is false" line per role switched off somewhere.

    ``node_vars``: the nodes' variables (with ``inventory_hostname``); ``controller_vars``: the
    controller's (``hostvars['localhost']``), for the roles that run there. A switch a host does
    not set has the role's default; "false", "no", 0 and the like read as off, as Ansible's
    ``bool`` filter reads them.
    """
    lines: list[str] = []
    for phase, switch, default, on_controller in SWITCHES:
        hosts = ([(str(controller_vars.get("inventory_hostname", "localhost")), controller_vars)]
                 if on_controller else [(str(hv.get("inventory_hostname", "?")), hv) for hv in node_vars])
        off = [name for name, hv in hosts if not _bool(hv.get(switch, default))]
        if off:
            lines.append(f"{phase}: skipped on {_names(off, shown)}: {switch} is false")
    return lines


def staging_summary(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Totals of the per-node azcopy_stage results: files, bytes, wall time, throughput."""
    done = [r for r in results if isinstance(r, Mapping) and "files" in r]
    if not done:
        return ["stage: no staging ran"]
    files = sum(int(r.get("files", 0)) for r in done)
    size = sum(int(r.get("bytes", 0)) for r in done)
    wire = sum(int(r.get("bytes_over_wire", 0)) for r in done)
    seconds = max(float(r.get("seconds", 0) or 0) for r in done)
    existing = sum(int(r.get("skipped_existing", 0)) for r in done)
    rate = f"{size / seconds / 1e6:.1f} MB/s on disk" if seconds > 0 else "no time measured"
    line = (f"stage: {files} files, {_human_bytes(size)} on disk ({_human_bytes(wire)} over the wire) "
            f"on {len(done)} node(s) in {seconds:.1f} s: {rate}")
    if existing:
        line += f"; {existing} file(s) were already there"
    predicted = [r["prediction"] for r in done if isinstance(r.get("prediction"), Mapping)
                 and r["prediction"].get("seconds") is not None]
    if predicted:
        slowest = max(predicted, key=lambda p: float(p["seconds"]))
        line += f"; predicted {float(slowest['seconds']):.3g} s ({slowest.get('bottleneck') or '?'})"
    lines = [line]
    for key, count_key, what in STRAY_KINDS:
        names = [str(n) for r in done for n in (r.get(key) or [])]
        count = sum(int(r.get(count_key) or len(r.get(key) or [])) for r in done)
        if count:
            shown = names[:5]
            more = f" (+{count - len(shown)} more)" if count > len(shown) else ""
            line = f"stage: {count} file(s) {what}: {', '.join(shown)}{more}"
            if key == "gone" and any("removed" in r for r in done):
                line += f"; removed {sum(gone_removed(r) for r in done)} (stage_prune)"
            lines.append(line)
    return lines


STRAY_KINDS = (("repaired", "repaired_count", "fetched again (wrong on disk)"),
               ("gone", "gone_count", "whose blob is gone from the container"),
               ("handed", "handed_count", "handed to other nodes (the nodes changed; removed from node-local scratch)"))
"""The files a stage result names, with their counts and what happened to them."""


def gone_removed(result: Mapping[str, Any]) -> int:
    """Gone files a stage removed (``removed`` also counts the files handed to other nodes)."""
    return int(result.get("removed") or 0) - int(result.get("handed_count") or 0)


def training_summary(job: Mapping[str, Any] | None, max_steps: int = 40) -> list[str]:
    """The job's status and its loss per step (the first ``max_steps`` steps)."""
    if not isinstance(job, Mapping) or not job or job.get("skipped"):
        return ["submit: no job ran"]
    lines = [f"submit: run {job.get('run_id', '?')} {job.get('status', '?')}"]
    lines += node_loss.report_lines(job.get("interruptions"))  # a node lost on the way, and what it cost
    metrics = job.get("metrics") or {}
    steps = [s for s in metrics.get("steps", []) if isinstance(s, Mapping) and "loss" in s]
    if steps:
        shown = ", ".join(f"{s.get('step', i)}: {float(s['loss']):.4f}" for i, s in enumerate(steps[:max_steps]))
        more = f" (+{len(steps) - max_steps} more)" if len(steps) > max_steps else ""
        lines.append(f"training loss per step: {shown}{more}")
        lines.append(f"training loss: first {float(steps[0]['loss']):.4f}, last {float(steps[-1]['loss']):.4f}")
    epochs = [e for e in metrics.get("epochs", []) if isinstance(e, Mapping) and "train_loss" in e]
    if epochs:
        lines.append("training loss per epoch: " + ", ".join(
            f"{e.get('epoch', i)}: {float(e['train_loss']):.4f}" for i, e in enumerate(epochs)))
    for epoch in metrics.get("epochs", [])[-1:]:
        if isinstance(epoch, Mapping):
            parts = [f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in sorted(epoch.items())]
            lines.append("last epoch: " + ", ".join(parts))
    return lines


def failure_lines(node_vars: Sequence[Mapping[str, Any]], controller_vars: Mapping[str, Any]) -> list[str]:
    """Where the run failed: one line per phase, task and message, naming the hosts (the
    ``report_failed_at`` a phase's rescue records, playbooks/tasks/failed.yml)."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    entries = [(str(hv.get("inventory_hostname", "?")), hv.get("report_failed_at")) for hv in node_vars]
    entries.append(("localhost", controller_vars.get("report_failed_at")))
    for host, failed in entries:
        if isinstance(failed, Mapping) and failed.get("phase"):
            key = (str(failed["phase"]), str(failed.get("task") or ""), str(failed.get("message") or ""))
            seen.setdefault(key, []).append(host)
    return [f"failed at {phase}: '{task}' on {_names(hosts, 8)}: {message}"
            for (phase, task, message), hosts in seen.items()]


def run_report(node_vars: Sequence[Mapping[str, Any]], controller_vars: Mapping[str, Any],
               job: Mapping[str, Any] | None = None) -> list[str]:
    """The whole report, a list of lines."""
    names = [str(hv.get("inventory_hostname", "?")) for hv in node_vars]
    lines = [f"nodes: {len(names)} ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"]
    lines += failure_lines(node_vars, controller_vars)
    lines += skipped_phases(node_vars, controller_vars)
    health = next((hv.get("healthcheck_report") for hv in node_vars if hv.get("healthcheck_report")), None)
    if isinstance(health, Mapping) and health.get("summary"):
        lines.append(f"healthcheck: {health['summary']}")
    gate = next((hv.get("healthcheck_pair_gate") for hv in node_vars if hv.get("healthcheck_pair_gate")), None)
    if isinstance(gate, Mapping) and gate.get("summary"):
        lines += pair_gate_report.report_lines(gate)
    verdict = controller_vars.get("healthcheck_verdict")  # the gate's decision (health_verdict.py)
    if isinstance(verdict, Mapping) and verdict.get("action") not in (None, "pass"):
        lines += [f"healthcheck: {line}" for line in verdict.get("report_lines") or []]
    lines += staging_summary([hv.get("stage_result") for hv in node_vars if hv.get("stage_result")])
    lines += training_summary(job)
    # The report shows messages the phases returned: the one redaction, whatever they carry.
    return [redact(line) for line in lines]
