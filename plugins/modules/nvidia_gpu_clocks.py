#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Pin (or reset) NVIDIA GPU application clocks with nvidia-smi, one GPU at a time."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_clocks
short_description: Pin NVIDIA GPU application clocks to their maximum (or given) values, or reset them
version_added: "1.0.0"
description:
  - Reads every GPU's maximum, current application and default application clocks with
    C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits).
  - With O(state=pinned), runs C(nvidia-smi -i N -ac MEMORY,GRAPHICS) only for the GPUs whose
    application clocks differ from the target (the GPU's maximum clocks unless
    O(graphics_mhz)/O(memory_mhz) are given), then reads the clocks again to check.
  - With O(state=reset), runs C(nvidia-smi -i N -rac) only for GPUs not at their default clocks.
  - GPUs whose application clocks read C([N/A]) or C([Not Supported]) are skipped and reported
    with that reason; they do not fail the task.
  - Without C(nvidia-smi) on the node the task is skipped with a reason.
  - Setting application clocks needs root (or C(nvidia-smi -acp UNRESTRICTED)).
  - Its action plugin first makes the same read-only queries with one shell command (no Python on the
    node) and decides on the controller. Where no GPU is to change it returns the result this module
    would return, without running it. Otherwise this module runs, reads again on the node and acts.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  state:
    description: V(pinned) sets the target application clocks, V(reset) returns to the defaults.
    type: str
    choices: [pinned, reset]
    default: pinned
  graphics_mhz:
    description: Graphics clock to pin, in MHz. V(0) or unset means each GPU's maximum.
    type: int
    default: 0
  memory_mhz:
    description: Memory clock to pin, in MHz. V(0) or unset means each GPU's maximum.
    type: int
    default: 0
  gpus:
    description: GPU indices to act on. Empty means every GPU.
    type: list
    elements: int
    default: []
  check_supported:
    description:
      - Check the target pair against C(nvidia-smi --query-supported-clocks) before setting it,
        and fail with the supported values when it is not among them.
    type: bool
    default: true
  nvidia_smi:
    description: The nvidia-smi executable (a name looked up on PATH, or a path).
    type: str
    default: nvidia-smi
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
    description: Reads the clocks and reports what would change; runs nothing that changes state.
  diff_mode:
    support: full
    description: Before and after application clocks, one line per GPU.
author:
  - amlhpc contributors (@amlhpc)
"""

EXAMPLES = r"""
- name: GPU clocks | Pin application clocks to the maximum
  amlhpc.azureml.nvidia_gpu_clocks:
    state: pinned
  become: true

- name: GPU clocks | Pin A100 GPUs 0 and 1 to 1215 MHz memory, 1275 MHz graphics
  amlhpc.azureml.nvidia_gpu_clocks:
    graphics_mhz: 1275
    memory_mhz: 1215
    gpus: [0, 1]
  become: true

- name: GPU clocks | Reset application clocks (teardown)
  amlhpc.azureml.nvidia_gpu_clocks:
    state: reset
  become: true
"""

RETURN = r"""
gpus:
  description: One entry per GPU acted on.
  returned: unless skipped
  type: list
  elements: dict
  contains:
    index: {description: GPU index, type: int}
    bus_id: {description: PCI bus id (domain:bus:device.function), type: str}
    name: {description: GPU name, type: str}
    before: {description: "Application clocks before (graphics, memory in MHz; null when N/A)", type: dict}
    after: {description: Application clocks after (read back; the target in check mode), type: dict}
    target: {description: Target clocks, type: dict}
    changed: {description: Whether clocks were (or would be) changed, type: bool}
    reason: {description: "What was done or why nothing was, for example C(not supported: ... skipped)", type: str}
  sample:
    - index: 0
      bus_id: "0001:00:00.0"
      name: NVIDIA A100-SXM4-40GB
      before: {graphics: 1095, memory: 1215}
      after: {graphics: 1410, memory: 1215}
      target: {graphics: 1410, memory: 1215}
      changed: true
      reason: "1215,1095 -> 1215,1410"
commands:
  description: The nvidia-smi commands that changed state (in check mode, those that would have run).
  returned: always
  type: list
  elements: list
skip_reason:
  description: Why the module did nothing (no nvidia-smi on the node).
  returned: when skipped
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.gpu_clocks import (
    ARGUMENT_SPEC,
    finished_result,
    skipped_result,
)
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nvidia_smi import (
    NvidiaSmiParseError,
    parse_clock_query,
    parse_supported_clocks,
    plan_pin,
    plan_reset,
    query_gpu_argv,
    query_supported_clocks_argv,
    reset_clocks_argv,
    set_clocks_argv,
)


def _run(module, argv):
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"{' '.join(argv)} failed (rc {rc}): {(err or out).strip()}", rc=rc,
                         stdout=out, stderr=err)
    return out


def _query(module, smi):
    try:
        return parse_clock_query(_run(module, query_gpu_argv(smi)))
    except NvidiaSmiParseError as exc:
        module.fail_json(msg=f"could not read nvidia-smi clock query output: {exc}")


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    smi = module.get_bin_path(p["nvidia_smi"]) if "/" not in p["nvidia_smi"] else p["nvidia_smi"]
    if not smi:
        module.exit_json(**skipped_result(p["nvidia_smi"]))
    for key in ("graphics_mhz", "memory_mhz"):
        if p[key] < 0:
            module.fail_json(msg=f"{key} must be 0 (the maximum) or a clock in MHz, got {p[key]}")

    gpus = _query(module, smi)
    indices = p["gpus"] or None
    if indices:
        missing = sorted(set(indices) - {g.index for g in gpus})
        if missing:
            module.fail_json(msg=f"no GPU with index {', '.join(map(str, missing))} on this node "
                                 f"(GPUs: {', '.join(str(g.index) for g in gpus) or 'none'})")

    if p["state"] == "pinned":
        supported = None
        if p["check_supported"]:
            try:
                supported = parse_supported_clocks(_run(module, query_supported_clocks_argv(smi)))
            except NvidiaSmiParseError as exc:
                module.fail_json(msg=f"could not read nvidia-smi supported clocks: {exc}")
        plans = plan_pin(gpus, p["graphics_mhz"] or None, p["memory_mhz"] or None, supported, indices)
        invalid = [pl for pl in plans if pl.action == "invalid"]
        if invalid:
            module.fail_json(msg="; ".join(f"GPU {pl.gpu.index} ({pl.gpu.name}): {pl.reason}" for pl in invalid),
                             gpus=[pl.result() for pl in plans])
    else:
        plans = plan_reset(gpus, indices)

    commands = []
    argv_of = {}
    for plan in plans:
        if plan.action != "set":
            continue
        if p["state"] == "pinned":
            argv = set_clocks_argv(plan.gpu.index, plan.target["memory"], plan.target["graphics"], smi)
        else:
            argv = reset_clocks_argv(plan.gpu.index, smi)
        commands.append(argv)
        argv_of[plan.gpu.index] = argv
        if not module.check_mode:
            _run(module, argv)

    after = {g.index: g.application for g in gpus}
    if commands and not module.check_mode:
        after = {g.index: g.application for g in _query(module, smi)}

    results = []
    for plan in plans:
        res = plan.result()
        if plan.action == "set" and module.check_mode:
            res["after"] = dict(plan.target)
            res["changed"] = True
        else:
            res["after"] = after.get(plan.gpu.index)
            res["changed"] = res["after"] != res["before"]
            if plan.action == "set" and res["after"] != plan.target:
                res["reason"] = (f"not supported: nvidia-smi accepted {' '.join(argv_of[plan.gpu.index][1:])} but the "
                                 f"clocks read {res['after']}; skipped")
        results.append(res)

    module.exit_json(**finished_result(p["state"], results, commands))


if __name__ == "__main__":
    main()
