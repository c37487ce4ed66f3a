#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The healthcheck role's whole work on a node in one call: find the tools, measure, judge."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: healthcheck_node
short_description: Measure one node's GPUs, host-device bandwidth, NCCL and shared mount, and judge them
version_added: "1.0.0"
author:
  - amlhpc contributors (@amlhpc)
description:
  - Finds the measurement tools (on C(PATH), then in O(tool_dirs)), then runs on the node
    what finds a bad node - C(nvidia-smi) (GPU list with ECC and page retirement, row
    remapper, C(-q -d ECC) correctable ECC counts, C(-q -d PERFORMANCE) clock slowdowns,
    C(nvlink -s)), the kernel log (XID errors), C(nvbandwidth) or C(bandwidthTest)
    (one GPU at a time), C(all_reduce_perf) and C(alltoall_perf) over the node's GPUs,
    C(ibstat) or C(ibv_devinfo -v) (each InfiniBand port's state and rate), C(ib_write_bw)
    (each HCA's loopback bandwidth), each InfiniBand port's C(link_downed) counter (link
    flaps), the local NVMe count (C(/dev/nvme*n1)), and the shared
    mount's write/read test (C(elbencho), or the project's own reader as
    M(amlhpc.azureml.amlhpc_fs_bench) runs it) - and judges each against the VM size's
    thresholds (C(plugins/module_utils/amlhpc/health/health.py)). A check whose tool is absent is
    skipped with its reason.
  - One module run per node instead of a probe, a command and a C(set_fact) per check.
  - On a cluster's head (O(cluster) given) it also decides whether the multi-node NCCL run
    can go ahead; the run itself comes after every node's own checks, once per cluster
    (RV(cluster_runs)).
  - Its action plugin makes RV(facts) host variables of the play (like
    M(ansible.builtin.set_fact), not cached) - C(healthcheck_checks), C(healthcheck_limits),
    C(healthcheck_tools), C(healthcheck_gpu_count), C(healthcheck_cluster_runs) and the raw
    runs the HTML report plots (C(healthcheck_nccl_node_run), C(healthcheck_elbencho_run),
    C(healthcheck_fs_bench_run)).
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details:
      - The read-only probes run; the shared-mount test (which writes files) is skipped with
        its reason, and O(fs_path_create) only says it would create the folder.
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  tools:
    description:
      - Names (or paths) of the tools, by key - C(nvidia_smi), C(nvbandwidth), C(bandwidth_test),
        C(all_reduce_perf), C(alltoall_perf), C(elbencho), C(mpirun), C(ibstat), C(ibv_devinfo),
        C(ib_write_bw).
    type: dict
    required: true
  tool_dirs:
    description: Folders searched after C(PATH) for the tools.
    type: list
    elements: str
    default: []
  vm_size:
    description: VM size the thresholds and the expected GPU count come from; unknown sizes are measured, not gated.
    type: str
    default: ""
  thresholds:
    description: Threshold overrides by VM size or C(default) (the role's C(healthcheck_thresholds)).
    type: dict
    default: {}
  kernel_log_command:
    description: Command that prints the kernel log, searched for XID errors.
    type: str
    default: dmesg
  nccl_node_args:
    description: Arguments of the nccl-tests run over the node's GPUs (C(-g <GPU count>) is appended).
    type: str
    default: ""
  ib_bw_args:
    description: Arguments of each HCA's C(ib_write_bw) loopback run (C(-d), C(-i), C(-p) and C(--use_cuda) are added).
    type: str
    default: "-s 8388608 -x 0 -F --report_gbits --perform_warm_up"
  ib_bw_gdr:
    description: Run C(ib_write_bw) from GPU memory (C(--use_cuda), perftest built with CUDA) where the node has GPUs.
    type: bool
    default: true
  command_timeout:
    description: Longest a single measurement command may run, in seconds; one that runs longer is a failed check.
    type: int
    default: 900
  fs_path:
    description: Shared mount to measure; empty - skipped.
    type: str
    default: ""
  fs_path_create:
    description: Create O(fs_path) first (mode 0755).
    type: bool
    default: false
  fs_files:
    description: Files of the mount test.
    type: int
    default: 16
  fs_file_size_mb:
    description: Size of each file, MiB.
    type: int
    default: 256
  fs_parallel:
    description: Parallel writers, then readers.
    type: int
    default: 8
  node_name:
    description: The node's inventory name, in the name of elbencho's folder inside O(fs_path).
    type: str
    default: node
  cluster:
    description:
      - Given on a cluster's head only - C(enabled) (bool), C(nodes) (the cluster's node
        count), C(nodefile), C(mpirun_args), C(args) (of the multi-node nccl-tests run).
    type: dict
notes:
  - The whole probe runs as the task's user; the healthcheck role becomes root
    (C(healthcheck_become)), which reading the kernel log and writing into the mount need.
"""

EXAMPLES = r"""
- name: Health check | Measure and judge this node
  amlhpc.azureml.healthcheck_node:
    tools: {nvidia_smi: nvidia-smi, nvbandwidth: nvbandwidth, bandwidth_test: bandwidthTest,
            all_reduce_perf: all_reduce_perf, alltoall_perf: alltoall_perf, elbencho: elbencho, mpirun: mpirun}
    tool_dirs: [/opt/nccl-tests/build, /usr/local/cuda/bin]
    vm_size: Standard_ND96asr_v4
    nccl_node_args: "-b 8G -e 8G -f 2 -c 1 -n 20"
    fs_path: /mnt/beeond
    node_name: "{{ inventory_hostname }}"
  become: true
"""

RETURN = r"""
checks:
  description: The node's checks in the table's order, C({check, status (pass|fail|skip), value, threshold, reason}).
  type: list
  elements: dict
  returned: always
gpu_count:
  description: GPUs nvidia-smi listed (0 without nvidia-smi).
  type: int
  returned: always
limits:
  description: The thresholds applied (the VM size's, with O(thresholds) over them).
  type: dict
  returned: always
tools:
  description: Each tool's path on the node, empty when not found.
  type: dict
  returned: always
cluster_runs:
  description: On a head whose cluster can run NCCL across its nodes, the commands to run (C(check), C(minimum), C(argv)).
  type: list
  elements: dict
  returned: always
facts:
  description: What the action plugin makes host variables (C(healthcheck_checks) and the others named above).
  type: dict
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.health import health
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.health.health_probe import (
    ARGUMENT_SPEC,
    module_result,
    needs_folder,
    probe,
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        limits = health.thresholds_for(p["vm_size"], p["thresholds"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    changed = needs_folder(p)
    if changed and not module.check_mode:
        try:
            os.makedirs(p["fs_path"], mode=0o755)
        except OSError as exc:
            module.fail_json(msg=f"cannot create the mount test's folder {p['fs_path']}: {exc}")
    module.exit_json(**module_result(p, probe(p, module.check_mode), limits, changed, module.check_mode))


if __name__ == "__main__":
    main()
