"""Controller CPU seconds of a command and everything it starts (forks, ssh clients, and
the ssh ControlPersist masters that outlive it).

``resource.getrusage(RUSAGE_CHILDREN)`` counts a child's user+sys time once it is waited
for, including its own waited-for descendants. ssh's ControlPersist master forks itself into
the background and is re-parented away from ansible-playbook, so it would be missed: this
process makes itself a *child subreaper* (Linux prctl), so those masters become its
children; their CPU is read from /proc while they live and from RUSAGE_CHILDREN once they
are reaped. The nodes' own CPU (sshd and the modules on the containers) is not counted.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import subprocess
import time
from dataclasses import dataclass

PR_SET_CHILD_SUBREAPER = 36
_TICK = os.sysconf("SC_CLK_TCK")


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _orphans_cpu(exclude: set[int]) -> float:
    """user+sys (own and waited-for children) of this process's live children."""
    total = 0.0
    pids: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as fh:
                pids.update(int(p) for p in fh.read().split())
        except OSError:
            continue
    for pid in pids - exclude:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state (field 3): utime, stime, cutime, cstime are fields 14-17.
        total += sum(int(x) for x in fields[11:15]) / _TICK
    return total


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def snapshot() -> float:
    """CPU seconds used so far by every descendant of this process, dead or alive."""
    _reap()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime + _orphans_cpu(set())


@dataclass
class Measured:
    wall: float
    cpu: float
    returncode: int
    stdout: str
    stderr: str
    masters: float = 0.0  # of cpu: the ssh ControlPersist masters still alive at the end


def run(argv: list[str], **kwargs) -> Measured:
    before = snapshot()
    masters_before = _orphans_cpu(set())
    start = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    wall = time.monotonic() - start
    masters = _orphans_cpu(set()) - masters_before
    cpu = snapshot() - before
    return Measured(wall, cpu, res.returncode, res.stdout, res.stderr, max(masters, 0.0))


def containers_cpu(label: str) -> float | None:
    """CPU seconds the running containers with this Docker label have used so far (the
    twin's nodes: their sshd, the modules Ansible runs there, the pssh scripts), from their
    cgroup (v1 cpuacct, or v2 cpu.stat); None where the cgroup files cannot be read."""
    ids = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", f"label={label}"],
                         capture_output=True, text=True, check=False).stdout.split()
    total = 0.0
    for cid in ids:
        for path, scale in ((f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage", 1e-9),
                            (f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat", 1e-6)):
            try:
                with open(path) as fh:
                    text = fh.read()
            except OSError:
                continue
            value = text.split()[0] if path.endswith("usage") else text.split("usage_usec", 1)[1].split()[0]
            total += int(value) * scale
            break
        else:
            return None
    return total


def cpu_name() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores (shared), load average {os.getloadavg()[0]:.1f}"


def close_orphans() -> None:
    """End the ssh masters left behind (children of this subreaper) and reap them."""
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as fh:
                pids = [int(p) for p in fh.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/comm") as fh:
                    if fh.read().strip() != "ssh":
                        continue
                os.kill(pid, 15)
            except OSError:
                continue
    time.sleep(0.5)
    _reap()


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope); slope 0 with one point."""
    if len(xs) < 2:
        return ys[0], 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope
