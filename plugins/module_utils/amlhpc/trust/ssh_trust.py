# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Pure logic of the ssh_trust role: the nodefile and the known_hosts entries.

The head node's root key is trusted by every node; every node knows every node's host
keys, scanned over the private IPs with ``ssh-keyscan``. These functions turn inventory
data and scan output into what the role writes, and say what is missing.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from .host_keys import changed_keys, describe_keys

# Host key types ssh-keyscan can ask for (``-t``) and the prefix of the key type names
# they come back as (an ECDSA key may be nistp256, nistp384 or nistp521).
KEY_TYPES = {
    "rsa": "ssh-rsa",
    "ecdsa": "ecdsa-sha2-",
    "ed25519": "ssh-ed25519",
}


def nodefile_lines(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Private IPs of one cluster's nodes in rank order, one per line of the nodefile.

    ``nodes`` holds hostvars (as ``amlhpc_cluster_nodes`` returns them). Raises
    ``ValueError`` with a sentence when a node has no usable IP, a rank repeats, or
    nodes of more than one cluster are mixed.
    """
    nodes = list(nodes)
    clusters = sorted({str(n.get("aml_cluster", "")) for n in nodes})
    if len(clusters) > 1:
        raise ValueError(f"one nodefile per cluster, got nodes of clusters {', '.join(clusters)}")
    ranked = sorted(nodes, key=lambda n: n.get("aml_node_rank", 0))
    ranks = [n.get("aml_node_rank") for n in ranked]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"aml_node_rank repeats in cluster '{clusters[0]}': {ranks}")
    lines = []
    for node in ranked:
        ip = str(node.get("aml_private_ip") or "")
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            name = node.get("inventory_hostname", "?")
            raise ValueError(f"host {name} has no valid aml_private_ip ({ip!r}): the nodefile "
                             "needs the private IP of every node") from None
        lines.append(ip)
    return lines


def parse_keyscan(output: str, key_types: Iterable[str] = tuple(KEY_TYPES)) -> list[tuple[str, str, str]]:
    """(host, key type, base64 key) for each key line of ``ssh-keyscan`` output.

    Comment lines (``# 10.0.0.4:22 SSH-2.0-OpenSSH_9.2``) and key types not asked for
    are dropped. Duplicates are kept once.
    """
    wanted = tuple(KEY_TYPES.get(t, t) for t in key_types)
    seen: set[tuple[str, str, str]] = set()
    out = []
    for raw in output.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 3 or not parts[1].startswith(wanted):
            continue
        entry = (parts[0], parts[1], parts[2])
        if entry not in seen:
            seen.add(entry)
            out.append(entry)
    return out


def known_hosts_block(output: str, expected_hosts: Iterable[str],
                      key_types: Iterable[str] = tuple(KEY_TYPES)) -> dict[str, Any]:
    """The known_hosts lines for ``expected_hosts`` from ``ssh-keyscan`` output.

    Returns ``{"lines": [...], "missing": [...]}``: lines sorted by (host, key type) so
    that the same keys always give the same file (a second run changes nothing), and
    the expected hosts that answered with no key at all.
    """
    expected = [str(h) for h in expected_hosts]
    entries = [e for e in parse_keyscan(output, key_types) if e[0] in expected]
    order = {h: i for i, h in enumerate(expected)}
    entries.sort(key=lambda e: (order[e[0]], e[1], e[2]))
    found = {e[0] for e in entries}
    return {
        "lines": [" ".join(e) for e in entries],
        "missing": [h for h in expected if h not in found],
    }


def cluster_plan(nodes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per cluster: its head (the node of lowest rank) and its nodefile lines.

    ``nodes`` are hostvars of the nodes of one or more clusters (as ``amlhpc_cluster_nodes``
    returns them). Computed once per run on the controller, so each host reads its cluster's
    entry instead of walking every node's hostvars itself (N hosts x N nodes).
    """
    by_cluster: dict[str, list[Mapping[str, Any]]] = {}
    for n in nodes:
        by_cluster.setdefault(str(n.get("aml_cluster", "")), []).append(n)
    plan = {}
    for cluster, members in sorted(by_cluster.items()):
        ranked = sorted(members, key=lambda n: n.get("aml_node_rank", 0))
        plan[cluster] = {"cluster": cluster, "head": ranked[0]["inventory_hostname"], "ips": nodefile_lines(ranked),
                         "hosts": [n["inventory_hostname"] for n in ranked],
                         # Where the controller's ssh checked each node's host keys (the
                         # inventory plugin's known_hosts file, patterns [address]:port).
                         "known_hosts_file": str(ranked[0].get("aml_known_hosts_file") or ""),
                         "endpoints": [endpoint(n) for n in ranked],
                         # Each node id's pinned host keys (the inventory plugin's aml_host_keys,
                         # "type base64"; empty where the inventory pins none).
                         "node_ids": [str(n.get("aml_node_id") or "") for n in ranked],
                         "pins": [list(n.get("aml_host_keys") or []) for n in ranked]}
    return plan


def endpoint(node: Mapping[str, Any]) -> str:
    """The known_hosts pattern of the address the controller reaches ``node`` at (its hostvars):
    ``[ansible_host]:ansible_port``, or ``ansible_host`` on port 22; empty without an address."""
    address = str(node.get("ansible_host") or "")
    try:
        port = int(node.get("ansible_port") or 22)
    except (TypeError, ValueError):
        return ""
    if not address:
        return ""
    return address if port == 22 else f"[{address}]:{port}"


def controller_host_keys(known_hosts: str, endpoints: Iterable[str], ips: Iterable[str],
                         key_types: Iterable[str] = tuple(KEY_TYPES)) -> dict[str, Any]:
    """The cluster's known_hosts block (:func:`known_hosts_block`'s shape, the same lines) from
    the controller's known_hosts text: each node's keys recorded for the endpoint the controller
    reaches it at (``endpoints[i]``), written for its private IP (``ips[i]``).

    These are the keys the controller's ssh checked on every connection of the run (strict host
    key checking: the inventory plugin's file), the same sshd that answers on the private IP.
    Hashed entries and marker lines (``@cert-authority``, ``@revoked``) give nothing; a node
    without a recorded key of the asked types is in ``missing`` (the role scans that cluster).
    """
    recorded: dict[str, list[tuple[str, str]]] = {}
    for raw in (known_hosts or "").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "@")):
            continue
        parts = line.split()
        if len(parts) < 3:
            continue
        for pattern in parts[0].split(","):
            recorded.setdefault(pattern, []).append((parts[1], parts[2]))
    scan = [f"{ip} {kind} {key}" for pattern, ip in zip(endpoints, ips) if pattern
            for kind, key in recorded.get(pattern, [])]
    return known_hosts_block("\n".join(scan), list(ips), key_types)


def pinned_host_keys(plan: Mapping[str, Any], key_types: Iterable[str] = tuple(KEY_TYPES)) -> dict[str, Any]:
    """A cluster's known_hosts block (:func:`known_hosts_block`'s shape) from its nodes' pins
    (``plan`` is one cluster of :func:`cluster_plan`): each node id's pinned keys, written for
    its private IP; a node without a pin is in ``missing`` (the head scans that cluster)."""
    ips = list(plan["ips"])
    scan = [f"{ip} {key}" for ip, keys in zip(ips, plan.get("pins") or [[] for _unused in ips]) for key in keys or []]
    return known_hosts_block("\n".join(scan), ips, key_types)


def scanned_host_keys(output: str, plan: Mapping[str, Any],
                      key_types: Iterable[str] = tuple(KEY_TYPES)) -> dict[str, Any]:
    """The head's scan of a cluster held to the pins, as the controller holds its own: a pinned
    node's lines are its pin whatever the scan said, and a scanned key of a pinned type that
    differs is ``refused`` (one sentence per node, naming it and the fix); a node without a pin
    takes the scanned keys (``first_use``, to be named). Keys: ``lines``, ``missing``,
    ``refused``, ``first_use``."""
    ips = list(plan["ips"])
    pins = list(plan.get("pins") or [[] for _unused in ips])
    node_ids = list(plan.get("node_ids") or ["" for _unused in ips])
    scanned: dict[str, list[str]] = {}
    for host, kind, key in parse_keyscan(output, key_types):
        scanned.setdefault(host, []).append(f"{kind} {key}")
    lines, refused, first_use = [], [], []
    for i, ip in enumerate(ips):
        pinned = [k for k in pins[i] if k.split()[0].startswith(tuple(KEY_TYPES.get(t, t) for t in key_types))]
        if pins[i]:
            lines.extend(f"{ip} {key}" for key in pinned)
            offered = changed_keys(pins[i], scanned.get(ip, []))
            if offered:
                refused.append(
                    f"cluster '{plan.get('cluster', '') or ''}': node {plan['hosts'][i]} (node id {node_ids[i]}, {ip}) "
                    f"offers host key {describe_keys(offered)} on its private IP, not its pinned "
                    f"{describe_keys(pins[i])}, so no node trusts it; if this node was re-imaged and you trust it, "
                    f"run once with AMLHPC_KNOWN_HOSTS_REPIN={node_ids[i]} so the inventory pins it again")
        else:
            lines.extend(f"{ip} {key}" for key in scanned.get(ip, []))
            if scanned.get(ip):
                first_use.append(f"{plan['hosts'][i]} ({ip})")
    block = known_hosts_block("\n".join(lines), ips, key_types)
    block.update(refused=refused, first_use=first_use)
    return block


def _key_fields(line: str) -> tuple[str, str] | None:
    """The base64 key and the comment of an authorized_keys line (options aside), or None."""
    parts = line.split()
    for i, part in enumerate(parts):
        if part.startswith(("ssh-", "ecdsa-sha2-", "sk-")) and i + 1 < len(parts):
            return parts[i + 1], " ".join(parts[i + 2:])
    return None


def _key_blob(line: str) -> str | None:
    """The base64 key of an authorized_keys line (options and comment aside), or None."""
    fields = _key_fields(line)
    return fields[0] if fields else None


def authorized_keys_text(current: str, key_line: str, replaces: str = "") -> str:
    """``current`` authorized_keys with ``key_line`` present exactly once.

    A line holding the same key (whatever its options or comment) is replaced in place,
    further copies of it are dropped; otherwise the line is appended. With ``replaces``, a
    line with another key whose comment is ``replaces`` (an earlier head's key of the same
    cluster, under the role's comment) is dropped too, the new line taking the first one's
    place. Other lines stay.
    """
    blob = _key_blob(key_line)
    if blob is None:
        raise ValueError("not an OpenSSH public key line")
    out, placed = [], False
    for line in current.splitlines():
        fields = None if line.lstrip().startswith("#") else _key_fields(line)
        if fields and (fields[0] == blob or (replaces and fields[1] == replaces)):
            if not placed:
                out.append(key_line)
                placed = True
            continue
        out.append(line)
    if not placed:
        out.append(key_line)
    return "\n".join(out) + "\n"


def managed_block_text(current: str, marker: str, lines: Iterable[str]) -> str:
    """``current`` with the block between ``# BEGIN <marker>`` and ``# END <marker>`` set to
    ``lines`` (appended at the end when absent; no lines: the block goes), as
    ansible.builtin.blockinfile writes it."""
    begin, end = f"# BEGIN {marker}", f"# END {marker}"
    lines = list(lines)
    block = [begin, *lines, end] if lines else []
    old = current.splitlines()
    if begin in old and end in old and old.index(begin) < old.index(end):
        i, j = old.index(begin), old.index(end)
        new = old[:i] + block + old[j + 1:]
    else:
        new = old + block
    return "\n".join(new) + "\n" if new else ""


NODE_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "authorized_key": {"type": "str", "default": "", "no_log": False},
    "replaces_comment": {"type": "str", "default": ""},
    "user": {"type": "str", "default": "root"},
    "nodefile": {"type": "path", "required": True},
    "nodefile_lines": {"type": "list", "elements": "str", "required": True},
    "known_hosts": {"type": "path", "required": True},
    "known_hosts_marker": {"type": "str", "required": True},
    "known_hosts_lines": {"type": "list", "elements": "str", "required": True},
}
"""The ssh_trust_node module's options (the module and its action validate against it)."""


def node_read(params: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The paths and users the ssh_trust_node module reads, for ``file_state.read_command``:
    the user's ``.ssh`` folder and authorized_keys (with a key to trust), the nodefile and
    known_hosts with their folders."""
    paths = []
    users = []
    if params["authorized_key"]:
        paths += [f"~{params['user']}/.ssh", f"~{params['user']}/.ssh/authorized_keys"]
        users.append(params["user"])
    paths += [_parent(params["nodefile"]), params["nodefile"], _parent(params["known_hosts"]), params["known_hosts"]]
    return paths, users


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/" if path.startswith("/") else ""


def node_unchanged(params: Mapping[str, Any], stdout: str) -> bool:
    """Whether the ssh_trust_node module would change nothing on the node whose files
    ``stdout`` (``file_state.read_command`` of :func:`node_read`) shows. False also where
    the module would fail or the output is not what the read prints: the module runs then."""
    from ..nodes.file_state import dir_unchanged, file_unchanged, parse_read  # noqa: PLC0415 (the node side never needs it)
    if not (params["nodefile"].startswith("/") and params["known_hosts"].startswith("/")):
        return False
    paths, users = node_read(params)
    read = parse_read(stdout, paths, users)
    if read is None:
        return False
    states, found = read
    got = [states[p] for p in paths]
    if params["authorized_key"]:
        ids = found[params["user"]]
        ssh_dir, keys = got[0], got[1]
        if ids is None or not dir_unchanged(ssh_dir, ids[0], ids[1], 0o700, enforce=False) or keys.kind != "file":
            return False
        try:
            text = authorized_keys_text(keys.text or "", params["authorized_key"], replaces=params["replaces_comment"])
        except ValueError:
            return False
        if not file_unchanged(keys, text, ids[0], ids[1], 0o600):
            return False
    nodefile_dir, nodefile, kh_dir, kh = got[-4:]
    if not (dir_unchanged(nodefile_dir, 0, 0, 0o755)
            and file_unchanged(nodefile, "\n".join(params["nodefile_lines"]) + "\n", 0, 0, 0o644)
            and dir_unchanged(kh_dir, 0, 0, 0o755, enforce=False) and kh.kind == "file"):
        return False
    return file_unchanged(kh, managed_block_text(kh.text or "", params["known_hosts_marker"],
                                                 params["known_hosts_lines"]), 0, 0, 0o644)


# --------------------------------------------------------------------------------------
# The head's key, read in the scan's command
# --------------------------------------------------------------------------------------
# The head's key is made by community.crypto.openssh_keypair, after the file module made its
# folder. On a rerun both find everything as asked, yet cost two module runs on the head
# (about 1.6 s of wall time per run). The scan's command on the head reads what they check
# first (lines starting with HEAD_KEY_MARKER, comments to the scan's parser), and
# head_key_state() says whether the modules have anything to do; where they do, they run.
HEAD_KEY_MARKER = "#amlhpc-head-key "

# sh -c HEAD_KEY_READ sh KEY_PATH SSH-KEYSCAN-ARGS...: the folder's and both files' type,
# mode and owner, the public key derived from the private one (no passphrase: a key that
# needs one is not the role's), and the .pub file; then the scan itself. Errors of the read
# are dropped: whatever is missing leaves the key "not as asked", and the modules run.
HEAD_KEY_READ = (
    'k=$1; shift; '
    '{ for f in "${k%/*}" "$k" "$k.pub"; do printf "stat %s\\n" "$(stat -c "%a %U %G %F" -- "$f" || echo missing)"; done; '
    'printf "derived %s\\n" "$(ssh-keygen -y -P "" -f "$k" </dev/null)"; '
    'printf "pub %s\\n" "$(head -n 1 -- "$k.pub")"; '
    '} 2>/dev/null | sed "s/^/#amlhpc-head-key /"; '
    '[ $# -eq 0 ] || exec ssh-keyscan "$@"'
)

# openssh_keypair's key types, the names their public keys carry, and their sizes in bits.
_KEY_NAMES = {"rsa": ("ssh-rsa",), "dsa": ("ssh-dss",), "ed25519": ("ssh-ed25519",),
              "ecdsa": ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521")}
_ECDSA_BITS = {"ecdsa-sha2-nistp256": 256, "ecdsa-sha2-nistp384": 384, "ecdsa-sha2-nistp521": 521}
# openssh_keypair's default size of each type where the role passes none (ed25519).
_DEFAULT_BITS = {"rsa": 4096, "dsa": 1024, "ecdsa": 256}


def _ssh_string(blob: bytes, pos: int) -> tuple[bytes, int]:
    if pos + 4 > len(blob):
        raise ValueError("truncated key blob")
    size = int.from_bytes(blob[pos:pos + 4], "big")
    if pos + 4 + size > len(blob):
        raise ValueError("truncated key blob")
    return blob[pos + 4:pos + 4 + size], pos + 4 + size


def public_key_bits(key_name: str, data: str) -> int | None:
    """The size in bits of an OpenSSH public key (``type base64``): an RSA key's modulus, an
    ECDSA key's curve, 256 for Ed25519; None where the blob cannot be read."""
    if key_name == "ssh-ed25519":
        return 256
    if key_name in _ECDSA_BITS:
        return _ECDSA_BITS[key_name]
    try:
        blob = base64.b64decode(data, validate=True)
        name, pos = _ssh_string(blob, 0)
        if name.decode("ascii", "replace") != key_name:
            return None
        if key_name == "ssh-rsa":
            _unused, pos = _ssh_string(blob, pos)     # e
            n, pos = _ssh_string(blob, pos)
        elif key_name == "ssh-dss":
            n, pos = _ssh_string(blob, pos)           # p
        else:
            return None
    except (ValueError, binascii.Error):
        return None
    return int.from_bytes(n, "big").bit_length()


def head_key_state(output: str, key_type: str, key_size: int | None, comment: str,
                   owner: str = "root", group: str = "root") -> dict[str, Any]:
    """Whether the head's key is as the role's ``file`` and ``openssh_keypair`` tasks ask, from
    the lines of ``HEAD_KEY_READ`` in ``output`` (the scan's stdout).

    Returns ``{"ready": bool, "public_key": "type base64" (the module's form) or "",
    "why": what differs}``. Ready means both modules would change nothing: the folder a
    directory 0700 root:root; the key and its .pub regular files 0600 root:root (the module
    sets the mode on both); the private key readable without a passphrase, of the asked type
    and size; the .pub file the same key with the asked comment. ``owner``/``group``: the
    role's are root's.
    """
    read: dict[str, list[str]] = {}
    for raw in output.splitlines():
        if raw.startswith(HEAD_KEY_MARKER):
            kind, _unused, rest = raw[len(HEAD_KEY_MARKER):].partition(" ")
            read.setdefault(kind, []).append(rest)

    def not_ready(why: str) -> dict[str, Any]:
        return {"ready": False, "public_key": "", "why": why}

    stats = read.get("stat", [])
    if len(stats) != 3:
        return not_ready("the head's key was not read")
    for what, line, kind, mode in zip(("folder", "key", "public key"), stats,
                                      ("directory", "regular file", "regular file"), ("700", "600", "600")):
        fields = line.split(" ", 3)
        if len(fields) != 4:
            return not_ready(f"the {what} is missing")
        if fields[3] != kind or fields[0] != mode or fields[1:3] != [owner, group]:
            return not_ready(f"the {what} is {fields[3]} {fields[0]} {fields[1]}:{fields[2]}, "
                             f"not {kind} {mode} {owner}:{group}")
    derived = (read.get("derived") or [""])[0].split()
    pub = (read.get("pub") or [""])[0].split(" ", 2)
    if len(derived) < 2:
        return not_ready("the private key cannot be read without a passphrase")
    name, data = derived[0], derived[1]
    if name not in _KEY_NAMES.get(key_type, ()):
        return not_ready(f"the key is {name}, not {key_type}")
    size = public_key_bits(name, data)
    wanted = None if key_type == "ed25519" else (key_size or _DEFAULT_BITS.get(key_type))
    if wanted is not None and size != int(wanted):
        return not_ready(f"the key has {size} bits, not {wanted}")
    if len(pub) < 2 or pub[:2] != [name, data]:
        return not_ready("the .pub file is not the private key's public half")
    if (pub[2] if len(pub) > 2 else "") != comment:
        return not_ready("the .pub file's comment differs")
    return {"ready": True, "public_key": f"{name} {data}", "why": ""}


def head_key_command(key_path: str, scan_argv: Iterable[str]) -> list[str]:
    """The scan's argv on the head: ``HEAD_KEY_READ`` of ``key_path``, then ``ssh-keyscan``
    with ``scan_argv`` (its options and the nodes' IPs); no scan where ``scan_argv`` is empty
    (the cluster's host keys came from the controller)."""
    return ["sh", "-c", HEAD_KEY_READ, "sh", str(key_path), *[str(a) for a in scan_argv]]
