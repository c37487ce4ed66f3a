#!/usr/bin/env python3
"""The nodes phase done the way NAG's ClusterConnector drives nodes: parallel-ssh
(``pssh.clients.ParallelSSHClient``, libssh2), one command per node per step, no Ansible.

The same checks and writes as playbooks/nodes.yml with the roles' defaults:
  head:   root's key made once on the head (RSA 4096), its public half read back,
          every node's host keys scanned over the private IPs (ssh-keyscan, retried)
  nodes:  the head's key in root's authorized_keys, /etc/amlhpc/nodefile, the managed
          known_hosts block; NVMe probe (lsblk, mdadm --detail); GPU clock query
          (nvidia-smi when present); NCCL: instance metadata (3 s timeout), SHARP plugin
          look-up, nvidia-smi topo -m, /etc/nccl.conf and /etc/amlhpc/nccl.env, no
          topology file for an unknown VM size
  head:   root reaches every node by private IP with BatchMode (the trust check)
Each write happens only when the content differs; the script prints how many files it
changed per node. Contents come from the same pure functions the roles use
(plugins/module_utils/amlhpc), so after an Ansible run this script changes nothing.

    python bench/pssh_nodes.py --nodes-file nodes.json --key id_controller [--user azureuser]
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path

import yaml
from pssh.clients import ParallelSSHClient
from pssh.config import HostConfig

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from amlhpc.nccl import choose_pinning, nccl_conf_content, nccl_env_content  # noqa: E402

# Runs on each node as root (python3 is there: Ansible needs it too).
NODE_SCRIPT = r'''
import json, os, subprocess, sys, urllib.request
a = json.loads(sys.argv[1])
changed = []

def write(path, text, mode=0o644):
    try:
        with open(path) as fh:
            if fh.read() == text:
                return
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".amlhpc-tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    changed.append(path)

def run(*argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except OSError:
        return None

# ssh_trust: authorized_keys, nodefile, known_hosts block
os.makedirs("/root/.ssh", mode=0o700, exist_ok=True)
ak = "/root/.ssh/authorized_keys"
try:
    lines = open(ak).read().splitlines()
except OSError:
    lines = []
if a["key"] not in lines:
    write(ak, "\n".join(lines + [a["key"]]) + "\n", 0o600)
write(a["nodefile"], "\n".join(a["ips"]) + "\n")
begin, end = "# BEGIN " + a["marker"], "# END " + a["marker"]
try:
    kh = open(a["known_hosts"]).read().splitlines()
except OSError:
    kh = []
block = [begin] + a["known"] + [end]
if begin in kh and end in kh:
    i, j = kh.index(begin), kh.index(end)
    new = kh[:i] + block + kh[j + 1:]
else:
    new = kh + block
write(a["known_hosts"], "\n".join(new) + "\n")

# nvme_raid: the probe (read-only)
run("lsblk", "-J", "-b", "-o", "NAME,PATH,TYPE,SIZE,MODEL,SERIAL,TRAN,MOUNTPOINT,FSTYPE,PTTYPE,PKNAME")
run("mdadm", "--detail", "--export", a["md"])

# gpu_clocks: the clock query (nothing to pin without nvidia-smi)
run("nvidia-smi", "--query-gpu=index,clocks.applications.graphics,clocks.applications.memory,"
    "clocks.max.graphics,clocks.max.memory", "--format=csv,noheader,nounits")

# nccl: VM size, SHARP plugin, topology, files
try:
    req = urllib.request.Request(a["imds"], headers={"Metadata": "true"})
    urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=3).read()
except Exception:
    pass
os.path.exists("/usr/local/nccl-rdma-sharp-plugins/lib/libnccl-net.so")
run("nvidia-smi", "topo", "-m")
os.makedirs("/etc/amlhpc", mode=0o755, exist_ok=True)
if os.path.exists(a["topo_dest"]):
    os.remove(a["topo_dest"]); changed.append(a["topo_dest"])
write("/etc/nccl.conf", a["nccl_conf"])
write("/etc/amlhpc/nccl.env", a["nccl_env"])
print(json.dumps(changed))
'''

HEAD_SCRIPT = r'''
import json, os, subprocess, sys, time
a = json.loads(sys.argv[1])
os.makedirs("/root/.ssh", mode=0o700, exist_ok=True)
key = "/root/.ssh/id_rsa"
made = False
if not os.path.exists(key):
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "4096", "-N", "", "-C", a["comment"], "-f", key], check=True)
    made = True
pub = " ".join(open(key + ".pub").read().split()[:2])
for attempt in range(6):
    scan = subprocess.run(["ssh-keyscan", "-T", "10", "-t", "ed25519,ecdsa,rsa", *a["ips"]],
                          capture_output=True, text=True).stdout
    if all(any(l.startswith(ip + " ") for l in scan.splitlines()) for ip in a["ips"]):
        break
    time.sleep(3)
print(json.dumps({"pub": pub, "scan": scan, "made": made}))
'''

VERIFY_SCRIPT = r'''
import json, subprocess, sys
a = json.loads(sys.argv[1])
bad = [ip for ip in a["ips"] if subprocess.run(
    ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10",
     "-i", "/root/.ssh/id_rsa", "root@" + ip, "true"], capture_output=True).returncode != 0]
print(json.dumps(bad))
'''


def remote(script: str, args: dict) -> str:
    """`sudo python3 -c <script> <json>` as one shell command line."""
    code = base64.b64encode(script.encode()).decode()
    payload = base64.b64encode(json.dumps(args).encode()).decode()
    return (f"sudo python3 -c \"import base64,sys; sys.argv[1]=base64.b64decode(sys.argv[1]).decode(); "
            f"exec(base64.b64decode('{code}'))\" {payload}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes-file", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--user", default="azureuser")
    ap.add_argument("--cluster", default="bench")
    ap.add_argument("--address", default="127.0.0.1")
    args = ap.parse_args()

    nodes = sorted(json.loads(Path(args.nodes_file).read_text()), key=lambda n: int(n["port"]))
    ips = [n["privateIpAddress"] for n in nodes]
    hosts = [args.address] * len(nodes)
    config = [HostConfig(port=int(n["port"]), user=args.user, private_key=args.key) for n in nodes]
    client = ParallelSSHClient(hosts, host_config=config, pool_size=max(len(nodes), 1), timeout=60)
    head = ParallelSSHClient([args.address], host_config=config[:1], timeout=60)

    def one(cl: ParallelSSHClient, cmd: str) -> list[str]:
        out = cl.run_command(cmd)
        cl.join(out)
        texts = []
        for o in out:
            text = "\n".join(o.stdout)
            if o.exit_code != 0:
                sys.exit(f"{o.host}:{o.client.port if o.client else '?'} rc {o.exit_code}: "
                         + "\n".join(o.stderr)[-2000:])
            texts.append(text)
        return texts

    comment = f"amlhpc-head@{args.cluster}"
    head_out = json.loads(one(head, remote(HEAD_SCRIPT, {"ips": ips, "comment": comment}))[0])
    scan_lines = []
    for line in head_out["scan"].splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith("#") and parts[0] in ips:
            scan_lines.append(tuple(parts[:3]))
    order = {ip: i for i, ip in enumerate(ips)}
    known = [" ".join(e) for e in sorted(set(scan_lines), key=lambda e: (order[e[0]], e[1], e[2]))]

    defaults = yaml.safe_load((ROOT / "roles" / "nccl" / "defaults" / "main.yml").read_text())
    pinning = choose_pinning({"known": False, "reason": "no nvidia-smi topo -m output"}, "")
    node_args = {
        "key": f"{head_out['pub']} {comment}", "ips": ips, "nodefile": "/etc/amlhpc/nodefile",
        "known_hosts": "/etc/ssh/ssh_known_hosts", "marker": f"amlhpc ssh_trust: cluster {args.cluster}",
        "known": known, "md": "/dev/md128", "imds": defaults["nccl_imds_url"],
        "topo_dest": defaults["nccl_topo_file_dest"],
        "nccl_conf": nccl_conf_content(defaults["nccl_conf_settings"], None),
        "nccl_env": nccl_env_content(defaults["nccl_env"], [], pinning, None),
    }
    changed = [json.loads(t) for t in one(client, remote(NODE_SCRIPT, node_args))]
    bad = json.loads(one(head, remote(VERIFY_SCRIPT, {"ips": ips}))[0])
    if bad:
        sys.exit(f"root on the head does not reach {', '.join(bad)}")
    total = sum(len(c) for c in changed) + int(head_out["made"])
    print(json.dumps({"nodes": len(nodes), "changed_files": total, "per_node": [len(c) for c in changed]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
