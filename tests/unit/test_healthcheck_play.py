"""playbooks/healthcheck.yml end to end on two local "nodes", with stand-in GPU tools.

No GPU here, so nvidia-smi, nvbandwidth, all_reduce_perf, alltoall_perf and mpirun are small
scripts that replay outputs in the tools' real shapes (tests/unit/plugins/module_utils/
fixtures/health) and log how they were called. Everything else is real: the role's tasks,
the filters, the gate, and the shared-mount benchmark writing and reading files.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_cli import ansible_cli
from project_copy import make_project_copy, project_env

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = str(ROOT / "playbooks" / "healthcheck.yml")
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")
FIX = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "health"

pytestmark = pytest.mark.slow


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def fake_tools(folder: Path, log: Path, gpu_csv: str, node_all_reduce: str, nvbw: str,
               elbencho: bool = False) -> Path:
    folder.mkdir(parents=True)
    if elbencho:
        _script(folder / "elbencho", f'echo "elbencho $*" >> {log}\ncat {FIX / "elbencho_write_read.txt"}\n')
    _script(folder / "nvidia-smi", f"""echo "nvidia-smi $*" >> {log}
case "$*" in
  *--query-gpu=*) cat {FIX / gpu_csv} ;;
  *--query-remapped-rows=*) cat {FIX / 'nvsmi_remap_ndv4_ok.csv'} ;;
  "-q -d ECC") cat {FIX / 'nvsmi_q_ecc_ndv4_ok.txt'} ;;
  "-q -d PERFORMANCE") cat {FIX / 'nvsmi_q_perf_ndv4_ok.txt'} ;;
  "nvlink -s") cat {FIX / 'nvlink_a100_ok.txt'} ;;
  *) exit 2 ;;
esac
""")
    _script(folder / "nvbandwidth", f'echo "nvbandwidth $*" >> {log}\ncat {FIX / nvbw}\n')
    # -g 1: the multi-node run under mpirun; otherwise the one-node run (-g <GPUs>).
    _script(folder / "all_reduce_perf", f"""echo "all_reduce_perf $*" >> {log}
case "$*" in *"-g 1"*) cat {FIX / 'all_reduce_ndv4_node_ok.txt'} ;; *) cat {FIX / node_all_reduce} ;; esac
""")
    _script(folder / "alltoall_perf", f'echo "alltoall_perf $*" >> {log}\ncat {FIX / "alltoall_ndv4_2node_sweep.txt"}\n')
    _script(folder / "ibstat", f'echo "ibstat $*" >> {log}\ncat {FIX / "ibstat_ndv4_ok.txt"}\n')
    # ib_write_bw: the server (no host argument) prints nothing here; the client prints the result.
    _script(folder / "ib_write_bw", f"""echo "ib_write_bw $*" >> {log}
case "$*" in *localhost) cat {FIX / 'ib_write_bw_hdr_mbsec.txt'} ;; esac
""")
    _script(folder / "mpirun", f"""echo "mpirun $*" >> {log}
while [ $# -gt 0 ]; do case "$1" in */all_reduce_perf|*/alltoall_perf) exec "$@" ;; esac; shift; done
exit 3
""")
    return folder


@pytest.fixture()
def cluster(tmp_path):
    """A two-node inventory; n1's all_reduce and GPU list are set per test."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("n0 slots=8\nn1 slots=8\n")
    log = tmp_path / "calls.log"

    def make(n1_gpu_csv="nvsmi_gpu_ndv4_ok.csv", n1_all_reduce="all_reduce_ndv4_node_ok.txt", **extra):
        tools = {
            "n0": fake_tools(tmp_path / "tools-n0", log, "nvsmi_gpu_ndv4_ok.csv", "all_reduce_ndv4_node_ok.txt",
                             "nvbandwidth_ndv4_ok.txt"),
            # n1 has elbencho, n0 falls back to the project's own reader.
            "n1": fake_tools(tmp_path / "tools-n1", log, n1_gpu_csv, n1_all_reduce, "nvbandwidth_ndv4_ok.txt",
                             elbencho=True),
        }
        hosts = {name: {"aml_node_rank": i, "healthcheck_tool_dirs": [str(tools[name])]}
                 for i, name in enumerate(("n0", "n1"))}
        inv = {"all": {
            "children": {"aml_nodes": {"children": {"head": {"hosts": {"n0": None}},
                                                    "workers": {"hosts": {"n1": None}}}},
                         "cluster_gpu": {"hosts": {"n0": None, "n1": None}}},
            "hosts": hosts,
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                     "aml_cluster": "gpu", "aml_vm_size": "Standard_ND96asr_v4",
                     # Ansible runs here as root already, with no sudo to become through.
                     "healthcheck_become": False,
                     # Two nodes on one machine have no link between them to test: the pair
                     # gate has its own test on the twin (tests/integration/test_twin_pair_gate.py).
                     "healthcheck_pairs": False,
                     "healthcheck_kernel_log_command": f"cat {FIX / 'dmesg_clean.txt'}",
                     "healthcheck_nodefile": str(nodefile), "healthcheck_fs_path": str(scratch),
                     "healthcheck_fs_files": 4, "healthcheck_fs_file_size_mb": 4, "healthcheck_fs_parallel": 2,
                     # The stand-in mount is this machine's disk: gate it with a floor it meets.
                     "healthcheck_thresholds": {"default": {"fs_write_mbps": 1, "fs_read_mbps": 1}},
                     # The verdict's record goes to the test's folder, not the checkout's outputs/.
                     "healthcheck_verdict_file": str(tmp_path / "outputs" / "health.json"),
                     **extra}}}
        path = tmp_path / "inv.yml"
        path.write_text(yaml.safe_dump(inv))
        return path

    return make, log, scratch


def run(inv: Path, *args: str) -> subprocess.CompletedProcess:
    # In a project of the test's own (beside its inventory): a stopped run's report page lands there.
    project = make_project_copy(inv.parent / "project")
    env = project_env(project, ANSIBLE_STDOUT_CALLBACK="default")
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), PLAYBOOK, *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_healthy_cluster_passes_with_every_check_measured(cluster):
    make, log, scratch = cluster
    res = run(make())
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr
    out = res.stdout
    for check in ("gpu_count", "gpu_health", "gpu_xid", "gpu_ecc_counts", "gpu_throttle", "h2d_bandwidth",
                  "nccl_all_reduce_node", "nccl_alltoall_node", "nccl_all_reduce_cluster", "nccl_alltoall_cluster",
                  "fs_write", "fs_read"):
        assert f"{check}" in out
    # 16 checks pass on each node; ib_link_flaps skips (this machine has no /sys/class/infiniband).
    assert "2 node(s): 32 passed, 0 failed, 2 skipped checks" in out
    calls = log.read_text()
    assert "nvidia-smi -q -d ECC" in calls and "nvidia-smi -q -d PERFORMANCE" in calls
    assert "all_reduce_perf -b 8G -e 8G -f 2 -c 1 -n 20 -g 8" in calls
    assert "nvbandwidth -t host_to_device_memcpy_ce device_to_host_memcpy_ce" in calls
    mpirun = [line for line in calls.splitlines() if line.startswith("mpirun")]
    assert len(mpirun) == 2  # all_reduce and alltoall, once per cluster, from the head
    assert "-np 16 --hostfile" in mpirun[0] and "--map-by ppr:8:node" in mpirun[0]
    assert list(scratch.iterdir()) == []  # the mount test cleaned up after itself
    assert (f"elbencho --write --read --mkdirs --delfiles --deldirs --threads 2 --dirs 1 --files 2 --size 4m "
            f"--block 1m {scratch}/.amlhpc-elbencho-n1") in calls
    assert "4241.5 MB/s (elbencho)" in out  # 4045 MiB/s, last-done column
    assert "MB/s (amlhpc_fs_bench)" in out


def recap(out: str) -> dict[str, dict[str, int]]:
    tail = out.split("PLAY RECAP")[-1]
    return {host: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counters)}
            for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", tail, re.M)}


def test_three_host_tasks_per_node_besides_the_gates_run_once_tasks(cluster):
    """The controller's cost per node: Ansible's check of the role's variables, the node measured
    and judged in one task (healthcheck_node), its verdicts kept (set_fact); the cluster run and
    the gate run once, on the first node."""
    make, _unused, _unused = cluster
    res = run(make())
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr
    counts = recap(res.stdout)
    tasks = {h: c["ok"] + c["skipped"] + c["failed"] for h, c in counts.items()}
    # and the skipped includes of the pair gate (healthcheck_pairs: false) and of the node's verdict file
    assert tasks["n1"] == 5, res.stdout[-3000:]
    # n0: its own four, the cluster's two mpirun runs (one looped task), the skipped pair gate
    # include, the table, its display, the verdict's run-once tasks (the decision, health.json's
    # folder and file, its display, the stop skipped as nothing failed) and the skipped include
    # of the node's file
    assert tasks["n0"] == 13, res.stdout[-3000:]


def test_a_role_variable_of_the_wrong_type_is_refused_by_name(cluster):
    make, _unused, _unused = cluster
    res = run(make(healthcheck_fs_files="many"))
    assert res.returncode != 0
    assert "Validation of arguments failed" in res.stdout and "healthcheck_fs_files" in res.stdout


def test_slow_node_is_named_and_the_run_stops(cluster):
    make, _unused, _unused = cluster
    res = run(make(n1_all_reduce="all_reduce_ndv4_node_slow.txt", n1_gpu_csv="nvsmi_gpu_ndv4_ecc.csv"))
    assert res.returncode != 0
    # one sentence for the bad node: each failed check with its figure and threshold, then the fix
    assert ("health check failed on 1 of 2 node(s). n1 failed gpu_health 1 problem(s) (needs 0 problems) (GPU 5 "
            "(0000000C:00:00.0): 2 uncorrectable ECC error(s) since boot); nccl_all_reduce_node 171.1 GB/s @ "
            "8589934592 B (needs >= 228 GB/s) (busbw at 8589934592 B 171.1 GB/s is below 228 GB/s); fix: reset the "
            "GPU (reboot the node); if the errors stay leave it out (the inventory's node_filter) until AmlCompute "
            "replaces the VM. (healthcheck_on_failure: exclude with healthcheck_spare_nodes: N trains on the other "
            "nodes.)" in res.stdout)
    assert "n0 failed" not in res.stdout


def test_ignore_failures_goes_on_with_a_warning(cluster):
    make, _unused, _unused = cluster
    res = run(make(n1_gpu_csv="nvsmi_gpu_ndv4_7gpus.csv", healthcheck_ignore_failures=True))
    assert res.returncode == 0, res.stdout[-3000:]
    assert "IGNORED (healthcheck_ignore_failures: true): health check failed on 1 of 2 node(s). n1 failed " \
           "gpu_count 7 (needs == 8) (found 7 GPUs, expected 8 for Standard_ND96asr_v4); fix: " in res.stdout


def test_check_mode_measures_read_only_and_writes_nothing(cluster):
    make, log, scratch = cluster
    res = run(make(), "--check")
    assert res.returncode == 0, res.stdout[-3000:]
    assert "check mode: the test writes files" in res.stdout
    assert "nvidia-smi --query-gpu" in log.read_text()  # read-only probes still ran
    assert list(scratch.iterdir()) == []


def _module_runs(out: str) -> int:
    """healthcheck_node module runs in a -vvv log: Ansible says which module file it sends, whether
    pipelined (the interpreter alone, fed the payload) or from a file; a -c probe sends none."""
    return len(re.findall(r"^Using module file \S*/healthcheck_node\.py$", out, re.M))


def _probe_runs(out: str) -> int:
    return len(re.findall(rf"EXEC /bin/sh -c '?{re.escape(sys.executable)} -c", out))


def test_each_node_is_measured_with_one_shell_command_not_a_module_run(cluster):
    """The node's Python is known (here ansible_python_interpreter): the module's probe runs as
    one command, without Ansible's module payload, and the checks, the table and the gate are
    the same (the other tests of this file run the same way)."""
    make, log, scratch = cluster
    res = run(make(), "-vvv")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr
    assert _module_runs(res.stdout) == 0, res.stdout[-3000:]
    assert _probe_runs(res.stdout) == 2
    assert "2 node(s): 32 passed, 0 failed, 2 skipped checks" in res.stdout
    assert "elbencho --write --read" in log.read_text() and list(scratch.iterdir()) == []


def test_a_mount_folder_to_create_is_left_to_the_module(cluster, tmp_path):
    """healthcheck_fs_path_create with the folder missing is a change: the module makes the
    folder and measures in it (one module run per node), and the next run measures without."""
    make, _unused, _unused = cluster
    folder = tmp_path / "new-scratch"
    # a folder of each node's own (the two stand-in nodes share this machine's disk)
    inv = make(healthcheck_fs_path=f"{folder}/{{{{ inventory_hostname }}}}", healthcheck_fs_path_create=True)
    first = run(inv, "-vvv")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr
    assert _module_runs(first.stdout) == 2 and _probe_runs(first.stdout) == 2  # looked, then the module
    assert sorted(p.name for p in folder.iterdir()) == ["n0", "n1"]
    assert re.findall(r"^n\d\s+: ok=\d+\s+changed=(\d+)", first.stdout, re.M) == ["1", "1"]
    second = run(inv, "-vvv")
    assert second.returncode == 0, second.stdout[-4000:]
    assert _module_runs(second.stdout) == 0 and _probe_runs(second.stdout) == 2
    assert re.findall(r"^n\d\s+: ok=\d+\s+changed=(\d+)", second.stdout, re.M) == ["0", "0"]
    assert "2 node(s): 32 passed, 0 failed, 2 skipped checks" in second.stdout


def test_exclude_leaves_the_failing_node_out_and_writes_the_verdict(cluster, tmp_path):
    make, _unused, _unused = cluster
    verdict = tmp_path / "outputs" / "cf" / "health.json"
    res = run(make(n1_gpu_csv="nvsmi_gpu_ndv4_ecc.csv", healthcheck_on_failure="exclude", healthcheck_spare_nodes=1,
                   healthcheck_verdict_file=str(verdict),
                   healthcheck_node_verdict_file=str(tmp_path / "node" / "health-verdict.json")))
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr
    assert ("excluding 1 of 2 node(s) (healthcheck_spare_nodes: 1): n1 (gpu_health: GPU 5 (0000000C:00:00.0): "
            "2 uncorrectable ECC error(s) since boot). Training goes on with the 1 other node(s): n0.") in res.stdout
    doc = json.loads(verdict.read_text())
    assert doc["action"] == "exclude" and doc["job_nodes"] == ["n0"] and doc["excluded"] == ["n1"]
    gpu = next(c for c in doc["nodes"]["n1"]["checks"] if c["check"] == "gpu_health")
    assert gpu["status"] == "fail" and gpu["threshold"] == "0 problems" and gpu["value"] == "1 problem(s)"
    assert {c["check"]: c["status"] for c in doc["nodes"]["n0"]["checks"]}["nccl_all_reduce_node"] == "pass"
    # Both stand-in nodes are this machine: the file holds the last node written, in the launcher's shape.
    node = json.loads((tmp_path / "node" / "health-verdict.json").read_text())
    assert node["id"] == doc["verdict_id"] and node["rendezvous"] == "n0:29400" and node["max_nodes"] == 1


def test_exclude_stops_when_more_nodes_fail_than_there_are_spares(cluster, tmp_path):
    make, _unused, _unused = cluster
    verdict = tmp_path / "health.json"
    res = run(make(n1_gpu_csv="nvsmi_gpu_ndv4_ecc.csv", healthcheck_on_failure="exclude",
                   healthcheck_verdict_file=str(verdict)))
    assert res.returncode != 0
    assert ("1 node(s) failed the health check but healthcheck_spare_nodes allows 0: n1 (gpu_health: GPU 5 "
            "(0000000C:00:00.0): 2 uncorrectable ECC error(s) since boot). Replace or repair them, or raise "
            "healthcheck_spare_nodes to 1 to train on the others.") in res.stdout
    assert json.loads(verdict.read_text())["action"] == "stop"  # written before the run stopped


def test_a_rerun_with_the_same_verdict_changes_nothing_on_any_node(cluster, tmp_path):
    # Issue 42, item 6: n0 fails a check whose figure differs on every run (its mount's write
    # throughput, measured by the project's reader, against a floor it cannot meet) and is excluded. The rerun's verdict is the
    # same: nothing changes on either node, the excluded one included (its verdict file holds
    # the failed checks by name, not the figures), and health.json lists each check once.
    make, _unused, _unused = cluster
    inv = make(healthcheck_on_failure="exclude", healthcheck_spare_nodes=1,
               healthcheck_verdict_file=str(tmp_path / "outputs" / "cf" / "health.json"))
    doc = yaml.safe_load(inv.read_text())
    for name in ("n0", "n1"):
        doc["all"]["hosts"][name]["healthcheck_node_verdict_file"] = str(tmp_path / "node" / f"{name}.json")
    doc["all"]["hosts"]["n0"]["healthcheck_thresholds"] = {"default": {"fs_write_mbps": 1e9, "fs_read_mbps": 1}}
    inv.write_text(yaml.safe_dump(doc))
    first = run(inv)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr
    assert "excluding 1 of 2 node(s)" in first.stdout and "n0 (fs_write: " in first.stdout
    second = run(inv)
    assert second.returncode == 0, second.stdout[-4000:]
    assert re.findall(r"^n\d\s+: ok=\d+\s+changed=(\d+)", second.stdout, re.M) == ["0", "0"], second.stdout[-3000:]
    node = json.loads((tmp_path / "node" / "n0.json").read_text())
    assert node["status"] == "excluded" and node["checks"] == ["fs_write"] and "MB/s" not in json.dumps(node)
    health = json.loads((tmp_path / "outputs" / "cf" / "health.json").read_text())
    for name, entry in health["nodes"].items():
        checks = [c["check"] for c in entry["checks"]]
        assert len(checks) == len(set(checks)), (name, checks)
