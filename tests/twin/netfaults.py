"""Link faults on a twin node, made in the network as a bad port or cable would make them.

A twin node's network interface is one end of a veth pair; the other end sits on the host, in
the twin's Docker bridge. Every fault here is applied to that host-side end, so nothing inside
the node changes and the node needs no capability:

* :func:`slow_link` - ``tc qdisc ... root tbf rate 10mbit``: the port delivers at a fraction of
  its rate (what a link trained down to a lower speed or a flapping cable looks like). This
  machine's kernel has no ``netem``; ``tbf`` needs none. The bucket's burst is sized to the rate
  (:func:`tbf_argv`): a fixed 32 kbit one capped every rate at 0.6-0.8 Gb/s.
* :func:`lossy_link` - an ``iptables`` rule with the ``statistic`` match that drops a share of
  the packets the node sends (``-m physdev --physdev-in <veth>``: the bridge hands bridged
  packets to iptables, ``br_netfilter``), in Docker's ``DOCKER-USER`` chain.

* :func:`lossy_route` - the same drop rule for the packets between two given nodes only
  (``-s``/``-d`` their private IPs, both ways): a fault of the link between them, each node
  fine with every other.
* :func:`cut_off` - ``ip link set <veth> down``: the node is cut off from the network, its
  processes running on (a head whose NIC or top-of-rack port died; issue 48).
* :func:`slow_uploads` - what the node sends to one TCP port (a storage endpoint) at a low rate,
  everything else at full speed: an ``htb`` qdisc on the node's own ``eth0``, a ``u32`` filter on
  the destination port picking the slow class (the node's egress is the host veth's ingress,
  which a qdisc there cannot shape). Made from the host in the node's network namespace
  (``nsenter -n``, the host's ``tc``): nothing inside the node changes, its job container (which
  shares that namespace) is shaped alike. A slow path to the blob store, not a slow node.

All but :func:`cut_off` are context managers and always clean up (the veth goes with the container, the rule is
deleted by its exact text). :func:`host_veth` finds the host-side end from the node's
``/sys/class/net/eth0/iflink``.
"""

from __future__ import annotations

import contextlib
import math
import re
import subprocess
from collections.abc import Iterator
from typing import Any


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=60)


def host_veth(twin: Any, node: Any) -> str:
    """The host-side veth of ``node``'s eth0 (by the peer index the node's end names)."""
    got = twin.exec(node, "cat", "/sys/class/net/eth0/iflink")
    index = int(str(got.stdout).strip())
    links = _run("ip", "-o", "link", "show").stdout
    match = re.search(rf"^{index}: ([^:@\s]+)(?:@\S+)?:", links, re.M)
    if not match:
        raise RuntimeError(f"no host interface with index {index} for {node} (ip -o link show)")
    return match.group(1)


TBF_HZ = 100               # the slowest kernel tick tbf may refill at (CONFIG_HZ is 100 to 1000)
TBF_MIN_BURST = 16 * 1024  # bytes: above one MTU-sized packet with room, for low rates
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)?$", re.I)
_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
         "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}


def tbf_argv(veth: str, rate: str) -> list[str]:
    """The ``tc`` command that limits ``veth`` to ``rate`` (tc's units: ``10mbit``, ``5gbit``,
    ``125mbps``, a bare number of bits per second). tbf's rule: the bucket refills once per
    kernel tick, so its burst must hold at least rate / HZ bytes or the rate is never reached;
    the burst is that at :data:`TBF_HZ`, at least :data:`TBF_MIN_BURST`."""
    match = _RATE.match(str(rate).strip())
    if not match:
        raise ValueError(f"rate '{rate}' is not one tc reads: give a number and a unit like 10mbit, 5gbit or 125mbps")
    bits = float(match.group(1)) * _BITS[(match.group(2) or "bit").lower()]
    burst = max(math.ceil(bits / 8 / TBF_HZ), TBF_MIN_BURST)
    return ["tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", str(rate), "burst", f"{burst}b",
            "latency", "400ms"]


@contextlib.contextmanager
def slow_link(twin: Any, node: Any, rate: str = "10mbit") -> Iterator[str]:
    """Limit what reaches ``node`` to ``rate`` (token bucket on its host-side veth)."""
    veth = host_veth(twin, node)
    add = _run(*tbf_argv(veth, rate))
    if add.returncode != 0:
        raise RuntimeError(f"tc could not slow {veth}: {add.stderr.strip()}")
    try:
        yield veth
    finally:
        _run("tc", "qdisc", "del", "dev", veth, "root")


@contextlib.contextmanager
def lossy_link(twin: Any, node: Any, probability: float = 0.3) -> Iterator[str]:
    """Drop ``probability`` of the packets ``node`` sends (iptables statistic match)."""
    veth = host_veth(twin, node)
    rule = ["DOCKER-USER", "-m", "physdev", "--physdev-in", veth, "-m", "statistic", "--mode", "random",
            "--probability", str(probability), "-j", "DROP"]
    add = _run("iptables", "-I", *rule)
    if add.returncode != 0:
        raise RuntimeError(f"iptables could not add the drop rule on {veth}: {add.stderr.strip()}")
    try:
        yield veth
    finally:
        _run("iptables", "-D", *rule)


def slow_uploads_argv(port: int, rate: str) -> list[list[str]]:
    """The ``tc`` commands (run in the node's network namespace) that send what goes to TCP
    ``port`` through an ``htb`` class of ``rate`` and the rest through one of 40 Gbit/s (faster
    than the twin's links; this kernel has ``htb`` and ``u32``, not ``prio``)."""
    if not _RATE.match(str(rate).strip()):
        raise ValueError(f"rate '{rate}' is not one tc reads: give a number and a unit like 500kbit or 10mbit")
    dev = ["dev", "eth0"]
    return [["tc", "qdisc", "add", *dev, "root", "handle", "1:", "htb", "default", "10"],
            ["tc", "class", "add", *dev, "parent", "1:", "classid", "1:10", "htb", "rate", "40gbit"],
            ["tc", "class", "add", *dev, "parent", "1:", "classid", "1:30", "htb", "rate", str(rate), "ceil", str(rate)],
            ["tc", "filter", "add", *dev, "protocol", "ip", "parent", "1:", "prio", "1", "u32",
             "match", "ip", "dport", str(int(port)), "0xffff", "flowid", "1:30"]]


@contextlib.contextmanager
def slow_uploads(twin: Any, node: Any, port: int, rate: str = "500kbit") -> Iterator[None]:
    """What ``node`` sends to TCP ``port`` (on any address) leaves at ``rate``; the rest at full speed."""
    pid = _run("docker", "inspect", "-f", "{{.State.Pid}}", node.container).stdout.strip()
    if not pid.isdigit() or pid == "0":
        raise RuntimeError(f"{node.container} is not running (docker inspect gave pid '{pid}')")
    ns = ["nsenter", "-t", pid, "-n"]
    try:
        for argv in slow_uploads_argv(port, rate):
            done = _run(*ns, *argv)
            if done.returncode != 0:
                raise RuntimeError(f"tc could not slow {node.container}'s uploads to port {port}: {done.stderr.strip()}")
        yield
    finally:
        _run(*ns, "tc", "qdisc", "del", "dev", "eth0", "root")


def _private_ip(twin: Any, node: Any) -> str:
    return str(twin.exec(node, "hostname", "-I").stdout).split()[0]


@contextlib.contextmanager
def lossy_route(twin: Any, node_a: Any, node_b: Any, probability: float = 0.3) -> Iterator[tuple[str, str]]:
    """Drop ``probability`` of the packets between ``node_a`` and ``node_b`` (both ways)."""
    ip_a, ip_b = _private_ip(twin, node_a), _private_ip(twin, node_b)
    rules = [["DOCKER-USER", "-s", src, "-d", dst, "-m", "statistic", "--mode", "random",
              "--probability", str(probability), "-j", "DROP"] for src, dst in ((ip_a, ip_b), (ip_b, ip_a))]
    added = []
    try:
        for rule in rules:
            add = _run("iptables", "-I", *rule)
            if add.returncode != 0:
                raise RuntimeError(f"iptables could not add the drop rule {' '.join(rule)}: {add.stderr.strip()}")
            added.append(rule)
        yield ip_a, ip_b
    finally:
        for rule in added:
            _run("iptables", "-D", *rule)


def cut_off(twin: Any, node: Any, state: str = "unusable") -> str:
    """``node`` loses its network (its host-side veth down): every process on it, its job's
    included, keeps running and hears nothing more, nor is heard; its SSH port stops answering.
    AmlCompute's agent on it can no longer report, so no new job is placed on it; with a
    ``listing_lag`` the listing keeps its old state that long (as :meth:`Twin.freeze`), without
    one the listing says ``state`` at once. The twin's end removes the veth with the node."""
    veth = host_veth(twin, node)
    down = _run("ip", "link", "set", "dev", veth, "down")
    if down.returncode != 0:
        raise RuntimeError(f"ip could not take {veth} down: {down.stderr.strip()}")
    node.mark_lost(state)
    return veth
