#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Documentation of the nvme_raid action plugin (plugins/action/nvme_raid.py), which does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvme_raid
short_description: Plan, refuse or build the RAID0 of a node's local NVMe disks, with its file system, mount and records
version_added: "1.0.0"
description:
  - The nvme_raid role's work on a node as one task for the controller. It runs, on the node, the
    plan of M(amlhpc.azureml.nvme_raid_info) (which disks, what they hold, what to do) and sets
    the host variable C(nvme_raid_state) to it.
  - C(refuse) fails the task with the plan's reason (the devices and what was found on them).
    C(skip) does nothing.
  - C(create) installs mdadm and the file system tools when missing (O(packages)), wipes the
    disks' signatures (only with O(force)) and creates the array; C(assemble) assembles a
    stopped one. Check mode runs none of this and says which array the run would build.
  - Then, for C(create), C(assemble) (not in check mode) and C(exists) (also in check mode, where
    the modules report what they would change), the file system is made when the array holds none
    (M(community.general.filesystem)), the array's ARRAY line recorded in O(mdadm_conf)
    (M(ansible.builtin.lineinfile)), the file system mounted by UUID and added to fstab with
    C(nofail) (M(ansible.posix.mount)), the mount point's mode set (M(ansible.builtin.file)), and
    the initramfs rebuilt when the ARRAY line changed (O(update_initramfs)).
  - With O(recorded), the plan is made on recorded outputs, which are not this node's disks, so
    the task says what it would build and builds nothing.
  - A rerun first reads the node with one shell command, no Python on the node (lsblk, mdadm's and
    blkid's view of the array, mdadm.conf, fstab, the mount point). Where that shows nothing to do,
    either no local NVMe disks (C(skip)) or the array running under O(device) with its file system,
    ARRAY line, fstab line, mount and mode as the steps above would leave them (C(exists)), the task
    returns the same plan and result without running a module. Anything else, or a read it does
    not expect, runs the modules as described above.
attributes:
  action:
    support: full
  bypass_host_loop:
    support: none
  async:
    support: none
  check_mode:
    support: full
    details: The plan runs; a create or assemble is only described; an existing array's file system, mount and records are checked.
  diff_mode:
    support: full
    details: The diffs of the file system, mdadm.conf, mount and mode steps.
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  device:
    description: The md device of the array.
    type: path
    default: /dev/md128
  vm_size:
    description: The node's VM size, to look up the expected disk count.
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
    description: RAID0 chunk size in KiB (default - mdadm's, 512).
    type: int
  force:
    description: Overwrite disks that hold data (their signatures are wiped first; never mounted ones or running arrays).
    type: bool
    default: false
  recorded:
    description: Recorded tool outputs to plan on instead of probing the node (see M(amlhpc.azureml.nvme_raid_info)); nothing is built.
    type: dict
  filesystem:
    description: File system made on the array.
    type: str
    default: xfs
  mkfs_options:
    description: Extra mkfs options; empty for none.
    type: str
    default: ""
  mount_point:
    description: Where the file system is mounted.
    type: path
    default: /mnt/resource_nvme
  mount_options:
    description: Mount options for the fstab entry; C(nofail) is added when missing.
    type: str
    default: defaults,noatime
  mount_mode:
    description: Mode of the mounted file system's root directory.
    type: str
    default: "0755"
  mdadm_conf:
    description: mdadm's configuration file, where the array's ARRAY line goes.
    type: path
    default: /etc/mdadm/mdadm.conf
  update_initramfs:
    description: Rebuild the initramfs (C(update-initramfs -u)) when the ARRAY line changes.
    type: bool
    default: true
  packages:
    description: Packages installed when mdadm or C(mkfs.<filesystem>) is missing.
    type: list
    elements: str
    default: [mdadm, xfsprogs]
author:
  - amlhpc contributors (@amlhpc)
seealso:
  - module: amlhpc.azureml.nvme_raid_info
"""

EXAMPLES = r"""
- name: NVMe RAID | Find the disks, then build, mount and persist the array (or say why not)
  amlhpc.azureml.nvme_raid:
    device: /dev/md128
    vm_size: Standard_ND96asr_v4
    mount_point: /mnt/resource_nvme
  become: true
"""

RETURN = r"""
msg:
  description: C(nvme_raid:) and the plan's reason; in check mode, also the array the run would build. When refused, the reason.
  type: str
  returned: always
  sample: "nvme_raid: /dev/md128 is already a RAID0 of the 8 NVMe disks"
action:
  description: The plan, C(skip), C(refuse), C(create), C(assemble) or C(exists) (the whole plan is the host variable C(nvme_raid_state)).
  type: str
  returned: always
reason:
  description: One line saying why, naming devices and what was found on them.
  type: str
  returned: always
array_device:
  description: The md device the array runs as.
  type: str
  returned: always
steps:
  description: The steps that changed something.
  type: list
  elements: str
  returned: when the plan was carried out
"""
