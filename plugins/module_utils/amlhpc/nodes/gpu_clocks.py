# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""GPU clock pinning as the nvidia_gpu_clocks module and its action plugin both decide it.

On a rerun most nodes have nothing to change. The action then reads the GPUs with one shell
command (:func:`probe_command`: no Python on the node; bench/task_kinds_bench.py measured a
read like it at 4-10 ms of the node's CPU, a module run at 150-180 ms) and, from its output,
:func:`unchanged_outcome` gives the result the module gives when it runs no command. Where
anything is to change, is not valid, or reads otherwise than expected, it gives None and the
module runs: it reads the GPUs again on the node, acts, and fails with its own messages.

Standard library only.
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping, Optional, Sequence

from .file_state import which_command
from .nvidia_smi import (
    ClockPlan,
    NvidiaSmiParseError,
    parse_clock_query,
    parse_supported_clocks,
    plan_pin,
    plan_reset,
    query_gpu_argv,
    query_supported_clocks_argv,
)

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "state": {"type": "str", "choices": ["pinned", "reset"], "default": "pinned"},
    "graphics_mhz": {"type": "int", "default": 0},
    "memory_mhz": {"type": "int", "default": 0},
    "gpus": {"type": "list", "elements": "int", "default": []},
    "check_supported": {"type": "bool", "default": True},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
}
"""The module's options (the module and the action validate against this one spec)."""

MARK = "@@amlhpc-gpu-clocks"


def probe_command(nvidia_smi: str, state: str, check_supported: bool) -> str:
    """One POSIX shell command that finds nvidia-smi as the module does (a path as given; a
    name on PATH, then in the sbin folders, as AnsibleModule.get_bin_path) and prints what the
    module reads: the clock query and, to pin with ``check_supported``, the supported clocks,
    each followed by its exit status."""
    # a path as given that cannot run makes the module fail; a name found nowhere, skip
    missing = "unusable" if "/" in nvidia_smi else "none"
    find = f'{which_command(nvidia_smi, "smi")}; if [ -z "$smi" ]; then echo "{MARK} {missing}"; exit 0; fi'
    reads = [query_gpu_argv("")[1:]]
    if state == "pinned" and check_supported:
        reads.append(query_supported_clocks_argv("")[1:])
    steps = [find, f'echo "{MARK} found"']
    for argv in reads:
        steps.append(f'"$smi" {shlex.join(argv)}; echo "{MARK} rc $?"')
    return "; ".join(steps)


def parse_probe(stdout: str) -> Optional[dict[str, Any]]:
    """``{"found": False}`` when the probe found no nvidia-smi; ``{"found": True, "reads":
    [text, ...]}`` with each read's output when every read exited 0; None otherwise."""
    lines = stdout.splitlines()
    marks = [i for i, line in enumerate(lines) if line.startswith(MARK + " ")]
    if not marks:
        return None
    first = lines[marks[0]][len(MARK) + 1:]
    if first == "none" and len(marks) == 1:
        return {"found": False}
    if first != "found":
        return None
    reads = []
    for start, end in zip(marks, marks[1:]):
        if lines[end][len(MARK) + 1:] != "rc 0":
            return None
        reads.append("\n".join(lines[start + 1:end]))
    return {"found": True, "reads": reads}


def skipped_result(nvidia_smi: str) -> dict[str, Any]:
    """The module's result on a node without nvidia-smi."""
    return {"changed": False, "skipped": True, "gpus": [], "commands": [],
            "skip_reason": f"{nvidia_smi} not found on PATH: no NVIDIA driver on this node",
            "msg": f"skipped: {nvidia_smi} not found on PATH"}


def clock_line(index: int, clocks: Optional[Mapping[str, Any]]) -> str:
    if not clocks:
        return f"GPU{index}: n/a\n"
    return f"GPU{index}: memory {clocks.get('memory')} MHz, graphics {clocks.get('graphics')} MHz\n"


def finished_result(state: str, results: Sequence[dict[str, Any]], commands: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The module's result from each GPU's result (``before``, ``after``, ``changed``, ...)."""
    diff = {"before": "".join(clock_line(r["index"], r["before"]) for r in results),
            "after": "".join(clock_line(r["index"], r["after"]) for r in results)}
    summary = "; ".join(f"GPU{r['index']} {r['bus_id']}: {r['reason']}" for r in results)
    return {"changed": any(r["changed"] for r in results), "gpus": list(results), "commands": [list(c) for c in commands],
            "diff": diff, "msg": f"{state}: {summary or 'no GPUs'}"}


def unchanged_outcome(params: Mapping[str, Any], stdout: str) -> Optional[dict[str, Any]]:
    """The module's result when the probe's ``stdout`` shows nothing to change; None when the
    module has to run (something to change, a GPU index or clock it would refuse, an output
    it cannot read)."""
    probe = parse_probe(stdout)
    if probe is None:
        return None
    if not probe["found"]:
        return skipped_result(params["nvidia_smi"]) if "/" not in params["nvidia_smi"] else None
    if params["graphics_mhz"] < 0 or params["memory_mhz"] < 0:
        return None
    try:
        gpus = parse_clock_query(probe["reads"][0])
        supported = parse_supported_clocks(probe["reads"][1]) if len(probe["reads"]) > 1 else None
    except (NvidiaSmiParseError, IndexError):
        return None
    indices = list(params["gpus"]) or None
    if indices and set(indices) - {g.index for g in gpus}:
        return None
    if params["state"] == "pinned":
        plans = plan_pin(gpus, params["graphics_mhz"] or None, params["memory_mhz"] or None, supported, indices)
    else:
        plans = plan_reset(gpus, indices)
    if any(plan.action in ("set", "invalid") for plan in plans):
        return None
    return finished_result(params["state"], [unchanged(plan) for plan in plans], [])


def unchanged(plan: ClockPlan) -> dict[str, Any]:
    """One GPU's result where no command ran: its clocks after are those before."""
    res = plan.result()
    res["after"] = dict(plan.gpu.application)
    res["changed"] = False
    return res
