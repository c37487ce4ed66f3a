# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The stage's rerun in one shell command: ``azcopy --version`` and a digest of the stage
folder, compared on the controller with what the plan puts there.

On a rerun a node-local stage folder normally holds exactly this node's shard and its
manifest, and azcopy runs as pinned: the ``azcopy_stage`` module would fetch, remove and
write nothing, yet a module run costs the node about 0.2 s of CPU (bench/task_kinds_bench.py).
:func:`read_command` prints the probe's output and one SHA-256 over the folder's sorted
listing (type, size, path of every entry, made by ``find`` on the node, so its size does not
grow with the shard) and over the manifest. :func:`unchanged_outcome` computes the same two
digests from the plan, with the same functions the module writes the manifest with, and
where they match returns the module's own result for "nothing to do", else None: the module
runs, as before, and surveys file by file.

Only where the answer is certain without looking at files one by one: a listing in the plan
with every file's size, ``verify: size``, node-local storage (a shared folder holds the other
nodes' files too), azcopy as pinned, a SAS without problems. Anything else is None.

Standard library only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import shlex
import time
from collections.abc import Mapping
from typing import Any, Optional

from .azcopy_cmd import auth_argument_spec, auth_env
from .azcopy_files import MANIFEST_DIRNAME, VERIFY_MODES, ExpectedFile
from .azcopy_install import install_decision
from .azcopy_model import predict_node, rates_from
from .azcopy_sas import check_sas
from .azcopy_sync import manifest_text, stage_result

MARK = "@@amlhpc-stage"

# The module's options (plugins/modules/azcopy_stage.py); its action validates a task against
# the same spec before it reads the node.
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "azcopy": {"type": "path", "default": "azcopy"},
    "account_url": {"type": "str", "required": True},
    "container": {"type": "str", "required": True},
    "prefix": {"type": "str", "default": ""},
    **auth_argument_spec(),
    "dest": {"type": "path", "required": True},
    "rank": {"type": "int"},
    "version": {"type": "str", "default": ""},
    "install": {"type": "bool", "default": True},
    "src": {"type": "str", "default": ""},
    "shard": {"type": "dict", "required": True},
    "handoff": {"type": "dict"},
    "shared": {"type": "bool", "default": True},
    "verify": {"type": "str", "default": "size", "choices": list(VERIFY_MODES)},
    "prune": {"type": "bool", "default": False},
    "prune_most": {"type": "bool", "default": False},
    "decompress": {"type": "bool", "default": True},
    "cap_mbps": {"type": "float", "default": 0},
    "timeout": {"type": "int", "default": 0},
    "timeout_margin": {"type": "float", "default": 3.0},
    "stall_seconds": {"type": "int", "default": 60},
    "progress_file": {"type": "path", "default": ""},
    "model": {"type": "dict", "default": {}},
}
REQUIRED_IF = [("auth", "sas", ("sas",)), ("auth", "service_principal", ("tenant_id", "client_id", "client_secret"))]


def expected_files(shard: Mapping[str, Any]) -> Optional[list[ExpectedFile]]:
    """The plan's listing of this node's files (None: the plan has no listing)."""
    rows = shard.get("expected")
    if rows is None:
        return None
    return [ExpectedFile(r["name"], r.get("raw_size"), bool(r.get("gzip")), r.get("sha256") or None, r.get("size"))
            for r in rows]


def prediction_for(result: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any]:
    """The staging-time model's prediction for what this run fetched (empty when nothing was)."""
    if not result.get("fetched"):
        return {}
    model = dict(model or {})
    nodes = int(model.pop("nodes", 1) or 1)
    rates = rates_from(model)
    wire = result.get("fetched_planned_bytes")
    wire = result["bytes_over_wire"] if wire is None else wire
    raw = result.get("fetched_planned_raw_bytes")
    out = predict_node(int(wire), None if raw is None else int(raw), rates, nodes=nodes, wire_total=int(wire) * nodes)
    out.update({"wire_bytes": int(wire), "raw_bytes": raw})
    return out


def summary_line(result: Mapping[str, Any]) -> str:
    """The stage's one line for the report."""
    pred = result.get("prediction") or {}
    text = (f"{result['files']} files, {result['fetched']} fetched ({result['repaired_count']} repaired), "
            f"{result['gone_count']} gone ({result['removed'] - result.get('handed_count', 0)} removed); "
            f"{result['seconds']:g} s measured")
    if pred:
        text += f", {pred['seconds']:g} s predicted ({pred['bottleneck']})"
    if result.get("fetched_files"):
        text += "; fetched: " + ", ".join(result["fetched_files"]) + (
            f" and {result['fetched'] - len(result['fetched_files'])} more"
            if result["fetched"] > len(result["fetched_files"]) else "")
    if result.get("repaired"):
        text += "; repaired: " + ", ".join(result["repaired"]) + (
            f" and {result['repaired_count'] - len(result['repaired'])} more"
            if result["repaired_count"] > len(result["repaired"]) else "")
    if result.get("gone"):
        text += "; gone: " + ", ".join(result["gone"]) + (
            f" and {result['gone_count'] - len(result['gone'])} more" if result["gone_count"] > len(result["gone"]) else "")
    if result.get("handed_count"):
        text += f"; {result['handed_count']} handed to other nodes (removed)"
    if result.get("removed_files"):
        text += "; removed: " + ", ".join(result["removed_files"]) + (
            f" and {result['removed'] - len(result['removed_files'])} more"
            if result["removed"] > len(result["removed_files"]) else "")
    return text


def _rank(p: Mapping[str, Any]) -> Optional[int]:
    rank = p["rank"] if p["rank"] is not None else p["shard"].get("rank")
    return None if rank is None else int(rank)


def read_command(p: Mapping[str, Any]) -> Optional[str]:
    """One POSIX shell command printing the stage folder's mode, ``<azcopy> --version``'s exit
    status and output (base64; with ``version`` set) and the SHA-256 of the folder's sorted
    listing and of this rank's manifest. None where the answer needs more than that (see
    the module docstring): the module runs."""
    rank = _rank(p)
    if rank is None or p["shared"] or p["verify"] != "size" or expected_files(p["shard"]) is None:
        return None
    dest = shlex.quote(p["dest"])
    manifest = shlex.quote(f"{p['dest']}/{MANIFEST_DIRNAME}/{rank}.json")
    steps = [
        "export LC_ALL=C",
        f'for t in find sort sha256sum base64 mktemp stat; do command -v "$t" >/dev/null 2>&1 || '
        f'{{ echo "{MARK} missing $t"; exit 0; }}; done',
        f'if [ -d {dest} ]; then echo "{MARK} dir $(stat -L -c %a {dest})"; else echo "{MARK} dir none"; fi',
    ]
    if p["version"]:
        steps.append(
            f'o=$(mktemp) && e=$(mktemp) && {{ {shlex.quote(p["azcopy"])} --version >"$o" 2>"$e"; '
            f'echo "{MARK} probe $?"; base64 -w0 <"$o"; echo; base64 -w0 <"$e"; echo; rm -f "$o" "$e"; }}')
    # Every entry but the progress file a fetch leaves and the stages' locks: d PATH for a
    # folder, f SIZE PATH for a file.
    steps.append(
        f'echo "{MARK} list $(cd {dest} 2>/dev/null && find . -mindepth 1 '
        f"! -path './{MANIFEST_DIRNAME}/*.progress.json' ! -path './{MANIFEST_DIRNAME}/*.lock' "
        "\\( -type d -printf 'd %P\\n' -o -type f -printf 'f %s %P\\n' -o -printf 'o %P\\n' \\) "
        '| sort | sha256sum)"')
    steps.append(f'echo "{MARK} manifest $(sha256sum <{manifest} 2>/dev/null)"')
    return "; ".join(steps)


def listing_digest(expected: list[ExpectedFile], decompress: bool, rank: int) -> Optional[tuple[str, str]]:
    """``(listing digest, manifest digest)`` of a node-local stage folder that holds exactly
    this shard, each file under its staged name, and its manifest; None when a file's size
    is not in the plan."""
    if any(e.raw_size is None for e in expected):
        return None
    files = {e.staged_name(decompress): int(e.raw_size) for e in expected}  # type: ignore[arg-type]
    manifest = manifest_text(files).encode("utf-8")
    manifest_name = f"{MANIFEST_DIRNAME}/{rank}.json"
    lines = {f"f {size} {name}" for name, size in files.items()}
    lines.add(f"f {len(manifest)} {manifest_name}")
    for name in [*files, manifest_name]:
        parts = name.split("/")[:-1]
        lines.update(f"d {'/'.join(parts[:i])}" for i in range(1, len(parts) + 1))
    listing = "".join(f"{line}\n" for line in sorted(lines, key=lambda x: x.encode("utf-8")))
    return hashlib.sha256(listing.encode("utf-8")).hexdigest(), hashlib.sha256(manifest).hexdigest()


def parse_read(stdout: str, version: bool) -> Optional[dict[str, Any]]:
    """``{mode, probe: (rc, stdout, stderr) or None, listing, manifest}`` from
    :func:`read_command`'s output; None when it is not what that prints."""
    lines = stdout.replace("\r\n", "\n").strip("\n").split("\n")
    try:
        head = lines.pop(0).split(" ")
        if head[:2] != [MARK, "dir"] or len(head) != 3 or head[2] == "none":
            return None
        out: dict[str, Any] = {"mode": int(head[2], 8), "probe": None}
        if version:
            probe = lines.pop(0).split(" ")
            if probe[:2] != [MARK, "probe"] or len(probe) != 3:
                return None
            stdout = base64.b64decode(lines.pop(0), validate=True).decode("utf-8", "surrogateescape")
            stderr = base64.b64decode(lines.pop(0), validate=True).decode("utf-8", "surrogateescape")
            out["probe"] = (int(probe[2]), stdout.rstrip("\r\n"), stderr.rstrip("\r\n"))
        for key in ("listing", "manifest"):
            fields = lines.pop(0).split(" ")
            if fields[:2] != [MARK, "list" if key == "listing" else key] or len(fields) < 3:
                return None
            out[key] = fields[2]
    except (IndexError, ValueError, binascii.Error):
        return None
    return out if not lines else None


def unchanged_outcome(p: Mapping[str, Any], stdout: str, *, check_mode: bool,
                      started: float) -> Optional[dict[str, Any]]:
    """The module's result where the read shows it would fetch, remove and write nothing:
    the folder there with mode 0755, azcopy as pinned, the folder's listing and manifest
    exactly the plan's. None otherwise (the module runs); ``started`` is when the task began
    (``time.monotonic()``), for the measured seconds."""
    rank, expected = _rank(p), expected_files(p["shard"])
    read = parse_read(stdout, bool(p["version"]))
    if read is None or rank is None or expected is None or read["mode"] != 0o755:
        return None
    sas = (p["sas"] or "") if p["auth"] == "sas" else ""
    warnings: list[str] = []
    if p["auth"] == "sas":
        check = check_sas(sas, "rl")
        if check.errors:
            return None  # the module fails, in its own words
        warnings = list(check.warnings)
    try:
        auth_env(p["auth"], msi_client_id=p["msi_client_id"], tenant_id=p["tenant_id"], client_id=p["client_id"],
                 client_secret=p["client_secret"] or "")
    except ValueError:
        return None
    probed: dict[str, Any] = {}
    if p["version"]:
        rc, out, err = read["probe"]
        decision = install_decision(install=p["install"], version=p["version"], src=p["src"], path=p["azcopy"],
                                    rc=rc, stdout=out, stderr=err)
        if decision["error"] or decision["needed"] or rc != 0:
            return None
        probed = {"needed": False, "src_kind": decision["src_kind"], "probe": {"rc": rc, "stdout": out, "stderr": err}}
    if (read["listing"], read["manifest"]) != listing_digest(expected, p["decompress"], rank):
        return None
    extra: dict[str, Any] = {"warnings": warnings} if warnings else {}
    if check_mode:
        return {"changed": False, "would_fetch": 0, "gone": [], "gone_count": 0, "handed": [], "handed_count": 0,
                "sas_warnings": warnings, **probed, **extra}
    files = {e.staged_name(p["decompress"]): int(e.raw_size) for e in expected}  # type: ignore[arg-type]
    result = stage_result(files, seconds=time.monotonic() - started, verify=p["verify"], progress=[],
                          fetched_planned_bytes=0, fetched_planned_raw_bytes=0, skipped_existing=len(expected))
    result["prediction"] = prediction_for(result, p["model"])
    result["summary"] = summary_line(result)
    return {"sas_warnings": warnings, **result, **probed, **extra}
