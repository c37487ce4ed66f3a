# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.nvme_raid: the nvme_raid role's whole work on a node as one
host-task for the controller. It runs, inside one worker, the module calls the role's task
chain ran: the plan (amlhpc.azureml.nvme_raid_info), and only when there is something to
build or to keep, the build (mdadm, community.general.filesystem, ansible.builtin.lineinfile,
ansible.posix.mount, ansible.builtin.file, update-initramfs). The decisions are plain
functions of plugins/module_utils/amlhpc/nodes/nvme.py. The plan is the result's ``state``.

A rerun reads the node first with one shell command (module_utils/amlhpc/nodes/nvme_read.py,
through plugin_utils/node_read.py): where there are no local NVMe disks, or the array and
everything the file-system steps keep are in place, the plan is decided on the controller
and no module runs; otherwise the modules run as above."""

from __future__ import annotations

import shlex
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.node_read import unchanged_result
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nvme_read import read_command, unchanged_state
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nvme import (
    mdadm_conf_line,
    mount_options,
    parse_export,
    plan_argument_spec,
    would_build_message,
)

PLAN_OPTIONS = tuple(plan_argument_spec())
ARGUMENT_SPEC = {
    **plan_argument_spec(),
    "filesystem": {"type": "str", "default": "xfs"},
    "mkfs_options": {"type": "str", "default": ""},
    "mount_point": {"type": "path", "default": "/mnt/resource_nvme"},
    "mount_options": {"type": "str", "default": "defaults,noatime"},
    "mount_mode": {"type": "str", "default": "0755"},
    "mdadm_conf": {"type": "path", "default": "/etc/mdadm/mdadm.conf"},
    "update_initramfs": {"type": "bool", "default": True},
    "packages": {"type": "list", "elements": "str", "default": ["mdadm", "xfsprogs"]},
}


class ActionModule(ActionBase):
    """Plan, refuse or build, and keep the array's file system, mount and records."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validated.error_messages:
            raise AnsibleActionFail(f"nvme_raid: {'; '.join(validated.error_messages)}")
        p = validated.validated_parameters
        self._task_vars = task_vars
        self._diffs: list[Any] = []
        self._steps: list[str] = []
        # what the assert and the "would build" message printed: one line per node, always shown
        result["_ansible_verbose_always"] = True

        # A rerun reads the node with one shell command; where it shows nothing to do (no disks, or
        # the array and its records in place) no module runs. Otherwise the plan, then the steps.
        in_place = unchanged_result(self, self._task.args, ARGUMENT_SPEC, read_command, unchanged_state,
                                    home_paths=("device", "mount_point", "mdadm_conf"))
        state = in_place if in_place is not None else self._module(
            "Find the local NVMe disks and what they hold", "amlhpc.azureml.nvme_raid_info",
            {k: p[k] for k in PLAN_OPTIONS if p[k] is not None})
        state = {k: v for k, v in state.items() if not k.startswith("_ansible") and k not in ("invocation", "changed")}
        result.update(state=state, action=state["action"], reason=state["reason"], array_device=state.get("array_device"))
        if state["action"] == "refuse":
            result.update(failed=True, msg=state["reason"])
            return result
        result["msg"] = f"nvme_raid: {state['reason']}"
        if state["action"] in ("create", "assemble"):
            if p["recorded"] is not None or self._task.check_mode:
                # recorded outputs are not this node's disks, and check mode runs no command
                result.update(changed=self._task.check_mode, msg=result["msg"] + "; " + would_build_message(
                    state, p["device"], p["filesystem"], p["mount_point"], p["mdadm_conf"]))
                return result
            self._build(state, p)
        if state["action"] in ("create", "assemble", "exists") and p["recorded"] is None and in_place is None:
            self._filesystem(state, p)
        result.update(changed=bool(self._steps), steps=self._steps)
        if self._diffs:
            result["diff"] = self._diffs
        return result

    def _module(self, step: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        res = self._execute_module(module_name=name, module_args=args, task_vars=self._task_vars)
        if res.get("failed"):
            raise AnsibleActionFail(f"NVMe RAID | {step}: {res.get('msg', 'failed')}", result=res)
        if res.get("changed"):
            self._steps.append(step)
        if res.get("diff"):
            self._diffs.extend(res["diff"] if isinstance(res["diff"], list) else [res["diff"]])
        return res

    def _command(self, step: str, argv: list[str], read_only: bool = False) -> str:
        """Run argv on the node (as the task's become user); read-only ones run in check mode too."""
        res = self._low_level_execute_command(shlex.join(argv))
        if res["rc"] != 0:
            raise AnsibleActionFail(f"NVMe RAID | {step}: {' '.join(argv)} failed (rc {res['rc']}): "
                                    f"{(res['stderr'] or res['stdout']).strip()}", result=dict(res))
        if not read_only:
            self._steps.append(step)
        return res["stdout"]

    def _build(self, state: dict[str, Any], p: dict[str, Any]) -> None:
        device = p["device"]
        tools = self._low_level_execute_command(shlex.join(["which", "mdadm", f"mkfs.{p['filesystem']}"]))
        if tools["rc"] != 0:
            self._module("Install mdadm and the file system tools", "ansible.builtin.apt",
                         {"name": p["packages"], "state": "present"})
        if state["action"] == "create":
            for disk in state.get("wipe") or []:
                self._command(f"Wipe the signatures off {disk} (nvme_raid_force)", ["wipefs", "--all", disk])
            self._command("Create the RAID0 array", list(state["create_argv"]))
        else:
            self._command("Assemble the stopped RAID0 array", ["mdadm", "--assemble", device, *state["devices"]])

    def _filesystem(self, state: dict[str, Any], p: dict[str, Any]) -> None:
        array = state["array_device"]
        fs_args = {"dev": array, "fstype": p["filesystem"]}
        if p["mkfs_options"]:
            fs_args["opts"] = p["mkfs_options"]
        self._module("Make the file system on the array", "community.general.filesystem", fs_args)
        blkid = parse_export(self._command("Read the file system's UUID", ["blkid", "-p", "-o", "export", array],
                                           read_only=True))
        detail = parse_export(self._command("Read the array's identity", ["mdadm", "--detail", "--export", array],
                                            read_only=True))
        if not detail.get("MD_UUID") or not blkid.get("UUID"):
            raise AnsibleActionFail(f"NVMe RAID | {array}: no array UUID (mdadm --detail) or no file system UUID "
                                    "(blkid) to record it by")
        conf = self._module("Record the array in mdadm.conf so that boot assembles it under its name",
                            "ansible.builtin.lineinfile",
                            {"path": p["mdadm_conf"], **mdadm_conf_line(p["device"], detail["MD_UUID"]),
                             "create": True, "owner": "root", "group": "root", "mode": "0644"})
        self._module("Mount the file system and add it to fstab (nofail)", "ansible.posix.mount",
                     {"path": p["mount_point"], "src": f"UUID={blkid['UUID']}", "fstype": p["filesystem"],
                      "opts": mount_options(p["mount_options"]), "state": "mounted"})
        self._module("Set the mode of the mounted file system's root", "ansible.builtin.file",
                     {"path": p["mount_point"], "state": "directory", "mode": p["mount_mode"]})
        if conf.get("changed") and p["update_initramfs"] and not self._task.check_mode:
            # the handler's work: the initramfs assembles the array under its own name at boot
            self._command("Update the initramfs", ["update-initramfs", "-u"])
