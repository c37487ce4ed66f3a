# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""SAS tokens for azcopy: signing, redaction, parsing and the checks made before a job starts.

Standard library only. Used by the stage module, the shard planner (action plugin), the
blob listing, the blob_sas lookup and the training job's staging hook.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import parse_qs, quote

SAS_PERMISSION_NAMES = {
    "r": "read", "a": "add", "c": "create", "w": "write", "d": "delete", "x": "delete version",
    "y": "permanent delete", "l": "list", "t": "tags", "f": "filter", "m": "move", "e": "execute",
    "o": "ownership", "p": "permissions", "i": "set immutability policy",
}
# The service's order of a container SAS's permission letters (azure-storage-blob's
# ContainerSasPermissions), and the signed version: the one azure-storage-blob 12.31 signs with,
# which Azure Storage and the Azurite of requirements-test/package.json accept.
CONTAINER_PERMISSION_ORDER = "racwdxyltfmei"
SAS_VERSION = "2026-10-06"
_SIG_RE = re.compile(r"(?i)(sig=)[^&\s\"'\\]+")


def _utc(value: datetime) -> str:
    if value.utcoffset() is not None:
        value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def container_sas(account: str, container: str, key: str, *, permission: str, start: datetime,
                  expiry: datetime, version: str = SAS_VERSION) -> str:
    """A service SAS for ``container``, signed with the storage account ``key`` (base64), as
    azure-storage-blob's ``generate_container_sas`` makes it (the same token for the same
    inputs), without importing the Azure SDK: the string to sign of a container SAS
    (permissions, start, expiry, ``/blob/<account>/<container>``, identifier, IP, protocol,
    version, resource ``c``, snapshot time, encryption scope, five response headers), its
    HMAC-SHA256 in base64. Naive times are UTC. Refuses a permission letter a container SAS
    does not have, an empty container and a key that is not base64, by name."""
    if not container:
        raise ValueError("a container SAS needs a container name")
    unknown = sorted(set(permission) - set(CONTAINER_PERMISSION_ORDER))
    if unknown or not permission:
        raise ValueError(f"container SAS permission {', '.join(repr(u) for u in unknown) or '(empty)'}: "
                         f"use letters of {CONTAINER_PERMISSION_ORDER!r}, e.g. 'rl' to stage")
    try:
        secret = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("the storage account key is not base64 (copy it from the account's Access keys)") from exc
    fields = {"st": _utc(start), "se": _utc(expiry),
              "sp": "".join(c for c in CONTAINER_PERMISSION_ORDER if c in permission), "sv": version, "sr": "c"}
    string_to_sign = "\n".join([fields["sp"], fields["st"], fields["se"], f"/blob/{account}/{container}",
                                "", "", "", version, "c", "", "", "", "", "", "", ""])
    fields["sig"] = base64.b64encode(hmac.new(secret, string_to_sign.encode("utf-8"), hashlib.sha256).digest()).decode()
    return "&".join(f"{k}={quote(v)}" for k, v in fields.items())


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every ``sig=`` value and each of ``secrets`` replaced by ``REDACTED``."""
    for s in secrets:
        if s and len(s) >= 8:
            text = text.replace(s, "REDACTED")
    return _SIG_RE.sub(r"\1REDACTED", text)


def parse_sas(sas: str) -> dict[str, str]:
    """The query fields of a SAS token (leading ``?`` allowed); the last value wins."""
    token = sas.strip().lstrip("?")
    return {k: v[-1] for k, v in parse_qs(token, keep_blank_values=True).items()}


def _parse_time(value: str) -> datetime | None:
    value = value.strip()
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%MZ", "%Y-%m-%d"):
        try:
            return datetime.strptime(value, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return None


@dataclass
class SasCheck:
    permissions: str
    expiry: datetime | None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_sas(sas: str, needed: str = "rl", now: datetime | None = None) -> SasCheck:
    """Problems with a SAS token for a job that needs ``needed`` permissions.

    errors: no signature, expired, not yet valid, a needed permission missing.
    warnings: permissions beyond ``needed`` (a staging token should be read + list only).
    """
    now = now or datetime.now(timezone.utc)
    fields = parse_sas(sas)
    perms = fields.get("sp", "")
    expiry = _parse_time(fields["se"]) if "se" in fields else None
    check = SasCheck(permissions=perms, expiry=expiry)
    if not fields.get("sig"):
        check.errors.append("The SAS token has no signature (sig=): pass the whole token, as the portal or "
                            "`az storage container generate-sas` prints it.")
        return check
    if "se" in fields and expiry is None:
        check.errors.append(f"The SAS token's expiry se={fields['se']} is not a date azcopy understands.")
    elif expiry is not None and expiry <= now:
        check.errors.append(
            f"The SAS token expired at {expiry:%Y-%m-%d %H:%M} UTC: generate a new one (read and list) "
            "and run again.")
    start = _parse_time(fields["st"]) if "st" in fields else None
    if start is not None and start > now:
        check.errors.append(f"The SAS token is not valid before {start:%Y-%m-%d %H:%M} UTC (st=): "
                            "check the clock or the token's start time.")
    if perms or "sp" in fields:
        missing = [p for p in needed if p not in perms]
        if missing:
            names = ", ".join(SAS_PERMISSION_NAMES.get(p, p) for p in missing)
            check.errors.append(f"The SAS token (sp={perms}) lacks {names} permission, which this job needs: "
                                f"generate one with sp={needed}.")
        extra = [p for p in perms if p not in needed]
        if extra:
            names = ", ".join(SAS_PERMISSION_NAMES.get(p, p) for p in extra)
            check.warnings.append(f"The SAS token grants more than {'read and list' if needed == 'rl' else needed} "
                                  f"(sp={perms}: also {names}): a staging token should be sp={needed} only.")
    return check
