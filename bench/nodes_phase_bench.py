#!/usr/bin/env python3
"""Controller cost of the nodes phase (playbooks/nodes.yml: ssh_trust, nvme_raid,
gpu_clocks, nccl) on N nodes of the AmlCompute twin (tests/twin/cluster.py: Docker containers, one public
address with a NAT port per node, a non-root admin user with sudo, private IPs on their own
network, read through the azureml_compute inventory plugin's nodes_file source; host key
checking on, against the NAT endpoints' keys), side by side with a parallel-ssh
script doing the same checks and writes on the same nodes (bench/pssh_nodes.py).

For each size: wall time and controller CPU seconds (user+sys of the ansible-playbook
process tree: its forks, the ssh clients and the ssh ControlPersist masters; see
bench/cpumeter.py) of a first run on fresh nodes and a second (idempotent) run, the number
of host-task results (PLAY RECAP ok+failed+skipped+unreachable), CPU per node and per
host-task, and the nodes' own CPU seconds (the twin's containers: sshd and what runs there, from
their cgroups; on this one machine they share the controller's cores, so they count in the
wall time of both sides); then the marginal CPU per added node (least squares over the sizes), the
projection to 512 nodes on a 4-core controller, and the ratio to parallel-ssh.

    .venv/bin/python bench/nodes_phase_bench.py [--sizes 1,4,16,32] [--playbook playbooks/nodes.yml]
        [--site] [--mitogen] [--label text] [--profile-tasks N] [--pyspy DIR]
        [--repeat N [--compare DIR]]

--site runs the whole site.yml instead, set up as tests/integration/test_multinode.py sets it
up (Azurite on the nodes' gateway, the twin's AzureML stand-in; the first run makes and stages
the data set and trains on the nodes), and pssh_nodes.py --site beside it.

Figures are CPU time because wall time on shared cores says more about the neighbours.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import cpumeter  # noqa: E402
from cpumeter import fit  # noqa: E402
import pyspy_breakdown  # noqa: E402
from twin.cluster import VM_SIZE, Twin, free_base_port  # noqa: E402

BIN = Path(sys.executable).parent
ANSIBLE_PLAYBOOK = str(BIN / "ansible-playbook")
PROJECTED_NODES = 512
PROJECTED_CORES = 4


def recap(output: str) -> dict[str, dict[str, int]]:
    out = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output.split("PLAY RECAP")[-1], re.M):
        out[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counters)}
    return out


def host_tasks(rc: dict[str, dict[str, int]]) -> int:
    return sum(c.get("ok", 0) + c.get("failed", 0) + c.get("skipped", 0) + c.get("unreachable", 0)
               for c in rc.values())


def changed_tasks(output: str) -> list[str]:
    """'task (host)' for every task result reported as changed."""
    out, task = [], ""
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[6:line.rfind("]")]
        elif line.startswith("changed: ["):
            out.append(f"{task} ({line[10:line.index(']')]})")
    return out


def slowest_tasks(output: str, n: int) -> list[str]:
    """The profile_tasks callback's lines (task name ... seconds), slowest first."""
    lines = re.findall(r"^(.+?) -+ (\d+\.\d+)s$", output, re.M)
    return [f"{float(s):7.2f}s  {name.strip()}" for name, s in sorted(lines, key=lambda x: -float(x[1]))[:n]]


def write_inventory(cluster: Twin, size: int, tmp: Path, extra: dict) -> Path:
    inv_dir = tmp / "inventory"
    (inv_dir / "group_vars").mkdir(parents=True, exist_ok=True)
    nodes_file = cluster.write_nodes_file(tmp / "nodes.json")
    inv = inv_dir / "bench.azureml_compute.yml"
    inv.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file",
                                   "cluster": "bench", "nodes_file": str(nodes_file),
                                   "admin_user": "azureuser", "min_nodes": size, "max_nodes": size,
                                   "vm_size": VM_SIZE}))
    (inv_dir / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "ansible_ssh_private_key_file": str(cluster.key),
        # host key checking on (ansible.cfg), against the NAT endpoints' keys
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={cluster.known_hosts(tmp / 'known_hosts')}",
        **extra}))
    return inv


class Site:
    """What the whole site.yml needs around the twin, as tests/integration/test_multinode.py
    sets it up (the same helpers): the user's inventory and group_vars (AzureML workspace
    answered by the twin's stand-in, the training job), Azurite on the node network's gateway
    for the data set, and the stand-in's state file. The first run makes and uploads the small
    data set, stages it onto every node and trains on the nodes; the second finds all done."""

    def __init__(self, cluster: Twin, tmp: Path, extra: dict) -> None:
        sys.path.insert(0, str(ROOT / "tests" / "integration"))
        import test_multinode as mn  # noqa: PLC0415 - only the site mode needs it (and pytest)
        self.mn = mn
        self.tmp = tmp
        port = mn.free_port()
        (tmp / "azurite").mkdir()
        self.azurite = mn._spawn_azurite(port, tmp / "azurite", host=cluster.gateway)  # pylint: disable=protected-access
        url = f"http://{cluster.gateway}:{port}/devstoreaccount1"
        scratch = tmp / "controller"
        group_vars = {
            **mn.job_group_vars(cluster),
            "aml_job_download_dir": str(scratch / "outputs"), "stage_account_url": url,
            "stage_container": "cosmoflow", "stage_azcopy_src": str(ROOT / ".tools" / "bin" / "azcopy"),
            "prepare_dataset_src": str(scratch / "cosmoflow-src"), "prepare_dataset_generate": True,
            "prepare_dataset_account_key": mn.ACCOUNT_KEY, "prepare_dataset_create_container": True,
            "healthcheck_fs_files": 2, "healthcheck_fs_file_size_mb": 8, **extra}
        self.inventory = mn.user_inventory(cluster, tmp / "inventory", "bench", group_vars)
        with open(tmp / "inventory" / "group_vars" / "all" / "main.yml", "a") as fh:
            fh.write("stage_sas: \"{{ lookup('amlhpc.azureml.blob_sas', stage_account_url, container=stage_container, "
                     "account_key=prepare_dataset_account_key) }}\"\n")
        self.env = mn.twin_env(mn.azureml_state(cluster, tmp))
        self.url = url

    def close(self) -> None:
        os.killpg(self.azurite.pid, 15)
        self.azurite.wait(10)


def start_twin(size: int, workdir: Path, prefix: str) -> Twin:
    """A twin on NAT ports of its own: benches running side by side race for ports, so a
    start that lost the race is tried again further up."""
    start = 50000 + int(hashlib.sha256(prefix.encode()).hexdigest(), 16) % 8000
    for attempt in range(6):
        cluster = Twin(size, workdir, prefix=prefix, base_port=free_base_port(size, start=start + attempt * 97))
        try:
            return cluster.start()
        except RuntimeError as exc:
            cluster.stop()
            if "port is already allocated" not in str(exc) or attempt == 5:
                raise
    raise AssertionError("unreachable")


PHASES = ("cluster", "ssh_trust", "nvme_raid", "gpu_clocks", "nccl", "healthcheck", "stage", "submit")


def print_phases(argv: list[str], project: Path, env: dict, label: str, size: int) -> None:
    """Each phase of site.yml alone on a cluster where everything is in place (its play's tag),
    less a run of the always-tagged plays (validate and report, which every tagged run has);
    each the least controller CPU of two runs."""
    def measure(tags: str) -> tuple[float, float, float]:
        """(wall, controller CPU, nodes' CPU) of the run with the least controller CPU of two."""
        runs = []
        for _ in range(2):
            before = cpumeter.containers_cpu(label)
            m = cpumeter.run([*argv, "--tags", tags], cwd=project, env=env, timeout=1800)
            after = cpumeter.containers_cpu(label)
            if m.returncode != 0:
                sys.exit(f"--tags {tags} failed:\n{m.stdout[-3000:]}{m.stderr[-1000:]}")
            runs.append((m.wall, m.cpu, (after - before) if None not in (before, after) else float("nan")))
        return min(runs, key=lambda r: r[1])

    base = measure("always")
    print(f"      phases alone, less the always plays (validate, report: {base[0]:.1f} s wall, "
          f"{base[1]:.1f} s controller CPU, {base[2]:.1f} s nodes' CPU):", flush=True)
    print(f"      {'phase':<12} {'wall s':>7} {'ctrl CPU s':>10} {'per node':>8} {'nodes CPU s':>11} {'per node':>8}", flush=True)
    for phase in PHASES:
        wall, cpu, nodes = (a - b for a, b in zip(measure(phase), base))
        print(f"      {phase:<12} {wall:>7.1f} {cpu:>10.1f} {cpu / size:>8.2f} {nodes:>11.1f} {nodes / size:>8.2f}", flush=True)


def repeat_rounds(args: argparse.Namespace, project: Path, argv: list[str], env: dict, label: str,
                  run_pssh) -> dict[str, float]:
    """--repeat: rounds of second runs (this tree, then --compare's) and a pssh run, on the
    same nodes, one after the other; each tree's wall ratio to the pssh run of its round.
    Returns each tree's median controller CPU over the rounds."""
    trees = [("this tree", project)]
    if args.compare:
        other = Path(args.compare).resolve()
        trees.append((f"{other.name}", other))
        warm = cpumeter.run(argv, cwd=other, env=env, timeout=3600)  # its own caches, as after its own run
        if warm.returncode != 0:
            sys.exit(f"--compare {other}: the run failed:\n{warm.stdout[-3000:]}")
    ratios: dict[str, list[float]] = {name: [] for name, _tree in trees}
    cpus: dict[str, list[float]] = {name: [] for name, _tree in trees}
    pwalls = []
    print(f"      {args.repeat} rounds, alternating on the same nodes (load average at the start "
          f"{os.getloadavg()[0]:.1f}):", flush=True)
    for i in range(args.repeat):
        walls = {}
        for name, tree in trees:
            before = cpumeter.containers_cpu(label)
            m = cpumeter.run(argv, cwd=tree, env=env, timeout=3600)
            after = cpumeter.containers_cpu(label)
            if m.returncode != 0:
                sys.exit(f"round {i + 1}, {name}: the run failed:\n{m.stdout[-3000:]}")
            changed = sum(c.get("changed", 0) for c in recap(m.stdout).values())
            walls[name] = m.wall
            cpus[name].append(m.cpu)
            nodes = f"{after - before:.1f} s" if None not in (before, after) else "-"
            print(f"      round {i + 1} {name:<14} wall {m.wall:6.1f} s  controller CPU {m.cpu:6.1f} s  nodes' CPU "
                  f"{nodes:>7}  changed {changed}", flush=True)
        p, pnodes, pout = run_pssh()
        pwalls.append(p.wall)
        print(f"      round {i + 1} {'pssh':<14} wall {p.wall:6.1f} s  CPU {p.cpu:6.2f} s  nodes' CPU "
              f"{(f'{pnodes:.1f} s' if pnodes is not None else '-'):>7}  changed {pout['changed_files']} files"
              + "".join(f"  | {name}: {w / p.wall:.2f}x" for name, w in walls.items()), flush=True)
        for name, w in walls.items():
            ratios[name].append(w / p.wall)
    for name, rs in ratios.items():
        print(f"      {name}: wall ratio to pssh median {statistics.median(rs):.2f}x, range {min(rs):.2f}-{max(rs):.2f}x "
              f"over {len(rs)} rounds (pssh wall median {statistics.median(pwalls):.1f} s, range "
              f"{min(pwalls):.1f}-{max(pwalls):.1f} s); controller CPU median {statistics.median(cpus[name]):.1f} s, "
              f"range {min(cpus[name]):.1f}-{max(cpus[name]):.1f} s", flush=True)
    return {name: statistics.median(c) for name, c in cpus.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,16,32")
    parser.add_argument("--playbook", default="playbooks/nodes.yml")
    parser.add_argument("--site", action="store_true",
                        help="the whole site.yml as tests/integration/test_multinode.py runs it (Azurite, the twin's "
                             "AzureML stand-in, staging, training), instead of --playbook")
    parser.add_argument("--mitogen", action="store_true",
                        help="run ansible-playbook with the Mitogen strategy (ANSIBLE_STRATEGY=mitogen_linear)")
    parser.add_argument("--label", default="", help="a name for this configuration in the output")
    parser.add_argument("--profile-tasks", type=int, default=0, metavar="N",
                        help="print the N slowest tasks of each second run (ansible.posix.profile_tasks)")
    parser.add_argument("--project", default=str(ROOT), metavar="DIR",
                        help="run the playbook from this checkout (e.g. a git worktree of an older commit)")
    parser.add_argument("--prefix", default="perf-bench", help="name prefix of the bench's containers and network")
    parser.add_argument("--no-pssh", action="store_true", help="skip the parallel-ssh side")
    parser.add_argument("--log-dir", metavar="DIR", help="keep each run's ansible-playbook output there")
    parser.add_argument("--cprofile", metavar="DIR",
                        help="run the second run's ansible-playbook under cProfile (its main process: the strategy, "
                             "run-once templating, result handling), writing DIR/<size>-second.prof")
    parser.add_argument("--pyspy", metavar="DIR",
                        help="record the second run with py-spy, its workers included (requirements-bench.txt), to "
                             "DIR/<size>-second.raw, and print where the workers' CPU went (bench/pyspy_breakdown.py); "
                             "that run's CPU figure includes py-spy's own")
    parser.add_argument("--phases", action="store_true",
                        help="with --site: after the second run, each phase alone (--tags <phase>), less a run of "
                             "the always-tagged plays (validate, report): wall, controller CPU and nodes' CPU per phase")
    parser.add_argument("--repeat", type=int, default=0, metavar="N",
                        help="after the second run, N more rounds on the same nodes, each a second run (of this "
                             "tree, then of --compare's) and a pssh run, alternating; prints each round and the wall "
                             "ratios' median and range: the run-to-run noise beside the figure")
    parser.add_argument("--compare", metavar="DIR",
                        help="with --repeat: another checkout (e.g. a worktree of an older commit) run on the same "
                             "nodes in every round, after one unmeasured run of its own (its facts and caches)")
    parser.add_argument("-e", "--extra", action="append", default=[], metavar="KEY=VALUE",
                        help="group var for the bench inventory (YAML value)")
    args = parser.parse_args()
    if args.compare and not args.repeat:
        parser.error("--compare runs in the rounds of --repeat N: give --repeat too")
    if args.repeat and args.no_pssh:
        parser.error("--repeat measures against pssh in every round: drop --no-pssh")
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.site:
        args.playbook = "site.yml"
    extra = {k: yaml.safe_load(v) for k, v in (e.split("=", 1) for e in args.extra)}

    reaper = cpumeter.become_subreaper()
    print(f"controller: {cpumeter.cpu_name()}")
    print(f"CPU = user+sys of the ansible-playbook process tree (forks, ssh clients{', ssh ControlPersist masters' if reaper else ''}),"
          " from getrusage(RUSAGE_CHILDREN) and /proc; nodes' CPU not counted")
    project = Path(args.project).resolve()
    print(f"playbook: {args.playbook} in {project}{' (mitogen_linear)' if args.mitogen else ''} {args.label}")
    env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="true", ANSIBLE_FORCE_COLOR="0",
               PYTHONDONTWRITEBYTECODE="1")
    if args.mitogen:
        import ansible_mitogen
        env["ANSIBLE_STRATEGY_PLUGINS"] = str(Path(ansible_mitogen.__file__).parent / "plugins" / "strategy")
        env["ANSIBLE_STRATEGY"] = "mitogen_linear"

    head = (f"{'nodes':>5} {'run':>6} {'wall s':>7} {'CPU s':>7} {'CPU/node':>8} {'tasks':>6} "
            f"{'ms/task':>7} {'changed':>7} | {'pssh wall':>9} {'pssh CPU':>8} {'CPU ratio':>9}")
    print(head)
    rows: dict[str, list[tuple[int, float, float]]] = {"first": [], "second": []}
    rounds: dict[str, list[tuple[int, float]]] = {}  # --repeat: each tree's (size, median rerun CPU)
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="amlhpc-bench-") as tmp:
            tmp_path = Path(tmp)
            cluster = start_twin(size, tmp_path / "cluster", args.prefix)
            site = None
            try:
                if args.site:
                    site = Site(cluster, tmp_path, extra)
                    inv = site.inventory
                    run_env = {**site.env, **{k: v for k, v in env.items() if k.startswith("ANSIBLE_")},
                               "PYTHONDONTWRITEBYTECODE": "1"}
                else:
                    inv = write_inventory(cluster, size, tmp_path, extra)
                    run_env = env
                nodes_file = inv.parent / "nodes.json" if args.site else tmp_path / "nodes.json"
                argv = [ANSIBLE_PLAYBOOK, "-i", str(inv), args.playbook]
                label = f"amlhpc.twin={cluster.prefix}"

                def run_pssh() -> tuple[cpumeter.Measured, float | None, dict]:
                    """pssh_nodes.py on the same nodes: its measurement, the nodes' CPU, its summary."""
                    pargv = [sys.executable, str(ROOT / "bench" / "pssh_nodes.py"),
                             "--nodes-file", str(nodes_file), "--key", str(cluster.key), "--user", cluster.admin_user,
                             "--address", cluster.public_address, "--vm-size", VM_SIZE]
                    if site is not None:
                        # The inventory plugin's known_hosts: pssh takes the host keys from it
                        # as the ssh_trust role does (no scan from the head, on both sides).
                        pargv += ["--site", "--hosts", ",".join(f"bench-{i}" for i in range(size)),
                                  "--account-url", site.url, "--account-key", site.mn.ACCOUNT_KEY,
                                  "--known-hosts", str(inv.parent / "known_hosts")]
                    pnodes_before = cpumeter.containers_cpu(label)
                    p = cpumeter.run(pargv, cwd=ROOT, timeout=900)
                    pnodes_after = cpumeter.containers_cpu(label)
                    if p.returncode != 0:
                        sys.exit(f"pssh_nodes.py failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
                    return (p, None if None in (pnodes_before, pnodes_after) else pnodes_after - pnodes_before,
                            yaml.safe_load(p.stdout.strip().splitlines()[-1]))

                for run in ("first", "second"):
                    nodes_before = cpumeter.containers_cpu(label)
                    run_argv = argv
                    if args.cprofile and run == "second":
                        Path(args.cprofile).mkdir(parents=True, exist_ok=True)
                        run_argv = [sys.executable, "-m", "cProfile", "-o",
                                    str(Path(args.cprofile).resolve() / f"{size}-second.prof"), *argv]
                    if args.pyspy and run == "second":
                        Path(args.pyspy).mkdir(parents=True, exist_ok=True)
                        raw = Path(args.pyspy).resolve() / f"{size}-second.raw"
                        run_argv = [str(BIN / "py-spy"), "record", "--subprocesses", "--nonblocking", "--rate", "100",
                                    "--format", "raw", "-o", str(raw), "--", *run_argv]
                    m = cpumeter.run(run_argv, cwd=project, env=run_env, timeout=3600)
                    nodes_after = cpumeter.containers_cpu(label)
                    node_cpu = None if None in (nodes_before, nodes_after) else nodes_after - nodes_before
                    if m.returncode != 0:
                        sys.exit(f"{args.playbook} failed ({run} run, {size} nodes):\n{m.stdout[-4000:]}{m.stderr[-2000:]}")
                    if args.log_dir:
                        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
                        (Path(args.log_dir) / f"{size}-{run}.log").write_text(m.stdout + m.stderr)
                    rc = recap(m.stdout)
                    tasks = host_tasks(rc)
                    changed = sum(c.get("changed", 0) for c in rc.values())
                    rows[run].append((size, m.cpu, m.wall))
                    line = (f"{size:>5} {run:>6} {m.wall:>7.1f} {m.cpu:>7.1f} {m.cpu / size:>8.2f} {tasks:>6} "
                            f"{1000 * m.cpu / max(tasks, 1):>7.0f} {changed:>7}")
                    masters = f"  (ssh masters {m.masters:.1f} s of it)"
                    if node_cpu is not None:
                        masters += f"  nodes' CPU {node_cpu:.1f} s"
                    if run == "second" and not args.no_pssh:
                        p, pnode_cpu, pout = run_pssh()
                        pchanged = pout["changed_files"]
                        if pout.get("retried"):
                            print(f"      pssh retried: {'; '.join(pout['retried'])}", flush=True)
                        line += (f" | {p.wall:>9.1f} {p.cpu:>8.2f} {m.cpu / max(p.cpu, 1e-3):>8.0f}x"
                                 f"  (pssh changed {pchanged} files; wall ratio {m.wall / max(p.wall, 1e-3):.1f}x"
                                 + (f"; pssh nodes' CPU {pnode_cpu:.1f} s" if pnode_cpu is not None else "") + ")")
                    print(line + masters, flush=True)
                    if run == "second" and args.phases and site is not None:
                        print_phases(argv, project, run_env, label, size)
                    if run == "second":
                        for task in changed_tasks(m.stdout):
                            print(f"      changed again: {task}", flush=True)
                        for task in slowest_tasks(m.stdout, args.profile_tasks):
                            print(f"      {task}", flush=True)
                        if args.pyspy:
                            print(textwrap.indent(pyspy_breakdown.report(str(raw)), "      "), flush=True)
                if args.repeat:
                    for name, cpu in repeat_rounds(args, project, argv, run_env, label, run_pssh).items():
                        rounds.setdefault(name, []).append((size, cpu))
            finally:
                if site is not None:
                    site.close()
                cluster.stop()
                cpumeter.close_orphans()
    for run in ("first", "second"):
        xs = [float(s) for s, _, _ in rows[run]]
        b, slope = fit(xs, [c for _, c, _ in rows[run]])
        projected = b + slope * PROJECTED_NODES
        print(f"{run} run: marginal controller CPU {slope:.2f} s per added node (fixed {b:.1f} s); "
              f"{PROJECTED_NODES} nodes: {projected / 60:.1f} CPU min, at best {projected / PROJECTED_CORES / 60:.1f} min "
              f"of wall time on a {PROJECTED_CORES}-core controller")
    for name, points in rounds.items():
        if len(points) > 1:
            b, slope = fit([float(n) for n, _ in points], [c for _, c in points])
            print(f"rerun rounds, {name}: marginal controller CPU {slope:.2f} s per added node (fixed {b:.1f} s), "
                  f"from the median of {args.repeat} rounds at {', '.join(str(n) for n, _ in points)} nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
