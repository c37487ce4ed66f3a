# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Pure logic of the ssh_trust role: the nodefile and the known_hosts entries.

The head node's root key is trusted by every node; every node knows every node's host
keys, scanned over the private IPs with ``ssh-keyscan``. These functions turn inventory
data and scan output into what the role writes, and say what is missing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

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
