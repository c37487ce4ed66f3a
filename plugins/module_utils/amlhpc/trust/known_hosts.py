# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The controller's known_hosts for AmlCompute nodes, pinned to the nodes' ids.

AmlCompute puts every node of a cluster behind one public address, a NAT port per node
(50000, 50001, ...). When it replaces a node (after a failure, or an idle scale-down and a
scale-up) the new node gets a new node id and a new host key, often at the same port. ``ssh``
then sees "REMOTE HOST IDENTIFICATION HAS CHANGED" for ``[address]:port``, and a node never
seen before makes ``ssh`` ask, which hangs a run under ansible-runner.

The inventory plugin keeps a known_hosts file of its own and, beside it, a record
(``<file>.nodes.json``) that says which node id each ``[address]:port`` stands for and holds
each node id's **pin**: the host keys first seen for that node id. known_hosts is written from
the pins on every read; the pins decide, never the file (which anyone can edit):

* a **known node id** (one with a pin) gets exactly its pinned keys for the endpoint it is
  listed at: lines deleted, truncated, duplicated, emptied or changed by hand (plain, hashed,
  wildcard or ``@cert-authority`` lines that would match the endpoint) are put back from the
  pin with a warning, never scanned and trusted again. Its live keys are scanned only to be
  compared with the pin: a key that differs is named in a warning (and the host var
  ``aml_host_key_refused``), and ssh refuses the node, whatever known_hosts held;
* a **new node id** is scanned (``ssh-keyscan``), its keys are pinned, and a warning names it
  with its fingerprints (trust on first use, said out loud);
* an endpoint that now stands for **another node id** was re-provisioned by AmlCompute: the
  old node's lines go, the new node id is a new node as above, and a warning names it;
* an endpoint **missing from a read** (an empty or partial listing: a cluster scaled to 0, a
  transient answer) keeps its node id and its pinned lines;
* ``known_hosts_repin`` (a list of node ids, the operator's word that such a node was
  re-imaged and is trusted) scans and pins those node ids again.

The same record ties cached facts to node ids: a host name (``<cluster>-<rank>``) whose node
id changed had its cached facts gathered on another machine.

The planning functions here are pure: they take what was read and return what to write.
Running ``ssh-keyscan`` and ``ssh`` and the locked record file are :mod:`.known_hosts_io`'s.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .host_keys import changed_keys, describe_keys, normal_keys

RECORD_SUFFIX = ".nodes.json"
# How many nodes a warning names before it says "and N more" (a first read of 512 nodes).
NAMED_IN_A_WARNING = 8


@dataclass(frozen=True)
class Endpoint:
    """How the controller reaches one node, and which node that is."""

    address: str
    port: int
    node_id: str
    host: str
    cluster: str
    user: str = ""  # ansible_user: with address and port, which ssh ControlPersist master it has

    @property
    def pattern(self) -> str:
        return endpoint_pattern(self.address, self.port)


def endpoint_pattern(address: str, port: int) -> str:
    """The known_hosts host pattern ssh looks up: ``[address]:port``, or ``address`` on port 22."""
    return address if int(port) == 22 else f"[{address}]:{int(port)}"


# ---------------------------------------------------------------------------------------
# known_hosts text, matched as ssh matches it


@functools.lru_cache(maxsize=4096)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower()), re.S)


def _glob(name: str, pattern: str) -> bool:
    """ssh's match_pattern: ``*`` and ``?`` wildcards, everything else literal, no case."""
    return _glob_regex(pattern).fullmatch(name.lower()) is not None


def hosts_field_matches(hosts: str, name: str) -> bool:
    """Whether a known_hosts line's host field (comma list, ``!`` negations, wildcards, or a
    hashed ``|1|salt|hash``) matches ``name`` (``[address]:port`` or ``address``), as ssh
    decides it."""
    if hosts.startswith("|1|"):
        parts = hosts.split("|")
        if len(parts) != 4:
            return False
        try:
            salt, want = base64.b64decode(parts[2], validate=True), base64.b64decode(parts[3], validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), want)
    positive = False
    for pattern in hosts.split(","):
        negated = pattern.startswith("!")
        if _glob(name, pattern[1:] if negated else pattern):
            if negated:
                return False
            positive = True
    return positive


def _line_fields(line: str) -> tuple[str, str, list[str]] | None:
    """(marker, host field, the rest) of a known_hosts line; None for a comment or blank line."""
    fields = line.split()
    if not fields or fields[0].startswith("#"):
        return None
    marker = ""
    if fields[0].startswith("@"):
        marker, fields = fields[0], fields[1:]
    if not fields:
        return marker, "", []
    return marker, fields[0], fields[1:]


_COMPLEX = frozenset("*?|!")


def _simple(hosts: str) -> bool:
    """A host field ssh matches by plain comparison (no wildcard, hash or negation)."""
    return not _COMPLEX.intersection(hosts)


class KnownHostsIndex:
    """A known_hosts text read once, so that many patterns can be looked up: plain lines by
    pattern (no case, as ssh compares), the others (hashed, wildcard, negated) matched as ssh
    matches them. At 512 nodes a read looks up every endpoint; line by line that was
    512 x 1,536 lines, here it is one pass and a dictionary."""

    def __init__(self, text: str) -> None:
        self.plain: dict[str, set[str]] = {}
        self.exact: dict[str, set[str]] = {}
        self.authorities: list[str] = []
        self.others: list[tuple[str, str]] = []
        for line in text.splitlines():
            parsed = _line_fields(line)
            if not parsed or not parsed[1]:
                continue
            marker, hosts, rest = parsed
            if marker == "@cert-authority":
                self.authorities.append(hosts)
            elif not marker and len(rest) >= 2:
                key = " ".join(rest[:2])
                if _simple(hosts):
                    for part in hosts.split(","):
                        self.plain.setdefault(part.lower(), set()).add(key)
                        self.exact.setdefault(part, set()).add(key)
                else:
                    self.others.append((hosts, key))

    def keys(self, pattern: str) -> list[str]:
        """The keys ssh finds for ``pattern`` (marker lines aside)."""
        found = set(self.plain.get(pattern.lower(), ()))
        found.update(key for hosts, key in self.others if hosts_field_matches(hosts, pattern))
        return sorted(found)

    def plain_keys(self, pattern: str) -> list[str]:
        """The keys of the plain lines whose host list names ``pattern`` itself."""
        return sorted(self.exact.get(pattern, ()))

    def authority(self, pattern: str) -> bool:
        """Whether an ``@cert-authority`` line matches ``pattern``."""
        return any(hosts_field_matches(hosts, pattern) for hosts in self.authorities)


def keys_for_pattern(text: str, pattern: str) -> list[str]:
    """The keys (``type base64``) a known_hosts text gives ``pattern``, by ssh's matching
    (hashed and wildcard lines included, marker lines not)."""
    return KnownHostsIndex(text).keys(pattern)


def plain_keys_for_pattern(text: str, pattern: str) -> list[str]:
    """The keys of the plain lines (no marker, no hash, no wildcard) whose host list names ``pattern``."""
    return KnownHostsIndex(text).plain_keys(pattern)


def authority_for(text: str, pattern: str) -> bool:
    """Whether an ``@cert-authority`` line matches ``pattern`` (ssh would then trust any host
    certificate that authority signed for it)."""
    return KnownHostsIndex(text).authority(pattern)


def patterns_in(text: str) -> set[str]:
    """The plain host patterns that have at least one key line in a known_hosts text."""
    out: set[str] = set()
    for line in text.splitlines():
        parsed = _line_fields(line)
        if parsed and parsed[1] and not parsed[1].startswith("|"):
            out.update(parsed[1].split(","))
    return out


def _pattern_order(pattern: str) -> tuple[str, int]:
    match = re.fullmatch(r"\[(.*)\]:(\d+)", pattern)
    return (match.group(1), int(match.group(2))) if match else (pattern, 22)


def pinned_text(text: str, managed: Mapping[str, Iterable[str]]) -> str:
    """``text`` made to give each managed pattern exactly its pinned keys.

    ``managed``: pattern -> pinned keys (``type base64``; empty: no key is trusted there). Every
    line that would make ssh trust a key for a managed pattern (plain, hashed, wildcard,
    ``@cert-authority``, truncated) goes; ``@revoked`` lines, comments and the lines of other
    hosts stay as they are, in their order; the pinned lines follow, by address and port.
    """
    kept = []
    lowered = {pattern.lower() for pattern in managed}
    for line in text.splitlines():
        parsed = _line_fields(line)
        if parsed and parsed[0] != "@revoked" and parsed[1]:
            hosts = parsed[1]
            if (_simple(hosts) and lowered.intersection(h.lower() for h in hosts.split(","))) or (
                    not _simple(hosts) and any(hosts_field_matches(hosts, pattern) for pattern in managed)):
                continue
        kept.append(line)
    for pattern in sorted(managed, key=_pattern_order):
        kept.extend(f"{pattern} {key}" for key in sorted(set(managed[pattern])))
    return "".join(f"{line}\n" for line in kept)


def keys_for(scan_output: str, pattern: str) -> list[str]:
    """The key lines of ``ssh-keyscan`` output that belong to ``pattern`` (sorted, unique)."""
    lines = set()
    for line in scan_output.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not line.startswith("#") and fields[0] == pattern:
            lines.add(" ".join(fields[:3]))
    return sorted(lines)


def ssh_common_args(path: str) -> str:
    """The ssh options that make ssh check the nodes against ``path`` only and never ask:
    the system-wide known_hosts (``GlobalKnownHostsFile``) is not read, so no line there can
    stand in for a node's pin."""
    return (f"-o UserKnownHostsFile={shlex.quote(path)} -o GlobalKnownHostsFile=/dev/null "
            "-o StrictHostKeyChecking=yes")


# ---------------------------------------------------------------------------------------
# The plan of one read


@dataclass
class PinPlan:
    """What one read of the clusters does to the pins and the known_hosts file."""

    first_use: list[Endpoint] = field(default_factory=list)  # node ids without a pin: scanned, then pinned
    repin: list[Endpoint] = field(default_factory=list)  # known_hosts_repin: scanned, pinned again
    # (endpoint, node id recorded before, host name recorded before): another node at the endpoint
    replaced: list[tuple[Endpoint, str, str]] = field(default_factory=list)
    # node ids without a pin whose keys the file already holds (written by hand, or by 2.1.0)
    adopt: list[tuple[Endpoint, list[str]]] = field(default_factory=list)
    pinned: list[Endpoint] = field(default_factory=list)  # known node ids: their pin is used
    restored: list[Endpoint] = field(default_factory=list)  # known node ids whose lines in the file differed

    @property
    def to_scan(self) -> list[Endpoint]:
        return self.first_use + self.repin


def pin_of(pins: Mapping[str, Mapping[str, Any]], endpoint: Endpoint) -> list[str] | None:
    """The pinned keys of ``endpoint``'s node id, or None for a node id without a pin."""
    keys = (pins.get(endpoint.cluster) or {}).get(endpoint.node_id)
    return list(keys["keys"]) if keys and keys.get("keys") else None


def plan_pins(endpoints: Iterable[Endpoint], recorded: Mapping[str, Mapping[str, Any]],
              pins: Mapping[str, Mapping[str, Any]], text: str, repin: Iterable[str] = ()) -> PinPlan:
    """What to do for the nodes of one read (module docstring). ``recorded``: pattern ->
    ``{"node_id", "cluster", "host"}`` from the last read; ``pins``: cluster -> node id ->
    ``{"keys": [...]}``; ``text``: the known_hosts file as it is now; ``repin``: node ids the
    operator asked to pin again."""
    repin = set(repin)
    plan = PinPlan()
    index = KnownHostsIndex(text)
    for endpoint in endpoints:
        record = recorded.get(endpoint.pattern)
        moved = record is not None and record.get("node_id") != endpoint.node_id
        if moved:
            plan.replaced.append((endpoint, str(record.get("node_id")), str(record.get("host") or endpoint.host)))
        pinned = pin_of(pins, endpoint)
        if pinned is not None and endpoint.node_id in repin:
            plan.repin.append(endpoint)
        elif pinned is not None:
            plan.pinned.append(endpoint)
            if not moved and (index.keys(endpoint.pattern) != sorted(set(pinned)) or index.authority(endpoint.pattern)):
                plan.restored.append(endpoint)
        else:
            # Only plain lines naming the endpoint itself are taken as the operator's word (a
            # wildcard or hashed line would pin whatever key it holds to every new node).
            present = index.plain_keys(endpoint.pattern) if record is None else []
            if present:
                plan.adopt.append((endpoint, present))
            else:
                plan.first_use.append(endpoint)
    return plan


def migrate_pins(recorded: Mapping[str, Mapping[str, Any]], text: str) -> dict[str, dict[str, Any]]:
    """Pins for a record written before pins existed (2.1.0): each recorded endpoint's node id
    gets the keys the file holds for it, which that version's ssh checked on every connection."""
    pins: dict[str, dict[str, Any]] = {}
    index = KnownHostsIndex(text)
    for pattern, record in sorted(recorded.items()):
        keys = index.keys(pattern)
        if keys and record.get("node_id"):
            pins.setdefault(str(record.get("cluster") or ""), {}).setdefault(
                str(record["node_id"]), {"keys": keys, "first": pattern})
    return pins


def managed_patterns(recorded: Mapping[str, Mapping[str, Any]],
                     pins: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """pattern -> the keys ssh may trust there: the pin of the node id recorded at each endpoint
    (none where that node id has no pin yet)."""
    out = {}
    for pattern, record in recorded.items():
        keys = (pins.get(str(record.get("cluster") or "")) or {}).get(str(record.get("node_id")))
        out[pattern] = sorted(set(keys["keys"])) if keys else []
    return out


# ---------------------------------------------------------------------------------------
# Sentences


def _named(items: list[str]) -> str:
    shown = ", ".join(items[:NAMED_IN_A_WARNING])
    more = len(items) - NAMED_IN_A_WARNING
    return shown + (f" and {more} more" if more > 0 else "")


def first_use_warning(cluster: str, entries: list[tuple[Endpoint, list[str], str]], path: str) -> str:
    """One warning per cluster for the node ids trusted on first use: ``(endpoint, keys, how)``."""
    named = [f"{e.host} (node id {e.node_id} at {e.pattern}, {describe_keys(keys)}{how})" for e, keys, how in entries]
    return (f"cluster '{cluster}': {len(entries)} new node id(s) trusted on first use, their host keys pinned in "
            f"{path}{RECORD_SUFFIX} from now on: {_named(named)}")


def replaced_warning(endpoint: Endpoint, old_node_id: str, old_host: str, path: str,
                     keys: Iterable[str] = (), pinned_before: bool = False) -> str:
    """The warning for a node AmlCompute replaced at the same endpoint: the new node id's keys
    are its pin where it has one (a node that moved), else trusted on first use."""
    was = "" if old_host == endpoint.host else f" (was {old_host})"
    keys = list(keys)
    how = ("its pinned keys" if pinned_before else "the new node's, trusted on first use") + (
        f" ({describe_keys(keys)})" if keys else "")
    return (f"cluster '{endpoint.cluster}': node {endpoint.host}{was} at {endpoint.pattern} was replaced by "
            f"AmlCompute (node id {old_node_id} -> {endpoint.node_id}): its host keys in {path} were replaced "
            f"by {how}")


def restored_warning(cluster: str, endpoints: list[Endpoint], path: str) -> str:
    named = [f"{e.host} (node id {e.node_id} at {e.pattern})" for e in endpoints]
    return (f"cluster '{cluster}': the known_hosts lines of {len(endpoints)} known node(s) in {path} were missing "
            f"or not their pinned keys (removed or edited by hand): put back from the pins, not scanned again: "
            f"{_named(named)}")


def refused_sentence(endpoint: Endpoint, pinned: list[str], offered: list[str], config: str) -> str:
    """The one sentence for a known node id that offers another host key than its pin."""
    return (f"cluster '{endpoint.cluster}': node {endpoint.host} (node id {endpoint.node_id} at {endpoint.pattern}) "
            f"offers host key {describe_keys(offered)}, not its pinned {describe_keys(pinned)}, so ssh refuses it "
            "as it would a man in the middle; if this node was re-imaged and you trust it, run once with "
            f"AMLHPC_KNOWN_HOSTS_REPIN={endpoint.node_id} (or known_hosts_repin: [{endpoint.node_id}] in {config})")


def repinned_warning(endpoint: Endpoint, old: list[str], new: list[str]) -> str:
    return (f"cluster '{endpoint.cluster}': node {endpoint.host} (node id {endpoint.node_id}) pinned again as "
            f"known_hosts_repin asks: {describe_keys(old) or 'no key'} -> {describe_keys(new)}; take the node id "
            "out of known_hosts_repin (AMLHPC_KNOWN_HOSTS_REPIN) now")


def scan_failed_warning(endpoint: Endpoint, detail: str) -> str:
    detail = (detail.strip().splitlines() or ["no host key answered"])[-1][:200]
    return (f"cluster '{endpoint.cluster}': could not read the SSH host keys of {endpoint.host} at "
            f"{endpoint.pattern} ({detail}); ssh refuses the node until a later read of the inventory "
            "reaches it")


# ---------------------------------------------------------------------------------------
# One read, start to end


@dataclass
class ReadOutcome:
    """What one read leaves: the known_hosts text to write, the warnings to show, and the
    hosts whose node offers another key than its pin (host -> the sentence)."""

    text: str
    warnings: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


Scanner = Callable[[list[Endpoint]], Mapping[str, tuple[list[str], str]]]


VERIFY_CHOICES = ("edited", "always", "never")


def follow_pins(record: Any, endpoints: list[Endpoint], scan: Scanner, *, repin: Iterable[str] = (),
                verify: str = "edited", path: str = "", config: str = "") -> ReadOutcome:
    """Pin new node ids, put known ones back from their pins, compare the live keys of known
    ones with their pins; ``record`` (a :class:`.known_hosts_io.NodeRecord`: ``endpoints``, ``pins``, ``text``)
    is brought up to date. ``scan`` is :func:`.known_hosts_io.scan_keys` (a stand-in in tests): whatever it
    answers for a node id that has a pin is compared, never trusted. ``verify``: whose live keys
    are compared, ``edited`` (the known nodes whose lines in the file had to be put back),
    ``always`` (every known node listed) or ``never``."""
    if verify not in VERIFY_CHOICES:
        raise ValueError(f"known_hosts_verify {verify!r}: use one of {', '.join(VERIFY_CHOICES)}")
    plan = plan_pins(endpoints, record.endpoints, record.pins, record.text, repin)
    checked = {"always": plan.pinned, "edited": plan.restored, "never": []}[verify]
    scanned = scan(plan.to_scan + checked) if plan.to_scan or checked else {}
    out = ReadOutcome(text="")
    first: dict[str, list[tuple[Endpoint, list[str], str]]] = {}
    replaced = {e.pattern for e, _unused, _unused in plan.replaced}
    for endpoint in endpoints:  # every listed endpoint now stands for its node id
        record.endpoints[endpoint.pattern] = {"node_id": endpoint.node_id, "cluster": endpoint.cluster,
                                              "host": endpoint.host}
    for endpoint, keys in plan.adopt:
        _pin(record.pins, endpoint, keys)
        first.setdefault(endpoint.cluster, []).append((endpoint, keys, ", from the lines already in the file"))
    for endpoint in plan.to_scan:
        lines, error = scanned.get(endpoint.pattern, ([], "not scanned"))
        keys = normal_keys(lines)
        if not keys:
            out.warnings.append(scan_failed_warning(endpoint, error))
            continue
        if endpoint in plan.repin:
            out.warnings.append(repinned_warning(endpoint, pin_of(record.pins, endpoint) or [], keys))
        elif endpoint.pattern not in replaced:
            first.setdefault(endpoint.cluster, []).append((endpoint, keys, ""))
        _pin(record.pins, endpoint, keys)
    for endpoint, old_id, old_host in plan.replaced:
        out.warnings.append(replaced_warning(endpoint, old_id, old_host, path, pin_of(record.pins, endpoint) or [],
                                             pinned_before=endpoint in plan.pinned))
    for cluster, entries in sorted(first.items()):
        out.warnings.append(first_use_warning(cluster, entries, path))
    restored: dict[str, list[Endpoint]] = {}
    for endpoint in plan.restored:
        restored.setdefault(endpoint.cluster, []).append(endpoint)
    for cluster, items in sorted(restored.items()):
        out.warnings.append(restored_warning(cluster, items, path))
    for endpoint in checked:
        pinned = pin_of(record.pins, endpoint) or []
        offered = changed_keys(pinned, normal_keys(scanned.get(endpoint.pattern, ([], ""))[0]))
        if offered:
            sentence = refused_sentence(endpoint, pinned, offered, config)
            out.warnings.append(sentence)
            out.refused[endpoint.host] = sentence
    out.text = pinned_text(record.text, managed_patterns(record.endpoints, record.pins))
    return out


def _pin(pins: dict[str, dict[str, Any]], endpoint: Endpoint, keys: list[str]) -> None:
    pins.setdefault(endpoint.cluster, {})[endpoint.node_id] = {"keys": sorted(set(keys)), "first": endpoint.pattern}


# ---------------------------------------------------------------------------------------
# Cached facts and kept connections


def stale_fact_hosts(current: Mapping[str, str], recorded: Mapping[str, str]) -> list[str]:
    """Host names whose cached facts belong to another node (or to a node not recorded)."""
    return sorted(host for host, node_id in current.items() if recorded.get(host) != node_id)


def control_path(endpoint: Endpoint, keys: Iterable[str] = ()) -> str:
    """An ``ansible_control_path`` of the node's own: ``%(directory)s/`` (the ssh connection's
    ``control_path_dir``) and 12 hex digits of a hash of the address, port, user, cluster, node
    id and pinned keys. A new node behind the same endpoint (or a node pinned again) gets a new
    ssh ControlPersist master instead of going through the one kept to the old VM, which a load
    balancer leaves open without routing its packets anywhere."""
    seed = "\0".join([endpoint.address, str(endpoint.port), endpoint.user, endpoint.cluster, endpoint.node_id,
                      *sorted(keys)])
    return "%(directory)s/" + hashlib.sha256(seed.encode()).hexdigest()[:12]
