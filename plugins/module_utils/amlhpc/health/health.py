# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Node health checks: one node's checks from its probe (:func:`node_checks`), the multi-node
NCCL checks (:func:`cluster_checks`) and the verdict over every node (:func:`report`: a text
table and the failing nodes, each with its reasons and its fix).

The checks themselves live in the parts this module is made of, and every public name of
theirs is here too, so ``health.<name>`` keeps working for its callers: :mod:`.checks` (the
check dict, the thresholds per VM size), :mod:`.devices` (GPUs, InfiniBand, NVLink, NVMe),
:mod:`.benchmarks` (nccl-tests, the shared mount). Standard library only.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from .benchmarks import (
    fs_checks,
    MIB_TO_MB,
    nccl_busbw,
    nccl_check,
    nccl_ranks,
    parse_elbencho,
    parse_nccl_tests,
)
from .checks import (
    _out,
    at_least,
    check,
    CRITICAL_XIDS,
    FAIL,
    PASS,
    SKIP,
    skipped,
    THRESHOLD_KEYS,
    thresholds_for,
    VM_THRESHOLDS,
)
from .devices import (
    ecc_counts_check,
    gpu_checks,
    GPU_QUERY_FIELDS,
    h2d_check,
    ib_checks,
    ib_flaps_check,
    IB_SYSFS,
    nvidia_smi_gpu_args,
    nvidia_smi_q_args,
    nvidia_smi_remap_args,
    nvlink_check,
    nvme_check,
    p2p_check,
    P2P_TESTCASE,
    parse_bandwidth_test,
    parse_gpu_query,
    parse_ib_counters,
    parse_nvbandwidth,
    parse_nvbandwidth_p2p,
    parse_nvidia_smi_q,
    parse_nvlink_status,
    parse_remap_query,
    parse_xids,
    REMAP_QUERY_FIELDS,
    SLOWDOWN_REASONS,
    throttle_check,
)

__all__ = [
    "at_least",
    "check",
    "cluster_checks",
    "CLUSTER_NCCL_TESTS",
    "CRITICAL_XIDS",
    "DEFAULT_FIX",
    "ecc_counts_check",
    "FAIL",
    "failing_nodes",
    "FIXES",
    "fs_checks",
    "gpu_checks",
    "gpu_count_of",
    "GPU_QUERY_FIELDS",
    "h2d_check",
    "ib_checks",
    "ib_flaps_check",
    "IB_SYSFS",
    "MIB_TO_MB",
    "nccl_busbw",
    "nccl_check",
    "nccl_ranks",
    "node_checks",
    "NODE_NCCL_TESTS",
    "node_sentence",
    "nvidia_smi_gpu_args",
    "nvidia_smi_q_args",
    "nvidia_smi_remap_args",
    "nvlink_check",
    "nvme_check",
    "p2p_check",
    "P2P_TESTCASE",
    "parse_bandwidth_test",
    "parse_elbencho",
    "parse_gpu_query",
    "parse_ib_counters",
    "parse_nccl_tests",
    "parse_nvbandwidth",
    "parse_nvbandwidth_p2p",
    "parse_nvidia_smi_q",
    "parse_nvlink_status",
    "parse_remap_query",
    "parse_xids",
    "PASS",
    "REMAP_QUERY_FIELDS",
    "render_table",
    "report",
    "SKIP",
    "skipped",
    "SLOWDOWN_REASONS",
    "THRESHOLD_KEYS",
    "thresholds_for",
    "throttle_check",
    "UNREACHABLE",
    "VM_THRESHOLDS",
    "with_cluster_checks",
]


# --------------------------------------------------------------------------------------
# Verdict
# --------------------------------------------------------------------------------------
UNREACHABLE = "no health check results (host failed or unreachable)"

# What to do about a failed check, by check name (the first failing check of a node names its
# fix). AmlCompute has no node-level drain or delete: a bad node is left out of the run
# (healthcheck_on_failure, or the inventory's node_filter) until AmlCompute gives the cluster
# a new VM in its place.
_REPLACE = "leave it out (the inventory's node_filter) until AmlCompute replaces the VM"
FIXES: dict[str, str] = {
    "unreachable": "check that the node is running and answers SSH, then rerun; if it does not, " + _REPLACE,
    "gpu_count": "a GPU is missing: reboot the node, and if it still lacks one " + _REPLACE,
    "gpu_health": "reset the GPU (reboot the node); if the errors stay " + _REPLACE,
    "gpu_xid": "reset the GPU (reboot the node); if the XID comes back " + _REPLACE,
    "gpu_ecc_counts": "reset the GPU (reboot the node) to remap its rows; if the counts keep growing " + _REPLACE,
    "gpu_throttle": "check the GPU's cooling and power (reboot the node); if it stays slowed " + _REPLACE,
    "ib_link_flaps": "reseat or replace the port's cable (a support request); until then " + _REPLACE,
    "nvlink": "reboot the node; if a link stays inactive " + _REPLACE,
    "h2d_bandwidth": "reboot the node; if the copy stays slow " + _REPLACE,
    "nccl_all_reduce_node": "reboot the node; if NCCL stays slow " + _REPLACE,
    "nccl_alltoall_node": "reboot the node; if NCCL stays slow " + _REPLACE,
    "ib_ports": "reboot the node to bring the port up; if it stays down " + _REPLACE,
    "ib_rate": "reboot the node to retrain the link; if it stays below its rate " + _REPLACE,
    "ib_bw": "reboot the node; if the HCA stays slow " + _REPLACE,
    "nvme_count": "a local NVMe disk is missing: " + _REPLACE,
    "fs_write": "make the scratch mount writable again (rerun the beeond or nvme_raid role), or " + _REPLACE,
    "fs_read": "remount the scratch file system (rerun the beeond role), or " + _REPLACE,
    "pair_link": "check the node's network port (ibstat, or its Ethernet link); if the link stays slow or lossy "
                 + _REPLACE,
    "nccl_all_reduce_cluster": "find the slow node or link with the pair gate and leave it out",
    "nccl_alltoall_cluster": "find the slow node or link with the pair gate and leave it out",
}
DEFAULT_FIX = "repair the node, or " + _REPLACE


def _figure(c: Mapping[str, Any]) -> str:
    value, threshold = str(c.get("value") or ""), str(c.get("threshold") or "")
    if value and threshold:
        return f" {value} (needs {threshold})"
    return f" {value}" if value else ""


def node_sentence(node: str, checks: Iterable[Mapping[str, Any]] | None) -> str:
    """One sentence for a bad node: the node, each failed check with its figure and why, the fix."""
    if checks is None:
        return f"{node} did not answer: {UNREACHABLE}; fix: {FIXES['unreachable']}."
    failed = [c for c in checks if c["status"] == FAIL]
    parts = [f"{c['check']}{_figure(c)}" + (f" ({c['reason']})" if c.get("reason") else "") for c in failed]
    fix = FIXES.get(str(failed[0]["check"]), DEFAULT_FIX) if failed else DEFAULT_FIX
    return f"{node} failed {'; '.join(parts)}; fix: {fix}."


def failing_nodes(results: Mapping[str, Iterable[Mapping[str, Any]] | None]) -> list[dict[str, Any]]:
    """[{"node", "reasons", "checks", "unreachable", "sentence"}] for every node with a failed
    check or no results at all (``checks``: the names of its failed checks)."""
    out = []
    for node in sorted(results):
        checks = results[node]
        if checks is None:
            out.append({"node": node, "reasons": [UNREACHABLE], "checks": ["unreachable"], "unreachable": True,
                        "sentence": node_sentence(node, None)})
            continue
        checks = list(checks)
        failed = [c for c in checks if c["status"] == FAIL]
        if failed:
            out.append({"node": node, "reasons": [f"{c['check']}: {c['reason'] or 'failed'}" for c in failed],
                        "checks": [c["check"] for c in failed], "unreachable": False,
                        "sentence": node_sentence(node, checks)})
    return out


def render_table(results: Mapping[str, Iterable[Mapping[str, Any]] | None]) -> list[str]:
    """The pass/fail table, one line per node and check."""
    header = ("NODE", "CHECK", "STATUS", "VALUE", "THRESHOLD", "REASON")
    lines = []
    for node in sorted(results):
        checks = results[node]
        if checks is None:
            lines.append((node, "-", "FAIL", "", "", UNREACHABLE))
            continue
        for c in checks:
            lines.append((node, c["check"], c["status"].upper(), c["value"], c["threshold"], c["reason"]))
    widths = [max(len(str(row[i])) for row in [header, *lines]) for i in range(5)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    return [fmt.format(*header).rstrip(), *(fmt.format(*row).rstrip() for row in lines)]


def report(results: Mapping[str, Iterable[Mapping[str, Any]] | None]) -> dict[str, Any]:
    """Table, failing nodes and the one-paragraph message the gate fails with."""
    failing = failing_nodes(results)
    counts = {s: 0 for s in (PASS, FAIL, SKIP)}
    for checks in results.values():
        for c in checks or []:
            counts[c["status"]] += 1
    message = ""
    if failing:
        message = (f"health check failed on {len(failing)} of {len(results)} node(s). "
                   + " ".join(f["sentence"] for f in failing)
                   + " (healthcheck_on_failure: exclude with healthcheck_spare_nodes: N trains on the other"
                   " nodes.)")
    return {"table": render_table(results), "failing": failing,
            "failing_nodes": [f["node"] for f in failing], "counts": counts, "message": message,
            "sentences": [f["sentence"] for f in failing],
            "summary": (f"{len(results)} node(s): {counts[PASS]} passed, {counts[FAIL]} failed, "
                        f"{counts[SKIP]} skipped checks")}


# --------------------------------------------------------------------------------------
# One node's checks from one probe (module healthcheck_node)
# --------------------------------------------------------------------------------------
NODE_NCCL_TESTS = (("nccl_all_reduce_node", "all_reduce_perf", "allreduce_node_busbw"),
                   ("nccl_alltoall_node", "alltoall_perf", "alltoall_node_busbw"))
CLUSTER_NCCL_TESTS = (("nccl_all_reduce_cluster", "all_reduce_perf", "allreduce_cluster_busbw"),
                      ("nccl_alltoall_cluster", "alltoall_perf", "alltoall_cluster_busbw"))


def gpu_count_of(gpu_query: Mapping[str, Any]) -> int:
    """GPUs nvidia-smi listed (its non-empty lines), 0 when it failed."""
    if gpu_query.get("rc") != 0:
        return 0
    return len([line for line in str(gpu_query.get("stdout", "")).splitlines() if line])


def node_checks(probe: Mapping[str, Any], limits: Mapping[str, Any], tool_names: Mapping[str, str], *,
                vm_size: str = "", fs_path: str = "", check_mode: bool = False,
                cluster: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every check of one node from what the node probe ran (``probe``: the module
    healthcheck_node's raw results: ``tools``, ``gpu_query``, ``remap_query``, ``kernel_log``,
    ``nvbandwidth``, ``bandwidth_test``, ``nccl_node``, ``fs_isdir``, ``elbencho``,
    ``fs_bench``, ``nodefile_exists``), in the table's order, each skip with its reason.

    ``cluster`` is given on a cluster's head only: ``{"enabled", "nodes", "nodefile",
    "mpirun_args", "args"}``. Where the multi-node NCCL run can go ahead the result's
    ``cluster_runs`` lists its commands (run once per cluster after every node's own checks,
    judged by :func:`cluster_checks`); otherwise the head gets the two skips with the reason.

    Returns ``{"checks", "gpu_count", "cluster_runs"}``."""
    tools = {k: str(v or "") for k, v in (probe.get("tools") or {}).items()}
    has_smi = bool(tools.get("nvidia_smi"))
    checks: list[dict[str, Any]] = []
    gpu_count = 0

    # GPU count, ECC and page retirement, row remaps, XIDs
    if not has_smi:
        reason = (f"{tool_names.get('nvidia_smi', 'nvidia-smi')} not found on PATH or in healthcheck_tool_dirs: "
                  "no NVIDIA driver on this host")
        checks += [skipped(name, reason) for name in ("gpu_count", "gpu_health", "gpu_xid", "gpu_ecc_counts",
                                                      "gpu_throttle")]
    else:
        gpu, remap, klog = probe.get("gpu_query") or {}, probe.get("remap_query") or {}, probe.get("kernel_log") or {}
        gpu_count = gpu_count_of(gpu)
        checks += gpu_checks(str(gpu.get("stdout", "")) if gpu.get("rc") == 0 else _out(gpu),
                             str(remap.get("stdout", "")) if remap.get("rc") == 0 else None,
                             str(klog.get("stdout", "")) if klog.get("rc") == 0 else None,
                             limits.get("gpus"), vm_size, str(klog.get("stderr") or ""))
        ecc, perf = probe.get("ecc_q") or {}, probe.get("perf_q") or {}
        checks.append(ecc_counts_check(str(ecc.get("stdout", "")) if ecc.get("rc") == 0 else None,
                                       str(remap.get("stdout", "")) if remap.get("rc") == 0 else None,
                                       limits, _out(ecc) if ecc else "not run"))
        checks.append(throttle_check(str(perf.get("stdout", "")) if perf.get("rc") == 0 else None, limits,
                                     _out(perf) if perf else "not run"))
        nvlink = probe.get("nvlink") or {}
        if nvlink.get("rc") == 0:
            checks.append(nvlink_check(str(nvlink.get("stdout", ""))))
        elif nvlink:
            checks.append(check("nvlink", FAIL, reason="nvidia-smi nvlink -s failed: "
                                + " ".join(_out(nvlink).split())[:200]))

    # Host <-> device bandwidth
    if not has_smi:
        checks.append(skipped("h2d_bandwidth", "no GPU (nvidia-smi not found)"))
    elif tools.get("nvbandwidth"):
        checks.append(h2d_check("nvbandwidth", [_out(probe.get("nvbandwidth") or {})], limits.get("h2d_gbps")))
        if limits.get("p2p_gbps") is not None and gpu_count > 1:
            checks.append(p2p_check(_out(probe.get("nvbandwidth") or {}), limits["p2p_gbps"]))
    elif tools.get("bandwidth_test"):
        runs = probe.get("bandwidth_test") or []
        if runs:
            checks.append(h2d_check("bandwidthTest", [str(r.get("stdout", "")) for r in runs], limits.get("h2d_gbps")))
    else:
        checks.append(skipped("h2d_bandwidth", f"neither {tool_names.get('nvbandwidth', 'nvbandwidth')} nor "
                                               f"{tool_names.get('bandwidth_test', 'bandwidthTest')} found"))

    # NCCL over the node's GPUs
    ran = {r.get("check"): r for r in probe.get("nccl_node") or []}
    for name, tool, limit in NODE_NCCL_TESTS:
        if not has_smi:
            checks.append(skipped(name, "no GPU (nvidia-smi not found)"))
        elif not tools.get(tool):
            checks.append(skipped(name, f"{tool_names.get(tool, tool)} (nccl-tests) not found"))
        elif name in ran:
            checks.append(nccl_check(name, _out(ran[name]), limits.get(limit)))

    # InfiniBand ports, their rate and perftest's figure; the local NVMe disks
    checks += ib_checks(probe, limits, tool_names)
    checks.append(ib_flaps_check(probe.get("ib_counters"), limits.get("ib_link_downed_max")))
    if "nvme_devices" in probe:
        checks.append(nvme_check(probe.get("nvme_devices") or [], limits.get("nvme_count")))

    # The shared mount
    if not fs_path or not probe.get("fs_isdir") or check_mode:
        reason = ("no path (healthcheck_fs_path is empty)" if not fs_path
                  else f"{fs_path} is not a folder (shared file system not mounted?)" if not probe.get("fs_isdir")
                  else "check mode: the test writes files")
        checks += [skipped("fs_write", reason), skipped("fs_read", reason)]
    elif probe.get("elbencho") is not None:
        checks += fs_checks("elbencho", str((probe["elbencho"] or {}).get("stdout", "")), limits)
    else:
        bench = probe.get("fs_bench") or {}
        if bench.get("error"):
            checks += [check("fs_write", FAIL, reason=str(bench["error"])), check("fs_read", FAIL, reason=str(bench["error"]))]
        else:
            checks += fs_checks("amlhpc_fs_bench", bench, limits)

    # NCCL across the cluster, from its head (last: the run itself comes after every node's checks)
    cluster_runs: list[dict[str, Any]] = []
    cluster_skips: list[dict[str, Any]] = []
    if cluster is not None:
        for name, tool, limit in CLUSTER_NCCL_TESTS:
            reason = ("turned off (healthcheck_nccl_cluster: false)" if not cluster.get("enabled", True)
                      else "single-node cluster" if int(cluster.get("nodes") or 1) < 2
                      else "no GPU (nvidia-smi not found)" if not has_smi
                      else f"{tool_names.get('mpirun', 'mpirun')} not found" if not tools.get("mpirun")
                      else f"{tool_names.get(tool, tool)} (nccl-tests) not found" if not tools.get(tool)
                      else f"nodefile {cluster.get('nodefile', '')} does not exist"
                      if not probe.get("nodefile_exists") else "")
            if reason:
                cluster_skips.append(skipped(name, reason))
                continue
            argv = [tools["mpirun"], "-np", str(int(cluster["nodes"]) * gpu_count), "--hostfile",
                    str(cluster["nodefile"]), "--map-by", f"ppr:{gpu_count}:node",
                    *shlex.split(str(cluster.get("mpirun_args") or "")), tools[tool],
                    *shlex.split(str(cluster.get("args") or ""))]
            cluster_runs.append({"check": name, "minimum": limits.get(limit), "argv": argv})
    return {"checks": checks + cluster_skips, "gpu_count": gpu_count, "cluster_runs": cluster_runs}


def cluster_checks(runs: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The multi-node NCCL checks per head, from the registered results of the cluster runs
    (each loop result carries its ``item``: ``{"head", "check", "minimum", "argv"}``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        item = r.get("item") if isinstance(r.get("item"), Mapping) else None
        if not item or not item.get("head") or r.get("skipped") or ("stdout" not in r and "msg" not in r):
            continue
        text = _out(r) if "stdout" in r else str(r.get("msg", ""))
        minimum = item.get("minimum")
        out.setdefault(str(item["head"]), []).append(
            nccl_check(str(item["check"]), text, None if minimum in (None, "") else float(minimum)))
    return out


def with_cluster_checks(results: Mapping[str, Iterable[Mapping[str, Any]] | None],
                        cluster_run_results: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]] | None]:
    """Each node's checks (None: no results), a head's followed by its cluster's multi-node
    checks judged from the registered cluster runs (:func:`cluster_checks`)."""
    cluster = cluster_checks(cluster_run_results)
    return {node: None if checks is None else [*checks, *cluster.get(node, [])] for node, checks in results.items()}
