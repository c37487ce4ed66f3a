#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Read-only discovery of local NVMe disks and the plan for their RAID0 array."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvme_raid_info
short_description: Find the local NVMe disks, check they are empty, and plan their RAID0
version_added: "1.0.0"
description:
  - Lists block devices with C(lsblk), keeps the local NVMe disks (never the OS disk, never
    remote NVMe disks, never disks without a device node), probes each with C(wipefs),
    C(blkid -p) and C(mdadm --examine), and decides what to do with them.
  - Changes nothing. The decision (RV(action)) is one of C(skip), C(refuse), C(create),
    C(assemble), C(exists), with a one-line RV(reason) that names the devices and what was
    found on them.
attributes:
  check_mode:
    support: full
    details: Read-only.
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  device:
    description: The md device the RAID0 array is (to be) known as.
    type: path
    default: /dev/md128
  vm_size:
    description: The node's VM size (C(aml_vm_size)), to look up the expected disk count.
    type: str
  expected_count:
    description: How many local NVMe disks there must be. Overrides the look-up by O(vm_size).
    type: int
  expected_counts:
    description: Local NVMe disks per VM size (keys compared case-insensitively).
    type: dict
    default: {}
  exclude_models:
    description: NVMe models that are not local disks (substring, case-insensitive).
    type: list
    elements: str
    default: ["MSFT NVMe Accelerator"]
  chunk_kib:
    description: RAID0 chunk size in KiB for the create command line (default - mdadm's, 512).
    type: int
  force:
    description: Plan to overwrite disks that hold data (never mounted ones or running arrays).
    type: bool
    default: false
  recorded:
    description:
      - Recorded tool outputs to decide on instead of probing this host (tests, or
        reviewing another node's state). Keys C(lsblk) (text of C(lsblk -J -b -o ...)),
        C(probes) (device path -> C(wipefs), C(blkid), C(examine) texts), C(detail)
        (C(mdadm --detail --export) of O(device)), C(present) (device paths that exist).
    type: dict
author:
  - amlhpc contributors (@amlhpc)
notes:
  - Supports check mode (it is read-only).
"""

EXAMPLES = r"""
- name: NVMe RAID | Find the local NVMe disks
  amlhpc.azureml.nvme_raid_info:
    device: /dev/md128
    vm_size: "{{ aml_vm_size | default(omit) }}"
    expected_counts: {Standard_ND96asr_v4: 8}
  register: nvme_raid_state
"""

RETURN = r"""
action:
  description: What to do, C(skip), C(refuse), C(create), C(assemble) or C(exists).
  type: str
  returned: always
  sample: create
reason:
  description: One line saying why, naming devices and what was found on them.
  type: str
  returned: always
  sample: "creating /dev/md128: RAID0 of 8 empty NVMe disks (/dev/nvme0n1, ...)"
problems:
  description: One sentence per non-empty disk.
  type: list
  elements: str
  returned: always
devices:
  description: The local NVMe disks, in name order.
  type: list
  elements: str
  returned: always
excluded:
  description: Other disks with the reason they were left out.
  type: list
  elements: dict
  returned: always
expected_count:
  description: The expected number of local NVMe disks (null when unknown).
  type: int
  returned: always
array_device:
  description: The md device the array runs as (the one found when it already runs).
  type: str
  returned: always
wipe:
  description: Disks whose signatures are wiped first (only with O(force)).
  type: list
  elements: str
  returned: always
create_argv:
  description: The mdadm command line that creates the array.
  type: list
  elements: str
  returned: always
"""

import os

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nvme import (
    LSBLK_COLUMNS,
    discover,
    parse_lsblk,
    plan_argument_spec,
    plan_result,
)
from ansible.module_utils.basic import AnsibleModule


def _probe_host(module: AnsibleModule, device: str, exclude_models: list[str]) -> dict:
    rc, out, err = module.run_command(["lsblk", "-J", "-b", "-o", LSBLK_COLUMNS])
    if rc != 0:
        module.fail_json(msg=f"lsblk failed (rc {rc}): {err.strip()}")
    devices = parse_lsblk(out)
    present = [d["path"] for d in devices if os.path.exists(d["path"])]
    candidates, _unused = discover(devices, exclude_models, present)
    mdadm = module.get_bin_path("mdadm")
    probes = {}
    for disk in candidates:
        path = disk["path"]
        probe = {}
        rc, out, err = module.run_command(["wipefs", "--no-act", "--json", path])
        if rc != 0:
            module.fail_json(msg=f"wipefs could not read {path} (rc {rc}): {err.strip()}")
        probe["wipefs"] = out
        rc, out, err = module.run_command(["blkid", "-p", "-o", "export", path])
        if rc not in (0, 2):  # 2: nothing found
            module.fail_json(msg=f"blkid could not probe {path} (rc {rc}): {err.strip()}")
        probe["blkid"] = out
        if mdadm:
            rc, out, _unused = module.run_command([mdadm, "--examine", "--export", path])
            probe["examine"] = out if rc == 0 else ""
        probes[path] = probe
    detail = ""
    if mdadm and os.path.exists(device):
        rc, out, _unused = module.run_command([mdadm, "--detail", "--export", device])
        detail = out if rc == 0 else ""
    return {"lsblk": devices, "present": present, "probes": probes, "detail": detail}


def main() -> None:
    module = AnsibleModule(
        argument_spec=plan_argument_spec(),
        supports_check_mode=True,
    )
    p = module.params
    if p["recorded"] is not None:
        rec = p["recorded"]
        state = {"lsblk": parse_lsblk(rec.get("lsblk") or ""), "present": rec.get("present"),
                 "probes": rec.get("probes") or {}, "detail": rec.get("detail") or ""}
    else:
        state = _probe_host(module, p["device"], p["exclude_models"])
    module.exit_json(**plan_result(p, state["lsblk"], state["present"], state["probes"], state["detail"]))


if __name__ == "__main__":
    main()
