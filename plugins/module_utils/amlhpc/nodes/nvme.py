# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Local NVMe disks of a node: discovery, the empty-disk guard and the RAID0 plan.

Everything here works on text that read-only tools print, so it can be tested on recorded
outputs:

* ``lsblk -J -b -o NAME,PATH,TYPE,SIZE,FSTYPE,PTTYPE,MOUNTPOINT,MODEL,TRAN,SERIAL``
  (util-linux 2.34 of Ubuntu 20.04 prints every value as a string, 2.37+ prints numbers
  and nulls: both are read);
* ``wipefs --no-act --json DEVICE`` (every signature libblkid knows, at every offset);
* ``blkid -p -o export DEVICE`` (low-level probe, ignores the blkid cache);
* ``mdadm --examine --export DEVICE`` (md superblock) and ``mdadm --detail --export MD``.

The plan is one of ``skip``, ``refuse``, ``create``, ``assemble`` or ``exists``, with a
one-line reason a person can act on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

# Mount points that make a disk the OS disk (never touched, not even reported as busy).
SYSTEM_MOUNTPOINTS = frozenset({"/", "/boot", "/boot/efi", "/usr", "/var", "[SWAP]"})

# NVMe disks that are not local: Azure Boost presents remote managed disks (OS and data
# disks of v6 sizes) as NVMe namespaces of this model; the local disks are
# "Microsoft NVMe Direct Disk".
DEFAULT_EXCLUDE_MODELS = ("MSFT NVMe Accelerator",)


def plan_argument_spec() -> dict[str, dict[str, Any]]:
    """The options of the plan (module nvme_raid_info, and the nvme_raid action's plan step):
    one spec for both, a fresh copy per call."""
    return {
        "device": {"type": "path", "default": "/dev/md128"},
        "vm_size": {"type": "str"},
        "expected_count": {"type": "int"},
        "expected_counts": {"type": "dict", "default": {}},
        "exclude_models": {"type": "list", "elements": "str", "default": list(DEFAULT_EXCLUDE_MODELS)},
        "chunk_kib": {"type": "int"},
        "force": {"type": "bool", "default": False},
        "recorded": {"type": "dict"},
    }


# Local NVMe disks per VM size, from Azure's VM size documentation (temp storage). Sizes
# whose temporary disk is a SCSI SSD (ND40rs_v2: 2948 GiB on /dev/sdb) have no NVMe disk
# and are listed with 0. Keys are compared case-insensitively: AzureML reports sizes in
# upper case ("STANDARD_ND96ASR_V4").
DEFAULT_EXPECTED_COUNTS: dict[str, int] = {
    "Standard_ND96asr_v4": 8,
    "Standard_ND96amsr_A100_v4": 8,
    "Standard_ND96isr_H100_v5": 8,
    "Standard_ND96isr_H200_v5": 8,
    "Standard_ND40rs_v2": 0,
    "Standard_NC24ads_A100_v4": 1,
    "Standard_NC48ads_A100_v4": 2,
    "Standard_NC96ads_A100_v4": 4,
    "Standard_HB120rs_v3": 2,
}

# The columns nvme_raid_info and the rerun's read (nvme_read) ask lsblk for.
LSBLK_COLUMNS = "NAME,PATH,TYPE,SIZE,FSTYPE,PTTYPE,MOUNTPOINT,MODEL,TRAN,SERIAL"

_NVME_NAME = re.compile(r"^nvme\d+n\d+$")


# ---------------------------------------------------------------------------- parsing
def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _mountpoints(node: Mapping[str, Any]) -> list[str]:
    """MOUNTPOINT (one) or MOUNTPOINTS (a list, util-linux 2.37+), without nulls."""
    points: list[str] = []
    if isinstance(node.get("mountpoints"), list):
        points.extend(_text(p) for p in node["mountpoints"])
    points.append(_text(node.get("mountpoint")))
    return sorted({p for p in points if p})


def _node(raw: Mapping[str, Any]) -> dict[str, Any]:
    name = _text(raw.get("name"))
    return {
        "name": name,
        "path": _text(raw.get("path")) or f"/dev/{name}",
        "type": _text(raw.get("type")),
        "size": _int(raw.get("size")),
        "fstype": _text(raw.get("fstype")),
        "pttype": _text(raw.get("pttype")),
        "mountpoints": _mountpoints(raw),
        "model": _text(raw.get("model")),
        "tran": _text(raw.get("tran")),
        "serial": _text(raw.get("serial")),
        "children": [_node(c) for c in raw.get("children") or []],
    }


def parse_lsblk(text: str) -> list[dict[str, Any]]:
    """Block devices from ``lsblk -J``, normalised (strings, ints, lists; children kept)."""
    data = json.loads(text) if text.strip() else {}
    return [_node(d) for d in data.get("blockdevices") or []]


def parse_export(text: str | None) -> dict[str, str]:
    """KEY=value lines (``blkid -o export``, ``mdadm --export``)."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_wipefs(text: str | None) -> list[dict[str, str]]:
    """Signatures from ``wipefs --no-act --json`` (empty output: none)."""
    if not text or not text.strip():
        return []
    data = json.loads(text)
    return [{"offset": _text(s.get("offset")), "type": _text(s.get("type")),
             "uuid": _text(s.get("uuid")), "label": _text(s.get("label"))}
            for s in data.get("signatures") or []]


# ---------------------------------------------------------------------------- discovery
def _walk(node: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    yield node
    for child in node.get("children") or []:
        yield from _walk(child)


def is_nvme(disk: Mapping[str, Any]) -> bool:
    return disk.get("tran") == "nvme" or bool(_NVME_NAME.match(str(disk.get("name", ""))))


def discover(devices: Iterable[Mapping[str, Any]], exclude_models: Iterable[str] = DEFAULT_EXCLUDE_MODELS,
             present: Iterable[str] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Split lsblk's disks into local NVMe candidates and the rest (with the reason).

    ``present``: device paths that exist on this host (``None``: do not check). In a
    container lsblk sees the host's disks through /sys but /dev has no node for them.
    """
    models = [m.lower() for m in exclude_models if m]
    present_set = None if present is None else set(present)
    candidates: list[dict[str, Any]] = []
    excluded: list[dict[str, str]] = []
    for disk in devices:
        if disk.get("type") != "disk":
            continue
        path = disk["path"]
        system = sorted({p for n in _walk(disk) for p in n["mountpoints"] if p in SYSTEM_MOUNTPOINTS})
        if not is_nvme(disk):
            reason = "not NVMe"
        elif system:
            reason = f"OS disk (holds {', '.join(system)})"
        elif any(m in disk.get("model", "").lower() for m in models):
            reason = f"remote disk (model '{disk['model']}')"
        elif present_set is not None and path not in present_set:
            reason = f"no device node {path} on this host"
        else:
            candidates.append(dict(disk))
            continue
        excluded.append({"path": path, "reason": reason})
    candidates.sort(key=lambda d: _natural(d["name"]))
    return candidates, excluded


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def expected_count(vm_size: str | None, counts: Mapping[str, int], override: int | None = None) -> int | None:
    """How many local NVMe disks this node should have (None: unknown, not checked)."""
    if override is not None:
        return int(override)
    if not vm_size:
        return None
    wanted = vm_size.strip().lower()
    for size, count in counts.items():
        if size.lower() == wanted:
            return int(count)
    return None


# ---------------------------------------------------------------------------- the guard
def _describe_fs(kind: str, uuid: str, label: str) -> str:
    extra = [kind] + ([f"UUID {uuid}"] if uuid else []) + ([f"label '{label}'"] if label else [])
    return f"a file system ({', '.join(extra)})"


def disk_findings(disk: Mapping[str, Any], probe: Mapping[str, Any] | None = None,
                  own_array: str | None = None) -> list[str]:
    """What makes one disk not empty, as phrases ("holds an ext4 file system ...").

    ``probe`` holds the raw outputs for this disk: ``wipefs`` (JSON), ``blkid`` (export),
    ``examine`` (mdadm export). ``own_array``: the md device this role manages; being a
    member of it is not a finding.
    """
    probe = probe or {}
    found: list[str] = []
    blkid = parse_export(probe.get("blkid"))
    examine = parse_export(probe.get("examine"))
    signatures = parse_wipefs(probe.get("wipefs"))

    # Partition table and its partitions (and what is mounted on them).
    parts = [c for c in disk.get("children") or [] if c.get("type") == "part"]
    pttype = disk.get("pttype") or blkid.get("PTTYPE", "")
    if pttype or parts:
        names = ", ".join(p["path"] for p in parts)
        found.append(f"has a {pttype or 'partition'} partition table"
                     + (f" with partitions {names}" if names else " (no partitions)"))

    # RAID metadata, and arrays it is part of now.
    md_children = [c for c in disk.get("children") or [] if c.get("type", "").startswith("raid")
                   or c.get("name", "").startswith("md")]
    fstype = disk.get("fstype") or blkid.get("TYPE", "")
    if examine.get("MD_LEVEL") or fstype == "linux_raid_member":
        parts_md = [f"level {examine['MD_LEVEL']}"] if examine.get("MD_LEVEL") else []
        if examine.get("MD_UUID") or blkid.get("UUID"):
            parts_md.append(f"array UUID {examine.get('MD_UUID') or blkid.get('UUID')}")
        if examine.get("MD_NAME") or blkid.get("LABEL"):
            parts_md.append(f"name '{examine.get('MD_NAME') or blkid.get('LABEL')}'")
        active = [c["path"] for c in md_children if c["path"] != own_array]
        if md_children and not active:
            pass  # a member of the array this role manages
        else:
            found.append("carries RAID metadata (" + ", ".join(parts_md or ["md superblock"]) + ")"
                         + (f" and is in the running array {', '.join(active)}" if active else ""))
    elif fstype:
        found.append("holds " + _describe_fs(fstype, blkid.get("UUID", ""), blkid.get("LABEL", "")))

    # Signatures that the above did not name (a second file system, LVM, a stale GPT copy).
    named = {pttype, fstype, "linux_raid_member" if examine.get("MD_LEVEL") else ""}
    for sig in signatures:
        if sig["type"] and sig["type"] not in named:
            found.append(f"has a signature of {sig['type']} at offset {sig['offset']}")
            named.add(sig["type"])

    # Mounted: the disk itself or anything on it, other than this role's own array.
    mounted: list[str] = []
    for node in _walk(disk):
        if own_array and node.get("path") == own_array:
            continue
        for point in node.get("mountpoints") or []:
            where = "" if node is disk else f"{node['path']} "
            mounted.append(f"{where}at {point}".strip())
    if mounted:
        found.append("is mounted (" + "; ".join(mounted) + ")")
    return found


def guard_problems(candidates: Iterable[Mapping[str, Any]], probes: Mapping[str, Mapping[str, Any]],
                   own_array: str | None = None) -> list[str]:
    """One sentence per disk that is not empty, naming the device and what it holds."""
    problems = []
    for disk in candidates:
        found = disk_findings(disk, probes.get(disk["path"]), own_array)
        if found:
            problems.append(f"{disk['path']} " + " and ".join(found))
    return problems


# ---------------------------------------------------------------------------- the plan
def array_from_detail(device: str, detail: str | None) -> dict[str, Any]:
    """The state of an md array from ``mdadm --detail --export`` (empty: absent)."""
    info = parse_export(detail)
    if not info.get("MD_LEVEL"):
        return {"device": device, "exists": False, "level": "", "uuid": "", "members": []}
    members = sorted({v for k, v in info.items() if k.startswith("MD_DEVICE_") and k.endswith("_DEV")},
                     key=_natural)
    return {"device": device, "exists": True, "level": info["MD_LEVEL"], "uuid": info.get("MD_UUID", ""),
            "members": members, "raid_devices": _int(info.get("MD_DEVICES"))}


def _running_arrays(candidates: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """md devices lsblk shows on top of the candidate disks: path -> {level, members}."""
    arrays: dict[str, dict[str, Any]] = {}
    for disk in candidates:
        for child in disk.get("children") or []:
            if child.get("type", "").startswith("raid") or child.get("name", "").startswith("md"):
                entry = arrays.setdefault(child["path"], {"level": child["type"], "members": []})
                entry["members"].append(disk["path"])
    return arrays


def plan(candidates: list[Mapping[str, Any]], excluded: list[Mapping[str, str]],
         probes: Mapping[str, Mapping[str, Any]], array: Mapping[str, Any], expected: int | None,
         force: bool = False, vm_size: str | None = None) -> dict[str, Any]:
    """Decide what to do with the local NVMe disks; ``reason`` is one line."""
    device = str(array.get("device"))
    paths = [d["path"] for d in candidates]
    result: dict[str, Any] = {"action": "", "reason": "", "problems": [], "devices": paths,
                              "array_device": device, "wipe": []}

    def done(action: str, reason: str, **extra: Any) -> dict[str, Any]:
        result.update(action=action, reason=reason, **extra)
        return result

    what = f"{vm_size} " if vm_size else ""
    if not paths:
        seen = "; ".join(f"{e['path']}: {e['reason']}" for e in excluded) or "no disks at all"
        if expected:
            seen += f"; a {what}node should have {expected}, check the VM"
        elif expected == 0:
            seen += f"; a {what}node has none"
        return done("skip", f"no local NVMe disks found ({seen}): nothing to do")
    if expected is not None and len(paths) != expected:
        return done("refuse", f"found {len(paths)} local NVMe disk(s) ({', '.join(paths)}) "
                              f"but a {what}node should have {expected}: check the VM size or set "
                              "nvme_raid_expected_count")

    running = _running_arrays(candidates)
    # The array already runs (under the wanted name, or another one after a reboot).
    for md, info in sorted(running.items()):
        if sorted(info["members"], key=_natural) == paths and info["level"] == "raid0" \
                and (md == device or not (array.get("exists"))):
            note = "" if md == device else f" (assembled as {md}, not {device})"
            return done("exists", f"{md} is already a RAID0 of the {len(paths)} NVMe disks{note}",
                        array_device=md)
    if array.get("exists"):
        return done("refuse", f"{device} already exists as {array.get('level')} of "
                              f"{', '.join(array.get('members') or []) or 'no members'}, not a RAID0 of "
                              f"{', '.join(paths)}: stop it (mdadm --stop {device}) or set nvme_raid_device")

    # Stopped but whole: every disk carries the superblock of one RAID0 of all of them.
    examined = [parse_export((probes.get(p) or {}).get("examine")) for p in paths]
    uuids = {e.get("MD_UUID") for e in examined}
    if (len(uuids) == 1 and None not in uuids and all(e.get("MD_LEVEL") == "raid0" for e in examined)
            and all(_int(e.get("MD_DEVICES")) == len(paths) for e in examined) and not running):
        return done("assemble", f"the {len(paths)} NVMe disks hold a stopped RAID0 (UUID {uuids.pop()}): "
                                f"assembling it as {device}")

    problems = guard_problems(candidates, probes, own_array=device)
    if not problems:
        return done("create", f"creating {device}: RAID0 of {len(paths)} empty NVMe disks ({', '.join(paths)})")
    hard = [p for p in problems if "is mounted" in p or "running array" in p]
    head = (f"refusing to build {device}: {len(problems)} of {len(paths)} NVMe disks are not empty: "
            + "; ".join(problems) + ". Nothing was changed.")
    if hard:
        return done("refuse", head + " Mounted disks and disks in a running array are never overwritten, "
                                     "not even with nvme_raid_force: unmount or stop them first.",
                    problems=problems)
    if not force:
        return done("refuse", head + " Wipe them yourself (wipefs -a DEVICE) or set nvme_raid_force: true "
                                     "to overwrite them.", problems=problems)
    wipe = [d["path"] for d in candidates if disk_findings(d, probes.get(d["path"]), device)]
    return done("create", f"creating {device} over non-empty disks because nvme_raid_force is set: "
                          + "; ".join(problems), problems=problems, wipe=wipe)


def plan_result(params: Mapping[str, Any], devices: list[dict[str, Any]], present: Iterable[str] | None,
                probes: Mapping[str, Mapping[str, Any]], detail: str | None) -> dict[str, Any]:
    """What ``nvme_raid_info`` returns (the plan and what it was made of) from the node's
    reads: ``devices`` (:func:`parse_lsblk`), ``present`` (their paths that exist here),
    ``probes`` (per candidate disk) and ``detail`` (``mdadm --detail --export`` of the
    array's device, empty when it is absent); ``params`` are the plan's options
    (:func:`plan_argument_spec`)."""
    candidates, excluded = discover(devices, params["exclude_models"], present)
    counts = dict(DEFAULT_EXPECTED_COUNTS)
    counts.update(params["expected_counts"] or {})
    expected = expected_count(params["vm_size"], counts, params["expected_count"])
    array = array_from_detail(params["device"], detail)
    decision = plan(candidates, excluded, probes, array, expected, force=params["force"], vm_size=params["vm_size"])
    return {"changed": False, "excluded": excluded, "expected_count": expected, "array": array,
            "create_argv": mdadm_create_argv(params["device"], decision["devices"], params["chunk_kib"]),
            **decision}


def mdadm_create_argv(device: str, members: list[str], chunk_kib: int | None = None,
                      name: str | None = None) -> list[str]:
    """The ``mdadm --create`` command line for a RAID0 of ``members``."""
    argv = ["mdadm", "--create", device, "--run", "--level=0", "--metadata=1.2",
            f"--raid-devices={len(members)}"]
    if chunk_kib:
        argv.append(f"--chunk={int(chunk_kib)}")
    if name:
        argv.append(f"--name={name}")
    return argv + list(members)


# ---------------------------------------------------------------------------------------
# The build, as the nvme_raid action runs it after the plan (nvme_raid_info)

def would_build_message(state: Mapping[str, Any], device: str, filesystem: str, mount_point: str,
                        mdadm_conf: str) -> str:
    """What check mode says a create or assemble would do (nothing is run in check mode)."""
    if state["action"] == "create":
        argv = list(state["create_argv"])
    else:
        argv = ["mdadm", "--assemble", device, *state["devices"]]
    wipe = list(state.get("wipe") or [])
    return (f"would {state['action']} {device}: {' '.join(argv)}"
            + (f"; wipefs --all {' '.join(wipe)}" if wipe else "")
            + f"; then mkfs.{filesystem} on it (when it holds none), mount at {mount_point}"
            + f" (fstab, nofail) and record it in {mdadm_conf}")


def mount_options(options: str) -> str:
    """The fstab options: the user's, with ``nofail`` added when missing (the local disks
    come back blank after a deallocation, and the node must still boot)."""
    opts = [o for o in options.split(",") if o]
    return ",".join(opts + ([] if "nofail" in opts else ["nofail"]))


def mdadm_conf_line(device: str, md_uuid: str) -> dict[str, str]:
    """lineinfile's ``regexp`` and ``line`` for the array's ARRAY line in mdadm.conf."""
    return {"regexp": rf"^ARRAY\s+\S+\s+.*UUID={re.escape(md_uuid)}",
            "line": f"ARRAY {device} metadata=1.2 UUID={md_uuid}"}
