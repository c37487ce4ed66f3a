#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""One node's part in a round of the pair gate: find the tools, serve, or run the test."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: health_pair
short_description: Run this node's side of a two-node bandwidth test (iperf3, ib_write_bw or nccl-tests)
version_added: "2.1.0"
author:
  - amlhpc contributors (@amlhpc)
description:
  - The healthcheck role's pair gate tests the nodes two by two, every pair of a round at
    once, with the field's own tools; this module is one node's part in a round, so that a
    round is one task per node whatever the node count.
  - O(role=probe) says which pair tools the node has - C(iperf3), C(ib_write_bw) (with an
    InfiniBand device in C(/sys/class/infiniband)), C(nccl) (C(all_reduce_perf), C(mpirun)
    and C(nvidia-smi)), and the link speed of the interface holding O(self_address).
  - O(role=server) starts the listening side in the background and returns (an C(iperf3 -s -1)
    or C(ib_write_bw) that serves one client and gives up when idle), one per port of O(ports);
    nccl-tests needs none.
  - O(role=client) runs the test against O(peer_address) once per port of O(ports), one after the
    other, and returns every figure and the best (the slower direction of C(iperf3 --bidir),
    C(ib_write_bw)'s average, or nccl-tests' bus bandwidth). The gate's later rounds read a pair
    several times, so that one transient dip decides nothing.
  - Judging is the controller's (C(plugins/module_utils/amlhpc/health/pair_gate.py)).
attributes:
  check_mode:
    support: full
    details:
      - The tests only measure; they run in check mode too.
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  role:
    description: This node's part - C(probe), C(server) or C(client).
    type: str
    required: true
    choices: [probe, server, client]
  tool:
    description: The pair tool of the round (ignored by O(role=probe)).
    type: str
    default: iperf3
    choices: [iperf3, ib_write_bw, nccl]
  peer_address:
    description: The other node's address on the cluster's network (its private IP).
    type: str
    default: ""
  self_address:
    description: This node's address (the nccl-tests host list; echoed by O(role=probe) for the other nodes).
    type: str
    default: ""
  port:
    description: TCP port of the test (a new one each round); the client's result echoes it.
    type: int
    default: 5201
  ports:
    description:
      - One TCP port per reading, read one after the other (the first is normally O(port));
        empty - one reading on O(port).
    type: list
    elements: int
    default: []
    version_added: 2.2.0
  seconds:
    description: How long the test sends, in seconds.
    type: int
    default: 5
  timeout:
    description: Longest the client may run, in seconds; one that runs longer fails the pair.
    type: int
    default: 120
  binaries:
    description: Names or paths of C(iperf3), C(ib_write_bw), C(all_reduce_perf), C(mpirun), C(nvidia_smi).
    type: dict
    default: {}
  tool_dirs:
    description: Folders searched after C(PATH) for the tools.
    type: list
    elements: str
    default: []
  ib_device:
    description: The HCA C(ib_write_bw) uses (C(-d)); empty - its first.
    type: str
    default: ""
  gpus:
    description: GPUs per node (one nccl-tests rank each).
    type: int
    default: 8
  nccl_args:
    description: Arguments of the two-node C(all_reduce_perf).
    type: str
    default: "-b 1G -e 1G -f 2 -g 1"
  mpirun_args:
    description: Extra C(mpirun) arguments of the two-node nccl-tests run.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Pair gate | Start the servers of this round
  amlhpc.azureml.health_pair:
    role: server
    tool: iperf3
    port: 5301
"""

RETURN = r"""
address:
  description: With O(role=probe), O(self_address) as given.
  type: str
  returned: when role is probe
found:
  description: With O(role=probe), whether each pair tool is usable here (C(iperf3), C(ib_write_bw), C(nccl)).
  type: dict
  returned: when role is probe
interface:
  description:
    - With O(role=probe), the network interface that holds O(self_address) (iperf3's path); empty when
      none does.
  type: str
  returned: when role is probe
  version_added: 2.3.0
link_speed_mbps:
  description:
    - With O(role=probe), that interface's link speed in Mb/s (C(/sys/class/net/<interface>/speed)); null
      where the driver reports none (virtio's -1, a link that is down, loopback).
    - The pair gate names a node whose speed is below the one most nodes share (a link trained down).
  type: float
  returned: when role is probe
  version_added: 2.3.0
value:
  description: With O(role=client), the best reading (Gb/s for iperf3 and ib_write_bw, GB/s bus bandwidth for nccl); null when none gave a figure.
  type: float
  returned: when role is client
readings:
  description: With O(role=client), the figure of every reading that gave one, in order.
  type: list
  elements: float
  returned: when role is client
  version_added: 2.2.0
error:
  description: Why there is no figure (the tool's own words), empty otherwise.
  type: str
  returned: when role is client
output:
  description: The tail of the tool's output.
  type: str
  returned: when role is client
"""

import fcntl
import os
import shlex
import shutil
import signal
import socket
import struct
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.health import pair_tools

DEFAULT_NAMES = {"iperf3": "iperf3", "ib_write_bw": "ib_write_bw", "all_reduce_perf": "all_reduce_perf",
                 "mpirun": "mpirun", "nvidia_smi": "nvidia-smi"}


def find(name: str, dirs: list[str]) -> str:
    path = os.pathsep.join([os.environ.get("PATH", ""), *dirs])
    return shutil.which(name, path=path) or ""


def has_ib() -> bool:
    try:
        return bool(os.listdir("/sys/class/infiniband"))
    except OSError:
        return False


SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address


def interface_of(address: str) -> str:
    """The interface holding ``address`` (a name is resolved first), "" when none does."""
    try:
        wanted = socket.gethostbyname(address)
    except OSError:
        return ""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _index, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address on it
            if socket.inet_ntoa(raw[20:24]) == wanted:
                return name
    return ""


def link_speed(interface: str, root: str = "/sys/class/net") -> float | None:
    """The link speed the kernel reports for ``interface``, Mb/s; None where it reports none."""
    try:
        with open(os.path.join(root, interface, "speed"), encoding="ascii") as f:
            return pair_tools.parse_link_speed(f.read())
    except (OSError, ValueError):
        return None


def end_stale_server(pidfile: str, port: int) -> None:
    """End an earlier gate's iperf3 server on ``port`` that a test which never ended (a peer
    stopped mid-test) keeps busy: the process named by ``pidfile``, only if it is that server."""
    try:
        with open(pidfile, encoding="ascii") as f:
            pid = int(f.read().strip() or 0)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except (OSError, ValueError):
        return
    if pid <= 1 or not pair_tools.is_gate_server(cmdline, port, pidfile):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except OSError:
            return
        for _attempt in range(50):
            if not os.path.exists(f"/proc/{pid}"):
                return
            time.sleep(0.1)


def main() -> None:
    module = AnsibleModule(argument_spec={
        "role": {"type": "str", "required": True, "choices": ["probe", "server", "client"]},
        "tool": {"type": "str", "default": "iperf3", "choices": ["iperf3", "ib_write_bw", "nccl"]},
        "peer_address": {"type": "str", "default": ""},
        "self_address": {"type": "str", "default": ""},
        "port": {"type": "int", "default": 5201},
        "ports": {"type": "list", "elements": "int", "default": []},
        "seconds": {"type": "int", "default": 5},
        "timeout": {"type": "int", "default": 120},
        "binaries": {"type": "dict", "default": {}},
        "tool_dirs": {"type": "list", "elements": "str", "default": []},
        "ib_device": {"type": "str", "default": ""},
        "gpus": {"type": "int", "default": 8},
        "nccl_args": {"type": "str", "default": "-b 1G -e 1G -f 2 -g 1"},
        "mpirun_args": {"type": "str", "default": ""},
    }, supports_check_mode=True)
    p = module.params
    names = {**DEFAULT_NAMES, **{k: str(v) for k, v in (p["binaries"] or {}).items() if v}}
    paths = {k: find(v, p["tool_dirs"]) for k, v in names.items()}
    if p["role"] == "probe":
        interface = interface_of(p["self_address"]) if p["self_address"] else ""
        module.exit_json(changed=False, paths=paths, address=p["self_address"], interface=interface,
                         link_speed_mbps=link_speed(interface) if interface else None, found={
            "iperf3": bool(paths["iperf3"]),
            "ib_write_bw": bool(paths["ib_write_bw"]) and has_ib(),
            "nccl": all(paths[k] for k in ("all_reduce_perf", "mpirun", "nvidia_smi")),
        })
    tool, role = p["tool"], p["role"]
    binary = paths["all_reduce_perf" if tool == "nccl" else tool]
    if not binary:
        module.fail_json(msg=f"{names['all_reduce_perf' if tool == 'nccl' else tool]} is not on PATH or in "
                             f"healthcheck_tool_dirs on this node: install it or set healthcheck_pair_tool")
    ports = list(p["ports"]) or [p["port"]]

    def argv_for(port: int) -> list[str]:
        if tool == "iperf3":
            pidfile = pair_tools.iperf3_pidfile(tempfile.gettempdir(), os.getuid(), port)
            return pair_tools.iperf3_argv(binary, role, p["peer_address"], port, p["seconds"], pidfile)
        if tool == "ib_write_bw":
            return pair_tools.ib_write_bw_argv(binary, role, p["peer_address"], port, p["seconds"], p["ib_device"])
        return pair_tools.nccl_pair_argv(paths["mpirun"], binary, p["peer_address"], p["self_address"], p["gpus"],
                                         p["nccl_args"], p["mpirun_args"])

    if role == "server":
        if tool == "nccl":
            module.exit_json(changed=False)
        for port in ports:
            if tool == "iperf3":  # daemonizes itself (-D) once it listens
                end_stale_server(pair_tools.iperf3_pidfile(tempfile.gettempdir(), os.getuid(), port), port)
                rc, out, err = module.run_command(argv_for(port))
                if rc != 0:
                    module.fail_json(msg=f"iperf3 could not serve on port {port}: {(err or out).strip()}")
            else:  # ib_write_bw serves one client in the foreground: leave it running, bounded, detached
                rc, out, err = module.run_command(
                    f"setsid -f {shlex.join(['timeout', str(p['timeout']), *argv_for(port)])} </dev/null >/dev/null 2>&1",
                    use_unsafe_shell=True)
                if rc != 0:
                    module.fail_json(msg=f"{tool} could not serve on port {port}: {(err or out).strip()}")
        module.exit_json(changed=False)
    values, errors, text = [], [], ""
    for port in ports:
        rc, out, err = module.run_command(["timeout", str(p["timeout"]), *argv_for(port)])
        text = f"{out}\n{err}"
        value, error = pair_tools.PARSERS[tool](out if tool == "iperf3" else text)
        if rc == 124:
            value, error = None, f"{tool} ran past {p['timeout']} s"
        elif rc == 127:
            value, error = None, f"{tool} could not run: {err.strip()}"
        if value is None:
            errors.append(error)
        else:
            values.append(value)
    module.exit_json(changed=False, value=max(values) if values else None, readings=values,
                     error="" if values else (errors[-1] if errors else "no reading"), output=text[-2000:],
                     port=p["port"])


if __name__ == "__main__":
    main()
