#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Start or stop BeeOND from the head node (amlhpc)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: amlhpc_beeond
short_description: Start or stop a BeeOND (BeeGFS on demand) file system from the head node
version_added: "1.0.0"
description:
  - Runs C(beeond start) or C(beeond stop) once, on the node it is called on (the head),
    for every node of a nodefile.
  - Idempotent. "Already running" is read from beeond's status file (O(status_file)) and
    C(/proc/mounts), as beeond itself has no exit status for it (it exits 1 on any error).
    C(started) does nothing when the mount point holds a BeeGFS mount; it fails, naming the
    fix and running nothing, when a status file is left without the mount (a session that was
    not shut down properly, which C(beeond start) would refuse).
    C(stopped) does nothing when neither a BeeGFS mount nor a BeeOND status file is left.
  - Supports check mode. It reports what it would do and runs nothing.
  - The command lines and the reading of their results live in
    C(module_utils/amlhpc/nodes/beeond.py).
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  state:
    description: Whether BeeOND should be running (C(started)) or torn down (C(stopped)).
    type: str
    choices: [started, stopped]
    default: started
  nodefile:
    description: The nodefile, with one private IP per line in rank order (the ssh_trust role writes it).
    type: path
    required: true
  data_dir:
    description: Local directory on every node that holds the BeeGFS server data (C(started)).
    type: path
  mount_point:
    description: Where every node mounts the file system.
    type: path
    required: true
  metadata_servers:
    description: Number of metadata servers (C(beeond start -m)).
    type: int
    default: 1
  storage_servers:
    description: Number of storage servers (C(-s)); default every node.
    type: int
  port_shift:
    description: Shift of the BeeGFS network ports (C(-p)); default beeond's own.
    type: int
  log_dir:
    description: Log directory on the nodes (C(beeond start -L)); default beeond's own.
    type: path
  clear_data:
    description: Remove what a previous session left in I(data_dir) before starting (C(-F)).
    type: bool
    default: true
  pdsh:
    description: Start and stop the nodes in parallel with pdsh (C(-P)).
    type: bool
    default: true
  delete_data:
    description: On stop, delete the BeeGFS data on the nodes (C(-d)).
    type: bool
    default: true
  delete_logs:
    description: On stop, delete the log files (C(-L)).
    type: bool
    default: true
  status_file:
    description:
      - beeond's status file on this node (C(beeond -i)); beeond writes one line per service it
        started, and refuses to start while the file exists.
    type: path
    default: /tmp/beeond.tmp
  extra_args:
    description: More arguments for C(beeond start).
    type: list
    elements: str
    default: []
  executable:
    description: The beeond program.
    type: str
    default: beeond
author:
  - amlhpc contributors (@amlhpc)
"""

EXAMPLES = r"""
- name: BeeOND | Start the file system from the head
  amlhpc.azureml.amlhpc_beeond:
    state: started
    nodefile: /etc/amlhpc/nodefile
    data_dir: /mnt/resource_nvme/beeond
    mount_point: /mnt/scratch
    metadata_servers: 2

- name: BeeOND | Stop the file system
  amlhpc.azureml.amlhpc_beeond:
    state: stopped
    nodefile: /etc/amlhpc/nodefile
    mount_point: /mnt/scratch
"""

RETURN = r"""
cmd:
  description: The beeond command line run (or that would run, in check mode); empty when nothing was needed.
  returned: always
  type: list
  elements: str
  sample: [beeond, start, -n, /etc/amlhpc/nodefile, -d, /mnt/resource_nvme/beeond,
           -c, /mnt/scratch, -m, "1", -F, -P]
already_mounted:
  description: Whether the mount point already held the BeeGFS mount (read from C(/proc/mounts)).
  returned: always
  type: bool
rc:
  description: beeond's exit status; null when it was not run.
  returned: always
  type: int
stdout:
  description: beeond's standard output.
  returned: when beeond ran
  type: str
stderr:
  description: beeond's standard error.
  returned: when beeond ran
  type: str
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.beeond import (
    build_start_argv,
    start_decision,
    build_stop_argv,
    interpret_start,
    interpret_stop,
    is_beegfs_mounted,
)


def _mounted(mount_point: str) -> bool:
    try:
        with open("/proc/mounts", encoding="utf-8") as fh:
            return is_beegfs_mounted(fh.read(), mount_point)
    except OSError:
        return False


def _read_status(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["started", "stopped"], "default": "started"},
            "nodefile": {"type": "path", "required": True},
            "data_dir": {"type": "path"},
            "mount_point": {"type": "path", "required": True},
            "metadata_servers": {"type": "int", "default": 1},
            "storage_servers": {"type": "int"},
            "port_shift": {"type": "int"},
            "log_dir": {"type": "path"},
            "clear_data": {"type": "bool", "default": True},
            "pdsh": {"type": "bool", "default": True},
            "delete_data": {"type": "bool", "default": True},
            "delete_logs": {"type": "bool", "default": True},
            "status_file": {"type": "path", "default": "/tmp/beeond.tmp"},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "executable": {"type": "str", "default": "beeond"},
        },
        required_if=[("state", "started", ("data_dir",))],
        supports_check_mode=True,
    )
    p = module.params
    mounted = _mounted(p["mount_point"])
    result = {"changed": False, "cmd": [], "already_mounted": mounted, "rc": None}

    try:
        if p["state"] == "started":
            decision = start_decision(_read_status(p["status_file"]), mounted, p["mount_point"],
                                      p["status_file"])
            if decision["action"] == "none":
                module.exit_json(msg=decision["msg"], **result)
            if decision["action"] == "refuse":
                module.fail_json(msg=decision["msg"], **result)
            argv = build_start_argv(p["nodefile"], p["data_dir"], p["mount_point"],
                                    metadata_servers=p["metadata_servers"],
                                    storage_servers=p["storage_servers"],
                                    clear_data=p["clear_data"], pdsh=p["pdsh"],
                                    port_shift=p["port_shift"], log_dir=p["log_dir"],
                                    extra_args=p["extra_args"], executable=p["executable"],
                                    status_file=p["status_file"])
        else:
            if not mounted and not os.path.exists(p["status_file"]):
                module.exit_json(msg="BeeOND is not running", **result)
            argv = build_stop_argv(p["nodefile"], delete_data=p["delete_data"],
                                   delete_logs=p["delete_logs"], pdsh=p["pdsh"],
                                   executable=p["executable"], status_file=p["status_file"])
    except ValueError as exc:
        module.fail_json(msg=str(exc), **result)

    result["cmd"] = argv
    if not os.path.isfile(p["nodefile"]) and not module.check_mode:
        module.fail_json(msg=f"nodefile {p['nodefile']} does not exist: run the ssh_trust role "
                             "first (it writes the nodefile)", **result)
    if module.check_mode:
        result["changed"] = True
        module.exit_json(msg=f"would run: {' '.join(argv)}", **result)

    rc, out, err = module.run_command(argv)
    result.update(rc=rc, stdout=out, stderr=err)
    verdict = interpret_start(rc, out, err) if p["state"] == "started" else interpret_stop(rc, out, err)
    result["changed"] = verdict["changed"]
    result["already_mounted"] = bool(verdict.get("already_mounted", mounted))
    if verdict["failed"]:
        module.fail_json(msg=verdict["msg"], **result)
    module.exit_json(msg=verdict["msg"], **result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
