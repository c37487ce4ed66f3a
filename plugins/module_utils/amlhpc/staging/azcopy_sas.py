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
import ipaddress
import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import parse_qs, quote, quote_plus, unquote, unquote_plus, urlsplit

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
# Names whose value is a secret, and the length of that value once percent-decoded: a SAS's
# signature and a SharedKey signature are an HMAC-SHA256 in base64 (44 characters), a storage
# account key is 64 bytes in base64 (88). The value is followed across a line break, spaces or an
# escaped line break (a SAS pasted in two lines, a message that prints it with repr or JSON) until
# it has that many characters, so no part of it is left after the break.
_SECRET_NAMES = {"sig": 44, "accountkey": 88, "sharedkey": 44}
_NAME_RE = re.compile(
    r"""(?ix)
    (?: (?<![A-Za-z0-9_]) | (?<=%[0-9A-Fa-f]{2}) | (?<=%25[0-9A-Fa-f]{2}) )  # after an encoded ? & ;
    (?: (?P<name>sig|accountkey) (?P<sep> = | %(?:25)*3d | ["']? \s* : \s* \[? \s* ["']? )
      | (?P<shared>sharedkey(?:lite)? \s+ [^\s:]+ (?: : | %(?:25)*3a ))
    )""")
_VALUE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")
_BREAK_RE = r"(?:\\+[nrt ]|\\?\r?\n|[ \t]|%(?:25)*(?:0[aAdD9]|20))+"
_BREAK = re.compile(_BREAK_RE)
# A percent escape (also one encoded again, %25XX), a line break allowed inside it.
_PERCENT = re.compile(rf"%(?:{_BREAK_RE})?(?:25(?:{_BREAK_RE})?)*([0-9A-Fa-f])(?:{_BREAK_RE})?([0-9A-Fa-f])")
REDACTED = "REDACTED"

SAS_ARGV_WARNING = ("stage_auth is 'sas': azcopy takes a SAS only in its command line, so the token is readable "
                    "by local users of every node through ps while the stage runs. Use stage_auth: "
                    "managed_identity (the cluster's identity) to stage with no token at all.")
# Azurite's development account, whose key Azurite's documentation publishes: a SAS it signs
# protects nothing (the local default's blob store, on 127.0.0.1).
DEVELOPMENT_ACCOUNT = "devstoreaccount1"


def _loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def sas_argv_warning(auth: str, account_url: str) -> str | None:
    """The warning a stage that authenticates with a SAS gets (:data:`SAS_ARGV_WARNING`), or None:
    no SAS, or a SAS of Azurite's development account on a loopback address (path-style URL
    ``http://127.0.0.1:10000/devstoreaccount1``), whose key is public, so a warning there names a
    risk nobody can act on."""
    if auth != "sas":
        return None
    parts = urlsplit(account_url or "")
    host = (parts.hostname or "").lower()
    account = parts.path.strip("/").split("/", 1)[0]
    if _loopback_host(host) and account == DEVELOPMENT_ACCOUNT:
        return None
    return SAS_ARGV_WARNING


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


def _value_end(text: str, start: int, length: int) -> int:
    """Where the secret value that starts at ``start`` ends: ``length`` characters once
    percent-decoded, read across line breaks, spaces and escaped line breaks while it is not
    complete (base64 padding ends it); any other character ends it too."""
    count, i, end, last = 0, start, start, ""
    while i < len(text) and count < length:
        char = text[i]
        if char in _VALUE:
            count, i, end, last = count + 1, i + 1, i + 1, char
            continue
        brk = _BREAK.match(text, i)
        if brk:
            if last == "=":
                break
            i = brk.end()
            continue
        pct = _PERCENT.match(text, i)
        decoded = chr(int(pct.group(1) + pct.group(2), 16)) if pct else ""
        if decoded in _VALUE and decoded:
            count, i, end, last = count + 1, pct.end(), pct.end(), decoded
            continue
        break
    return end


def _redact_values(text: str) -> str:
    """Every value of a secret name (``sig=``, ``AccountKey=``, ``SharedKey <account>:``), in
    any case, percent-encoded or not, written as a query field, a connection string field, a
    header, or a JSON/Python/YAML mapping entry, replaced by ``REDACTED``."""
    out, pos = [], 0
    for match in _NAME_RE.finditer(text):
        if match.start() < pos:
            continue
        name = (match.group("name") or "sharedkey").lower()
        end = _value_end(text, match.end(), _SECRET_NAMES[name])
        if end == match.end():
            continue
        out.append(text[pos:match.end()] + REDACTED)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _forms(secret: str) -> set[str]:
    """The ways a message may show ``secret``: as it is, its parts between line breaks or
    spaces, each percent-encoded (once, twice, as a form field), percent-decoded, and escaped
    the way repr and JSON escape it."""
    parts = {secret, secret.strip(), *(p for p in re.split(r"[\s\x00-\x1f]+", secret) if len(p) >= 6)}
    out = set()
    for part in parts:
        for form in (part, unquote(part), unquote_plus(part)):
            out.update({form, quote(form, safe=""), quote(form, safe="/:=&?"), quote_plus(form),
                        quote(quote(form, safe=""), safe=""), json.dumps(form)[1:-1], repr(form)[1:-1],
                        shlex.quote(form)})
    return {f for f in out if len(f) >= 6}


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret it may carry replaced by ``REDACTED``: each of ``secrets``
    (8 characters or more) in every form a message may show it (:func:`_forms`), then every
    value of a SAS signature (``sig=``), an account key (``AccountKey=``) or a SharedKey
    signature, whatever the shape: any case, percent-encoded once or twice, in a query, a
    connection string (``SharedAccessSignature=`` holds a SAS), a header or a printed mapping,
    and across a line break or spaces inside it. The one redaction every path uses."""
    text = str(text)
    forms: set[str] = set()
    for secret in secrets:
        if secret and len(str(secret)) >= 8:
            forms |= _forms(str(secret))
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return _redact_values(text)


def sas_layout_error(sas: str) -> str | None:
    """A SAS with a line break, a space or another control character in it (a token pasted over
    two lines): the sentence that refuses it, naming where, never the value."""
    for i, char in enumerate(sas):
        if char.isspace() or ord(char) < 32 or ord(char) == 127:
            what = "a line break" if char in "\r\n" else "a space" if char == " " else "a control character"
            where = "at its end" if not sas[i:].strip() else "at its start" if not sas[:i].strip() else \
                f"after character {i}"
            return (f"The SAS token has {what} in it ({where}): paste it again as one line, with no line break "
                    "or space, as the portal or `az storage container generate-sas` prints it.")
    return None


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
    layout = sas_layout_error(sas)
    if layout:
        return SasCheck(permissions="", expiry=None, errors=[layout])
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
