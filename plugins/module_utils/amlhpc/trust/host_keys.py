# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""SSH host keys as the pins hold them (``type base64``): fingerprints as ssh-keygen prints
them, and which offered keys differ from a pin. Standard library only: the inventory plugin
(known_hosts.py) and the ssh_trust role (ssh_trust.py, shipped to the nodes) share it."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable


def key_fingerprint(key: str) -> str:
    """``SHA256:...`` of a public key (``type base64`` or the base64 alone), as ``ssh-keygen -l``
    prints it; a key that is not base64 is hashed as its text (it then matches nothing real)."""
    blob_text = key.split()[-1] if key.split() else ""
    try:
        blob = base64.b64decode(blob_text, validate=True)
    except (binascii.Error, ValueError):
        blob = blob_text.encode()
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def describe_keys(keys: Iterable[str]) -> str:
    """``ssh-ed25519 SHA256:..., ssh-rsa SHA256:...`` for pinned keys (``type base64``)."""
    return ", ".join(f"{k.split()[0]} {key_fingerprint(k)}" for k in sorted(keys) if k.split())


def normal_keys(lines: Iterable[str]) -> list[str]:
    """``type base64`` of key lines (``[host] type base64 [comment]`` or ``type base64``), sorted, unique."""
    out = set()
    for line in lines:
        fields = line.split()
        if len(fields) >= 3:
            fields = fields[1:3]
        if len(fields) == 2:
            out.add(" ".join(fields))
    return sorted(out)


def changed_keys(pinned: Iterable[str], offered: Iterable[str]) -> list[str]:
    """The offered keys (``type base64``) of a type the pin holds with another key: what ssh
    refuses as a changed host key. A type the pin lacks is not trusted either (ssh with strict
    checking asks for the pinned types), so it is not a change."""
    by_type: dict[str, set[str]] = {}
    for key in pinned:
        kind, _sep, blob = key.partition(" ")
        by_type.setdefault(kind, set()).add(blob)
    out = []
    for key in offered:
        kind, _sep, blob = key.partition(" ")
        if kind in by_type and blob not in by_type[kind]:
            out.append(key)
    return sorted(out)
