# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The health check's node side (find the tools, run them, measure the shared mount) and the
module's result built from it, shared by the ``healthcheck_node`` module and its action.

The module runs :func:`probe` inside Ansible's module payload. The action runs the same code
without that payload where it can: :func:`probe_command` is one shell command that hands this
file and the health modules it imports (:data:`MODULE_NAMES`, standard library only) to the node's Python and prints
:func:`node_side`'s answer; :func:`read_outcome` turns the output into the module's own
result (:func:`module_result`, judged on the controller with ``node_checks``). A module
run costs the node about 0.2 s of CPU before it measures anything (Python compiles Ansible's
module code from the payload's zip each time; ``bench/task_kinds_bench.py``); this command
costs the node the compile of these files. Where the mount test's folder is to be
created, :func:`node_side` measures nothing and says so: the module runs, as before.

Standard library only.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import shlex
import shutil
import subprocess
import time
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from .fsbench import run as fsbench_run
from .health import (
    IB_SYSFS,
    NODE_NCCL_TESTS,
    P2P_TESTCASE,
    gpu_count_of,
    node_checks,
    nvidia_smi_gpu_args,
    nvidia_smi_q_args,
    nvidia_smi_remap_args,
    thresholds_for,
)
from .health_ib import parse_ibstat, parse_ibv_devinfo

TOOL_KEYS = ("nvidia_smi", "nvbandwidth", "bandwidth_test", "all_reduce_perf", "alltoall_perf", "elbencho", "mpirun",
             "ibstat", "ibv_devinfo", "ib_write_bw")
# Where the local NVMe namespaces are (aznhc's check_nvme_count counts the same).
NVME_GLOB = "/dev/nvme*n1"

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "tools": {"type": "dict", "required": True},
    "tool_dirs": {"type": "list", "elements": "str", "default": []},
    "vm_size": {"type": "str", "default": ""},
    "thresholds": {"type": "dict", "default": {}},
    "kernel_log_command": {"type": "str", "default": "dmesg"},
    "nccl_node_args": {"type": "str", "default": ""},
    "ib_bw_args": {"type": "str", "default": "-s 8388608 -x 0 -F --report_gbits --perform_warm_up"},
    "ib_bw_gdr": {"type": "bool", "default": True},
    "command_timeout": {"type": "int", "default": 900},
    "fs_path": {"type": "str", "default": ""},
    "fs_path_create": {"type": "bool", "default": False},
    "fs_files": {"type": "int", "default": 16},
    "fs_file_size_mb": {"type": "int", "default": 256},
    "fs_parallel": {"type": "int", "default": 8},
    "node_name": {"type": "str", "default": "node"},
    "cluster": {"type": "dict"},
}

# The module names the sources travel under in probe_command (their import names).
PACKAGE = "ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.health"
# Each imports only the standard library and those before it.
MODULE_NAMES = tuple(f"{PACKAGE}.{name}" for name in ("health_ib", "checks", "devices", "benchmarks", "health",
                                                      "fsbench", "health_probe"))
# First line of node_side's answer in the command's output (sudo or a login banner may
# print before it; a terminal ends lines in \r\n).
MARKER = "amlhpc-health-probe:"


def run(argv: list[str], timeout: int) -> dict:
    """rc, stdout, stderr of one command; a command that cannot start or runs past
    ``timeout`` is rc -1 with the reason in stderr (judged as a failed check)."""
    try:
        # run_command has no timeout: a hung nvidia-smi or nccl-tests must end as a failed check
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",  # pylint: disable=ansible-bad-function
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"rc": -1, "stdout": "", "stderr": f"{argv[0]} ran longer than {timeout} s (healthcheck_command_timeout)"}
    except OSError as exc:
        return {"rc": -1, "stdout": "", "stderr": f"{argv[0]}: {exc}"}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def find_tools(names: Mapping[str, Any], dirs: Sequence[str]) -> dict[str, str]:
    path = os.pathsep.join([os.environ.get("PATH", ""), *dirs])
    return {key: (shutil.which(str(names[key]), path=path) or "") if names.get(key) else "" for key in TOOL_KEYS}


def _limits(p: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return thresholds_for(p["vm_size"], p["thresholds"])
    except ValueError:
        return {}


def probe(p: Mapping[str, Any], check_mode: bool) -> dict:
    """Run on the node what the checks read (node_checks judges it)."""
    timeout = p["command_timeout"]
    tools = find_tools(p["tools"], p["tool_dirs"])
    out: dict = {"tools": tools}
    gpus = 0
    if tools["nvidia_smi"]:
        out["gpu_query"] = run(nvidia_smi_gpu_args(tools["nvidia_smi"]), timeout)
        out["remap_query"] = run(nvidia_smi_remap_args(tools["nvidia_smi"]), timeout)
        out["ecc_q"] = run(nvidia_smi_q_args(tools["nvidia_smi"], "ECC"), timeout)
        out["perf_q"] = run(nvidia_smi_q_args(tools["nvidia_smi"], "PERFORMANCE"), timeout)
        out["kernel_log"] = run(shlex.split(p["kernel_log_command"]), timeout)
        gpus = gpu_count_of(out["gpu_query"])
        if tools["nvbandwidth"]:
            # GPU <-> GPU too where the size has a figure for it (aznhc's check_gpu_bw, second figure)
            p2p = [P2P_TESTCASE] if gpus > 1 and _limits(p).get("p2p_gbps") is not None else []
            out["nvbandwidth"] = run([tools["nvbandwidth"], "-t", "host_to_device_memcpy_ce",
                                      "device_to_host_memcpy_ce", *p2p], timeout)
        elif tools["bandwidth_test"]:
            out["bandwidth_test"] = [run([tools["bandwidth_test"], f"--device={i}", "--memory=pinned"], timeout)
                                     for i in range(gpus)]
        out["nccl_node"] = [
            {"check": name, **run([tools[tool], *shlex.split(p["nccl_node_args"]), "-g", str(gpus)], timeout)}
            for name, tool, _limit in NODE_NCCL_TESTS if tools[tool]]
        out["nvlink"] = run([tools["nvidia_smi"], "nvlink", "-s"], timeout)
    probe_ib(out, tools, p, timeout, gpus)
    out["ib_counters"] = read_ib_counters()
    out["nvme_devices"] = sorted(glob.glob(NVME_GLOB))
    if p["cluster"] is not None:
        out["nodefile_exists"] = os.path.exists(str(p["cluster"].get("nodefile") or ""))
    fs_path = p["fs_path"]
    out["fs_isdir"] = bool(fs_path) and os.path.isdir(fs_path)
    if not out["fs_isdir"] or check_mode:
        return out
    if tools["elbencho"]:
        files = -(-p["fs_files"] // p["fs_parallel"])
        out["elbencho"] = run([tools["elbencho"], "--write", "--read", "--mkdirs", "--delfiles", "--deldirs",
                               "--threads", str(p["fs_parallel"]), "--dirs", "1", "--files", str(files),
                               "--size", f"{p['fs_file_size_mb']}m", "--block", "1m",
                               f"{fs_path}/.amlhpc-elbencho-{p['node_name']}"], timeout)
    else:
        try:
            out["fs_bench"] = fsbench_run(fs_path, files=p["fs_files"], file_size=p["fs_file_size_mb"] * 2**20,
                                          parallel=p["fs_parallel"])
        except (OSError, ValueError) as exc:
            out["fs_bench"] = {"error": f"file system benchmark under {fs_path} failed: {exc}"}
    return out


def probe_ib(out: dict, tools: Mapping[str, str], p: Mapping[str, Any], timeout: int, gpus: int) -> None:
    """InfiniBand: ibstat (else ibv_devinfo -v); where perftest is there, ib_write_bw over the
    loopback of each active InfiniBand port (from GPU memory, GPU i with HCA i, where there
    are GPUs and ``ib_bw_gdr``), as aznhc's check_ib_bw_gdr measures each HCA alone
    (customTests/azure_ib_write_bw_gdr.nhc: its arguments and ports 18510...)."""
    if tools["ibstat"]:
        out["ibstat"] = run([tools["ibstat"]], timeout)
        ports = parse_ibstat(out["ibstat"]["stdout"]) if out["ibstat"]["rc"] == 0 else []
    elif tools["ibv_devinfo"]:
        out["ibv_devinfo"] = run([tools["ibv_devinfo"], "-v"], timeout)
        ports = parse_ibv_devinfo(out["ibv_devinfo"]["stdout"]) if out["ibv_devinfo"]["rc"] == 0 else []
    else:
        return
    if not tools["ib_write_bw"]:
        return
    active = [q for q in ports if q["link_layer"].lower() == "infiniband" and q["state"].lower() == "active"]
    out["ib_write_bw"] = {}
    # Every HCA's server listens on a port of its own; the clients then run one at a time.
    servers = []
    for i, port in enumerate(active):
        argv = [tools["ib_write_bw"], "-d", port["hca"], "-i", str(port["port"]), "-p", str(18510 + i),
                *shlex.split(p["ib_bw_args"]), *([f"--use_cuda={i}"] if p["ib_bw_gdr"] and i < gpus else [])]
        try:
            # the server must run beside its client: run_command waits for the command's end
            server = subprocess.Popen(argv, stdout=subprocess.DEVNULL,  # pylint: disable=ansible-bad-function,consider-using-with
                                      stderr=subprocess.DEVNULL)
            servers.append((port["hca"], argv, server))
        except OSError as exc:
            out["ib_write_bw"][port["hca"]] = {"rc": -1, "stdout": "", "stderr": f"{argv[0]}: {exc}"}
    if servers:
        time.sleep(1)
    for hca, argv, server in servers:
        out["ib_write_bw"][hca] = run([*argv, "localhost"], timeout)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def read_ib_counters(root: str = IB_SYSFS) -> str:
    """Each InfiniBand port's link layer and ``link_downed`` counter, as ``grep -H .`` prints
    them (``<path>:<value>`` lines; health.parse_ib_counters reads them); empty where the node
    has no InfiniBand device."""
    lines = []
    for pattern in ("*/ports/*/link_layer", "*/ports/*/counters/link_downed"):
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            try:
                with open(path, encoding="ascii", errors="replace") as f:
                    lines.append(f"{path}:{f.read().strip()}")
            except OSError:
                continue
    return "".join(f"{line}\n" for line in lines)


def needs_folder(p: Mapping[str, Any]) -> bool:
    """The module is to create the mount test's folder (``fs_path_create``, not there yet)."""
    return bool(p["fs_path_create"] and p["fs_path"] and not os.path.isdir(p["fs_path"]))


def node_side(p: Mapping[str, Any], check_mode: bool) -> dict[str, Any]:
    """What probe_command prints: the probe's raw outputs, or ``{"module": True}`` where the
    folder is to be created (a change: the module makes it, then measures)."""
    if needs_folder(p):
        return {"module": True}
    return {"raw": probe(p, check_mode)}


def module_result(p: Mapping[str, Any], raw: Mapping[str, Any], limits: Mapping[str, Any], changed: bool,
                  check_mode: bool) -> dict[str, Any]:
    """The module's result (less its invocation) for the probe's outputs ``raw``."""
    judged = node_checks(raw, limits, {k: str(p["tools"].get(k) or k) for k in TOOL_KEYS},
                         vm_size=p["vm_size"], fs_path=p["fs_path"], check_mode=check_mode, cluster=p["cluster"])
    facts = {"healthcheck_checks": judged["checks"], "healthcheck_limits": limits, "healthcheck_tools": raw["tools"],
             "healthcheck_gpu_count": judged["gpu_count"], "healthcheck_cluster_runs": judged["cluster_runs"],
             # the raw runs, in the shapes the HTML report reads (module_utils/amlhpc/report/report_html.py)
             "healthcheck_nccl_node_run": {"results": [{"item": {"check": r["check"]}, "stdout": r["stdout"],
                                                        "stderr": r["stderr"], "rc": r["rc"]}
                                                       for r in raw.get("nccl_node", [])]},
             "healthcheck_elbencho_run": raw.get("elbencho") or {"skipped": True},
             "healthcheck_fs_bench_run": raw.get("fs_bench") or {"skipped": True}}
    return {"changed": changed, "checks": judged["checks"], "gpu_count": judged["gpu_count"], "limits": dict(limits),
            "tools": raw["tools"], "cluster_runs": judged["cluster_runs"], "facts": facts}


# Runs on the node under ``python -c``: the sources become the modules they are, under
# their import names, then node_side's answer is printed after MARKER. Double quotes only:
# shlex.quote puts the whole program in single quotes.
_PROGRAM = (
    "import base64, json, sys, types, zlib\n"
    "d = json.loads(zlib.decompress(base64.b64decode(\"{payload}\")))\n"
    "parts = d[\"package\"].split(\".\")\n"
    "for i in range(1, len(parts) + 1):\n"
    "    name = \".\".join(parts[:i])\n"
    "    if name not in sys.modules:\n"
    "        pkg = types.ModuleType(name)\n"
    "        pkg.__path__ = []\n"
    "        sys.modules[name] = pkg\n"
    "for name, source in d[\"modules\"]:\n"
    "    mod = types.ModuleType(name)\n"
    "    mod.__package__ = d[\"package\"]\n"
    "    sys.modules[name] = mod\n"
    "    exec(compile(source, name.replace(\".\", \"/\") + \".py\", \"exec\"), mod.__dict__)\n"
    "    setattr(sys.modules[d[\"package\"]], name.rpartition(\".\")[2], mod)\n"
    "answer = sys.modules[d[\"package\"] + \".health_probe\"].node_side(d[\"params\"], d[\"check_mode\"])\n"
    "sys.stdout.write(\"\\n{marker}\" + json.dumps(answer) + \"\\n\")\n"
)


def probe_command(interpreter: str, params: Mapping[str, Any], check_mode: bool,
                  sources: Sequence[tuple[str, str]]) -> str:
    """One shell command that runs :func:`node_side` with ``params`` on the node's
    ``interpreter``; ``sources``: (import name, source) of each of :data:`MODULE_NAMES`, in that order
    (each imports only the standard library and those before it)."""
    payload = zlib.compress(json.dumps({"package": PACKAGE, "modules": [list(s) for s in sources],
                                        "params": dict(params), "check_mode": bool(check_mode)}).encode(), 9)
    program = _PROGRAM.format(payload=base64.b64encode(payload).decode("ascii"), marker=MARKER)
    return f"{shlex.quote(interpreter)} -c {shlex.quote(program)}"


def read_outcome(p: Mapping[str, Any], stdout: str, check_mode: bool) -> Optional[dict[str, Any]]:
    """The module's result from probe_command's output, or None (no answer, or the module is
    to run: the folder is to be created, or the thresholds are refused, in the module's words)."""
    answer = None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith(MARKER):
            try:
                answer = json.loads(line[len(MARKER):])
            except ValueError:
                return None
    if not isinstance(answer, dict) or not isinstance(answer.get("raw"), dict):
        return None
    try:
        limits = thresholds_for(p["vm_size"], p["thresholds"])
    except ValueError:
        return None
    return module_result(p, answer["raw"], limits, False, check_mode)
