# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The nccl_config module's read of a node, as one POSIX shell command for its action plugin.

The module reads the node (``nccl_probe.probe``: the SHARP plugin, ``nvidia-smi topo -m``,
the image's topology file), decides (``nccl.node_plan``) and writes three files
(``files.apply``). On a rerun nothing is to write. The action then runs :func:`read_command`
(no Python on the node), and :func:`unchanged_outcome` gives the module's result for that
case: the same probe, plan, facts and message, ``changed`` false. Where the module would
write anything, would ask the instance metadata (the VM size is not known), or the output is
not what the command prints, it gives None and the module runs as before.

Standard library only.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import shlex
from typing import Any, Mapping, Optional

from .file_state import dir_unchanged, file_unchanged, parse_read
from .file_state import read_command as files_read_command
from .file_state import which_command
from .nccl import config_folders, node_plan, topology_for_vm_size

CONFIG_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "vm_size": {"type": "str", "default": ""},
    "imds": {"type": "bool", "default": True},
    "imds_url": {"type": "str", "default": "http://169.254.169.254/metadata/instance?api-version=2021-02-01"},
    "imds_timeout": {"type": "int", "default": 3},
    "sharp_plugin_dirs": {"type": "list", "elements": "str", "default": []},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "image_topo_files": {"type": "list", "elements": "str", "default": []},
    "topo_file_src": {"type": "str", "default": ""},
    "topo_file_content": {"type": "str"},
    "topo_file_dest": {"type": "path", "default": "/etc/amlhpc/nccl-topo.xml"},
    "conf_path": {"type": "path", "default": "/etc/nccl.conf"},
    "conf_settings": {"type": "dict", "default": {}},
    "conf_extra": {"type": "dict", "default": {}},
    "conf_backup": {"type": "bool", "default": True},
    "env_path": {"type": "path", "default": "/etc/amlhpc/nccl.env"},
    "env": {"type": "dict", "default": {}},
    "env_extra": {"type": "dict", "default": {}},
}
"""The nccl_config module's options (the module and its action validate against this spec)."""

MARK = "@@amlhpc-nccl"


def _image_candidates(params: Mapping[str, Any]) -> list[str]:
    topology = topology_for_vm_size(params["vm_size"]) if params["vm_size"] else None
    if topology is None:
        return []
    return [t.replace("{name}", topology.name) for t in params["image_topo_files"]]


def _paths(params: Mapping[str, Any]) -> list[str]:
    """The folders and files the module writes, in the order the read prints them."""
    dests = (params["topo_file_dest"], params["conf_path"], params["env_path"])
    return [*config_folders(params["topo_file_dest"], params["env_path"]), *dests]


def read_command(params: Mapping[str, Any]) -> str:
    """One shell command: which SHARP plugin folders hold ``libnccl-net.so``, ``nvidia-smi
    topo -m`` (found as the module finds it; its exit status and output), which of the
    image's topology files exists, then the state of the folders and files the module writes
    (``file_state.read_command``) and root's user and group."""
    steps = []
    for i, folder in enumerate(params["sharp_plugin_dirs"]):
        steps.append(f'if [ -e {shlex.quote(posixpath.join(folder, "libnccl-net.so"))} ]; then echo "{MARK} sharp {i}"; fi')
    smi = params["nvidia_smi"]
    # a path as given that cannot run makes the module fail (the read stops: the module runs)
    none = f'echo "{MARK} unusable"; exit 0' if "/" in smi else f'echo "{MARK} topo none"'
    steps.append(which_command(smi, "smi"))
    steps.append(f'if [ -z "$smi" ]; then {none}; else '
                 f't=$(mktemp) || exit 1; "$smi" topo -m >"$t" 2>/dev/null; echo "{MARK} topo $?"; '
                 f'base64 -w0 <"$t"; echo; rm -f "$t"; fi')
    for i, candidate in enumerate(_image_candidates(params)):
        steps.append(f'if [ -e {shlex.quote(candidate)} ]; then echo "{MARK} image {i}"; fi')
    steps.append(f'echo "{MARK} files"')
    steps.append(files_read_command(_paths(params), users=["root"], groups=["root"]))
    return "; ".join(steps)


def _probe(params: Mapping[str, Any], lines: list[str]) -> Optional[dict[str, Any]]:
    sharp: list[str] = []
    topo: Optional[dict[str, Any]] = None
    image = ""
    candidates = _image_candidates(params)
    i = 0
    while i < len(lines):
        head = lines[i].split(" ")
        i += 1
        if head[:1] != [MARK] or len(head) < 2:
            return None
        if head[1] == "sharp" and len(head) == 3:
            sharp.append(params["sharp_plugin_dirs"][int(head[2])])
        elif head[1] == "topo" and head[2:] == ["none"]:
            topo = {"rc": -1, "stdout": ""}
        elif head[1] == "topo" and len(head) == 3:
            topo = {"rc": int(head[2]), "stdout": base64.b64decode(lines[i], validate=True).decode("utf-8")}
            i += 1
        elif head[1] == "image" and len(head) == 3:
            image = image or candidates[int(head[2])]
        else:
            return None
    if topo is None:
        return None
    return {"imds": {"status": -1, "msg": "instance metadata not asked"}, "sharp_plugin_dirs_found": sharp,
            "topo_m": topo, "image_topo_file": image}


def unchanged_outcome(params: Mapping[str, Any], stdout: str) -> Optional[dict[str, Any]]:
    """The module's result when the read (:func:`read_command`'s ``stdout``) shows nothing to
    write; None where the module has to run."""
    if params["imds"] and not params["vm_size"]:
        return None  # the module asks the instance metadata for the VM size
    if params["topo_file_src"] and params["topo_file_content"] is None:
        return None  # the module refuses it, in its own words
    lines = stdout.splitlines()
    try:
        split = lines.index(f"{MARK} files")
        probe = _probe(params, lines[:split])
    except (ValueError, IndexError, binascii.Error, UnicodeDecodeError):
        return None
    paths = _paths(params)
    read = parse_read("\n".join(lines[split + 1:]), paths, users=["root"], groups=["root"])
    if probe is None or read is None:
        return None
    states, ids = read
    try:
        plan = node_plan(probe, vm_size=params["vm_size"], topo_file_src=params["topo_file_src"],
                         topo_file_content=params["topo_file_content"], topo_file_dest=params["topo_file_dest"],
                         conf_path=params["conf_path"], conf_settings={**params["conf_settings"], **params["conf_extra"]},
                         conf_backup=params["conf_backup"], env_path=params["env_path"],
                         env={**params["env"], **params["env_extra"]})
    except ValueError:
        return None
    for item in [*plan["directories"], *plan["files"]]:
        if item["path"] not in states or {item.get("owner", "root"), item.get("group", "root")} != {"root"}:
            return None
    root, group = ids.get("root"), ids.get("group:root")
    if root is None or group is None:
        return None
    uid, gid = root[0], group[0]
    for folder in plan["directories"]:
        if not dir_unchanged(states[folder["path"]], uid, gid, int(folder.get("mode", "0755"), 8)):
            return None
    for item in plan["files"]:
        state = states[item["path"]]
        if item.get("state", "present") == "absent":
            if state.kind != "absent":
                return None
        elif not file_unchanged(state, item.get("content", ""), uid, gid, int(item.get("mode", "0644"), 8)):
            return None
    return {"changed": False, "changed_files": [], "backups": {}, "diff": [], "msg": plan["msg"],
            "facts": plan["facts"], "probe": probe}
