# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The nvme_raid role's rerun in one shell command: read the disks, the array and the file
system's records, and decide on the controller whether the role has anything to do.

On a rerun the answer is mostly "nothing": a node without local NVMe disks (``skip``), or an
NDv4 node whose RAID0 is built, formatted, recorded in mdadm.conf and fstab, mounted and of
the right mode (``exists``). The nvme_raid action ran five modules to learn that (the plan
``nvme_raid_info``, then ``filesystem``, ``lineinfile``, ``mount`` and ``file``), about 0.2 s
of the node's CPU each (bench/task_kinds_bench.py). :func:`read_command` reads what those
modules read, in one command with no Python on the node; :func:`unchanged_state` returns
the plan (the same dict ``nvme_raid_info`` returns, from the same functions of
:mod:`.nvme`) when the read shows that none of them would change anything, else None, and
the action runs the modules as before. It decides conservatively: anything it does not
model exactly (an array assembled under another name, a symbolic mode, a disk to probe)
is None.

Standard library only.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any, Optional

from .file_state import FileState, parse_read, read_command as files_read_command, which_command
from .nvme import LSBLK_COLUMNS, mdadm_conf_line, mount_options, parse_export, parse_lsblk, plan_result

MARK = "@@amlhpc-nvme"
FSTAB = "/etc/fstab"


def _section(name: str, command: str) -> str:
    """Shell printing ``MARK name``, the command's stdout, then ``MARK end name RC``."""
    return (f'echo "{MARK} {name}"; {command} 2>/dev/null; '
            f'printf "\\n{MARK} end {name} %s\\n" "$?"')


def read_command(p: Mapping[str, Any], fstab: str = FSTAB) -> Optional[str]:
    """One POSIX shell command that prints what the plan and the file-system steps read:
    ``lsblk``, which of its devices exist here, mdadm's view of the array's device, the
    file system on it (``blkid``, as ``filesystem`` and the action ask), and mdadm.conf,
    the mount point (with its parent's device and inode, as ``ismount`` compares them) and
    fstab. None where the plan comes from recorded outputs (nothing to read)."""
    if p.get("recorded") is not None:
        return None
    device = shlex.quote(p["device"])
    mount_point = p["mount_point"].rstrip("/") or "/"
    steps = [
        "export LC_ALL=C",
        f'for t in lsblk blkid stat; do command -v "$t" >/dev/null 2>&1 || {{ echo "{MARK} missing $t"; exit 0; }}; done',
        _section("lsblk", f"lsblk -J -b -o {LSBLK_COLUMNS}"),
        # every path lsblk knows (the top-level ones are picked on the controller)
        _section("present", 'lsblk -rn -o PATH | while read -r d; do if [ -e "$d" ]; then echo "$d"; fi; done'),
        which_command("mdadm", "MDADM"),
        f'echo "{MARK} mdadm $MDADM"',
        _section("detail", f'if [ -n "$MDADM" ] && [ -e {device} ]; then "$MDADM" --detail --export {device}; '
                           "else false; fi"),
        _section("fstype", f"blkid -c /dev/null -o value -s TYPE {device}"),
        _section("blkid", f"blkid -p -o export {device}"),
        _section("mounted", f"stat -c '%F %d %i' {shlex.quote(mount_point)} {shlex.quote(mount_point + '/..')}"),
        f'echo "{MARK} files"',
        files_read_command([p["mdadm_conf"], p["mount_point"], fstab], users=("root",), groups=("root",)),
    ]
    return "; ".join(steps)


def parse_sections(stdout: str) -> Optional[tuple[dict[str, tuple[int, str]], str, str]]:
    """``({name: (rc, output)}, mdadm path, the files' part)`` from :func:`read_command`'s
    output; None when it is not what that prints (a tool missing, say). Line ends are read
    as ``\n``: over ssh the command runs on a terminal, which ends lines with ``\r\n``."""
    head, sep, files = stdout.replace("\r\n", "\n").partition(f"\n{MARK} files\n")
    if not sep:
        return None
    sections: dict[str, tuple[int, str]] = {}
    mdadm = None
    lines = head.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(f"{MARK} mdadm"):
            mdadm = line[len(f"{MARK} mdadm"):].strip()
            i += 1
            continue
        match = re.fullmatch(rf"{re.escape(MARK)} (\w+)", line)
        if not match:
            return None
        name = match.group(1)
        end = f"{MARK} end {name} "
        body: list[str] = []
        i += 1
        while i < len(lines) and not (lines[i].startswith(end) and lines[i][len(end):].isdigit()):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            return None
        # the printf put a newline between the output and the end mark: the lines between are the output
        sections[name] = (int(lines[i][len(end):]), "\n".join(body))
        i += 1
    if mdadm is None or set(sections) != {"lsblk", "present", "detail", "fstype", "blkid", "mounted"}:
        return None
    return sections, mdadm, files


def _escape_fstab(value: str) -> str:
    """ansible.posix.mount's escaping of an fstab field."""
    return value.replace("\\", "\\134").replace(" ", "\\040").replace("&", "\\046")


def fstab_unchanged(text: str, name: str, src: str, fstype: str, opts: str, dump: str = "0", passno: str = "0") -> bool:
    """Whether ``ansible.posix.mount`` (state mounted, Linux) would leave fstab as it is:
    a line for the mount point, and every such line's fields as wanted."""
    wanted = {"src": _escape_fstab(src), "fstype": _escape_fstab(fstype), "opts": _escape_fstab(opts),
              "dump": dump, "passno": passno}
    found = False
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith("#"):
            continue
        fields = line.split("#")[0].split()
        if len(fields) not in (4, 5, 6):
            continue
        entry: dict[str, Any] = {"dump": 0, "passno": 0}  # the module's defaults: ints, never equal to '0'
        entry.update(zip(("src", "name", "fstype", "opts", "dump", "passno"), fields))
        if entry["name"] != _escape_fstab(name):
            continue
        found = True
        if any(entry[k] != v for k, v in wanted.items()):
            return False
    return found


def lineinfile_unchanged(state: FileState, regexp: str, line: str, uid: int, gid: int, mode: int) -> bool:
    """Whether ``ansible.builtin.lineinfile`` (regexp, line, create, owner, group, mode) would
    leave the file as it is: the last line the regexp matches is the line, with its newline."""
    if state.kind != "file" or state.text is None or (state.uid, state.gid, state.mode) != (uid, gid, mode):
        return False
    pattern = re.compile(regexp)
    matched = [raw for raw in state.text.splitlines(keepends=True) if pattern.search(raw)]
    return bool(matched) and matched[-1] == line + "\n"


def _octal_mode(mode: str) -> Optional[int]:
    return int(mode, 8) if re.fullmatch(r"0?[0-7]{3,4}", mode) else None


def unchanged_state(p: Mapping[str, Any], stdout: str, fstab: str = FSTAB) -> Optional[dict[str, Any]]:
    """The plan (``nvme_raid_info``'s result) when the read shows the role has nothing to
    do: no local NVMe disks (``skip``), or the array running under its own name with its
    file system, mdadm.conf line, fstab line, mount and mode in place (``exists``). None
    otherwise: the action runs the modules."""
    parsed = parse_sections(stdout)
    if parsed is None:
        return None
    sections, mdadm, files = parsed
    lsblk_rc, lsblk = sections["lsblk"]
    if lsblk_rc != 0:
        return None
    try:
        devices = parse_lsblk(lsblk)
    except ValueError:
        return None
    present_paths = set(sections["present"][1].split())
    present = [d["path"] for d in devices if d["path"] in present_paths]
    detail_rc, detail = sections["detail"]
    state = plan_result(p, devices, present, {}, detail if detail_rc == 0 else "")
    if state["action"] == "skip":
        return state
    if state["action"] != "exists" or state["array_device"] != p["device"] or not mdadm:
        return None  # probes to make, or an array under another name: the modules decide
    return state if _filesystem_in_place(p, sections, files, parse_export(detail), fstab) else None


def _filesystem_in_place(p: Mapping[str, Any], sections: Mapping[str, tuple[int, str]], files: str,
                         detail: Mapping[str, str], fstab_path: str) -> bool:
    """The action's file-system steps would change nothing: the file system is there
    (``filesystem``), mdadm.conf holds the array's line (``lineinfile``), fstab its mount
    (``mount``), the mount point is mounted and has its mode (``mount``, ``file``)."""
    fs_rc, fstype = sections["fstype"]
    if fs_rc != 0 or fstype.strip() != p["filesystem"]:
        return False
    blkid_rc, blkid = sections["blkid"]
    fs_uuid = parse_export(blkid).get("UUID") if blkid_rc == 0 else None
    md_uuid = detail.get("MD_UUID")
    mode = _octal_mode(p["mount_mode"])
    if not fs_uuid or not md_uuid or mode is None:
        return False
    read = parse_read(files, [p["mdadm_conf"], p["mount_point"], fstab_path], users=("root",), groups=("root",))
    if read is None:
        return False
    states, owners = read
    root, root_group = owners.get("root"), owners.get("group:root")
    if root is None or root_group is None:
        return False
    conf = mdadm_conf_line(p["device"], md_uuid)
    fstab = states[fstab_path]
    mounted_rc, mounted = sections["mounted"]
    return (lineinfile_unchanged(states[p["mdadm_conf"]], conf["regexp"], conf["line"], root[0], root_group[0], 0o644)
            and fstab.kind == "file" and fstab.text is not None
            and fstab_unchanged(fstab.text, p["mount_point"], f"UUID={fs_uuid}", p["filesystem"],
                                mount_options(p["mount_options"]))
            and mounted_rc == 0 and _is_mount(mounted)
            and states[p["mount_point"]].kind == "dir" and states[p["mount_point"]].mode == mode)


def _is_mount(stat_lines: str) -> bool:
    """``ansible.module_utils.ismount``: not a symlink, and another device than its parent or
    the same inode (the root)."""
    rows = [line.rsplit(" ", 2) for line in stat_lines.splitlines()]
    if len(rows) != 2 or any(len(r) != 3 for r in rows) or rows[0][0] == "symbolic link":
        return False
    (_kind, dev1, ino1), (_kind2, dev2, ino2) = rows
    return dev1 != dev2 or ino1 == ino2
