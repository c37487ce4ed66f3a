"""Issue 10, defect 3: the health checks run with the privileges they need when Ansible logs
in as AmlCompute's non-root admin user (the twin's azureuser).

The nodes get stand-in GPU tools (the fixtures of tests/unit/.../fixtures/health, replayed)
in a folder named by healthcheck_tool_dirs, as a user would point at nccl-tests. The stand-in
mpirun does what mpirun's SSH launcher does first: it reaches every host of the hostfile over
SSH as the user it runs as, with host keys checked, and fails like mpirun when one refuses.
Everything else is real: ssh_trust, the health role, the mount test on the root-owned
/mnt/scratch, dmesg in a container that may not read the kernel log.
"""

from __future__ import annotations

import re
import subprocess
import sys

from project_copy import project_env
from test_multinode import ANSIBLE_PLAYBOOK, ROOT, user_inventory

sys.path.insert(0, str(ROOT / "tests"))

from twin.cluster import Twin, free_base_port  # noqa: E402

FIX = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "health"
TOOLS = "/opt/amlhpc-standin-tools"


def replay(name: str) -> str:
    return f"cat <<'FIXTURE'\n{(FIX / name).read_text()}FIXTURE\n"


STANDINS = {
    "nvidia-smi": "case \"$*\" in\n  *--query-gpu=*) " + replay("nvsmi_gpu_ndv4_ok.csv")
                  + ";;\n  *--query-remapped-rows=*) " + replay("nvsmi_remap_ndv4_ok.csv")
                  + ";;\n  \"nvlink -s\") " + replay("nvlink_a100_ok.txt") + ";;\n  *) exit 2 ;;\nesac\n",
    "all_reduce_perf": replay("all_reduce_ndv4_node_ok.txt"),
    "alltoall_perf": replay("alltoall_ndv4_2node_sweep.txt"),
    "mpirun": """hostfile=
args="$*"
while [ $# -gt 0 ]; do
  case "$1" in --hostfile) hostfile=$2; shift ;; */all_reduce_perf|*/alltoall_perf) tool=$1; shift; break ;; esac
  shift
done
for host in $(awk '{print $1}' "$hostfile"); do
  ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=5 "$host" true || {
    echo "ORTE was unable to reliably start one or more daemons: ssh to $host as $(id -un) failed" >&2; exit 1; }
done
exec "$tool" "$@"
""",
}


def test_health_checks_as_the_admin_user(tmp_path, project):
    with Twin(2, tmp_path / "twin", prefix="amlhpc-twin-health", base_port=free_base_port(2)) as twin:
        for node in twin.nodes:
            for name, body in STANDINS.items():
                script = f"mkdir -p {TOOLS} && cat > {TOOLS}/{name} <<'STANDIN'\n#!/bin/sh\n{body}STANDIN\n" \
                         f"chmod 0755 {TOOLS}/{name}"
                assert twin.exec(node, "sh", "-c", script).returncode == 0
        group_vars = {
            "ansible_ssh_private_key_file": str(twin.key),
            "healthcheck_tool_dirs": [TOOLS],
            "healthcheck_fs_files": 2,
            "healthcheck_fs_file_size_mb": 4,
            # Two nodes are one pair, which the gate cannot judge against itself: the floors a user of a
            # size outside the table sets (the stand-in replays an ND A100 v4 node's nccl-tests table).
            "healthcheck_pair_thresholds": {"default": {"nccl": 100, "iperf3": 0.05}},
        }
        inv = user_inventory(twin, tmp_path / "inventory", "hc", group_vars)
        # Check mode on nodes where nothing was done yet runs through and says what it would do
        # (the head's .ssh folder and key included), and changes nothing.
        check = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "site.yml", "--tags", "ssh_trust,healthcheck",
                                "--check", "--diff"], cwd=project, env=project_env(project),
                               capture_output=True, text=True, timeout=900, check=False)
        (tmp_path / "check.log").write_text(check.stdout + check.stderr)
        assert check.returncode == 0, check.stdout[-6000:] + check.stderr[-2000:]
        assert re.search(r"hc-0: would generate a \w+ key at /root/\.ssh/id_\w+ \(its folder /root/\.ssh is made first\)",
                         check.stdout), check.stdout[-6000:]
        assert twin.exec(twin.nodes[0], "test", "-e", "/root/.ssh").returncode != 0  # nothing made
        res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "site.yml", "--tags", "ssh_trust,healthcheck"],
                             cwd=project, env=project_env(project), capture_output=True, text=True, timeout=900,
                             check=False)
        out = res.stdout
        (tmp_path / "run.log").write_text(out + res.stderr)
        assert res.returncode == 0, out[-6000:] + res.stderr[-2000:]
        table = out[out.index("Show the pass/fail table"):]
        rows = {check: re.findall(rf"^.*\b{check}\b.*$", table, re.M)
                for check in ("nccl_all_reduce_cluster", "nccl_alltoall_cluster", "fs_write", "fs_read", "gpu_xid")}
        # mpirun reached every node over SSH as root (the user ssh_trust trusts): measured.
        for check in ("nccl_all_reduce_cluster", "nccl_alltoall_cluster", "fs_write", "fs_read"):
            assert rows[check] and all("pass" in r.lower() for r in rows[check]), (check, rows[check])
        # dmesg ran as root; a container may still not read the kernel log: the table says why.
        assert rows["gpu_xid"] and all("Operation not permitted" in r or "pass" in r.lower()
                                       for r in rows["gpu_xid"]), rows["gpu_xid"]
