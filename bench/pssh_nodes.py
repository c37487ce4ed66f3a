#!/usr/bin/env python3
"""The nodes phase done the way NAG's ClusterConnector drives nodes: parallel-ssh
(``pssh.clients.ParallelSSHClient``, libssh2), one command per node per step, no Ansible.

The same checks and writes as playbooks/nodes.yml with the roles' defaults:
  head:   root's key made once on the head (RSA 4096), its public half read back,
          every node's host keys from the controller's known_hosts (--known-hosts, as the
          role takes them), else scanned over the private IPs (ssh-keyscan, retried)
  nodes:  the head's key in root's authorized_keys, /etc/amlhpc/nodefile, the managed
          known_hosts block; NVMe probe (lsblk, mdadm --detail); GPU clock query
          (nvidia-smi when present); NCCL: instance metadata (3 s timeout), SHARP plugin
          look-up, nvidia-smi topo -m, /etc/nccl.conf and /etc/amlhpc/nccl.env, no
          topology file for an unknown VM size
  head:   root reaches every node by private IP with BatchMode (the trust check, 64 at a time)
With --site, also what the whole site.yml does on every node when everything is in place
(its second run; BeeOND off, no GPU tools on the twin):
  nodes:  the health check's tool look-up, the nodefile, the shared-mount write/read test
          (plugins/module_utils/amlhpc/health/fsbench.py, the healthcheck's own code, same files,
          size and writers), azcopy's version, the stage folder, and this node's staged
          shard checked file by file against the plan (azcopy_sync.plan_sync, as
          azcopy_stage does), the plan made as azcopy_shards makes it (the container listed
          with a SAS, suffix mode). The controller-side plays (validate, prepare the data
          set, submit, report) have no node work and no pssh counterpart.
Each write happens only when the content differs; the script prints how many files it
changed per node. Contents come from the same pure functions the roles use
(plugins/module_utils/amlhpc), so after an Ansible run this script changes nothing.
The script and its arguments go to each node on stdin (a command line over about 32 KiB
is refused by libssh2 with InvalidRequestError).

    python bench/pssh_nodes.py --nodes-file nodes.json --key id_controller [--user azureuser]
        [--site --hosts h0,h1 --account-url URL --account-key KEY]
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

from amlhpc.nodes.nccl import choose_pinning, nccl_conf_content, nccl_env_content  # noqa: E402
from amlhpc.trust.ssh_trust import controller_host_keys, endpoint  # noqa: E402

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
if not a["vm_size"]:  # the role asks the instance metadata only where the inventory names no VM size
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

site = a.get("site")
if site:
    # the plugins' own module_utils (fsbench, azcopy_sync), shipped as a zip as AnsiballZ would
    import base64, tempfile, zlib
    lib = tempfile.NamedTemporaryFile(suffix=".zip", delete=False)
    lib.write(zlib.decompress(base64.b64decode(site["lib"]))); lib.close()
    sys.path.insert(0, lib.name)
    try:
        # healthcheck: the measurement tools, the nodefile, the shared mount's write/read test
        for tool in site["tools"]:
            run("sh", "-c", "command -v " + tool)
        os.path.exists(a["nodefile"])
        from amlhpc.health import fsbench
        fsbench.run(site["fs_path"], files=site["fs_files"], file_size=site["fs_file_size_mb"] * 2**20,
                    parallel=site["fs_parallel"])
        # stage: azcopy's version, the stage folder, and this node's shard on disk against the plan
        run(site["azcopy"], "--version")
        os.makedirs(site["stage_dir"], mode=0o755, exist_ok=True)
        from amlhpc.staging.azcopy_files import ExpectedFile
        from amlhpc.staging.azcopy_sync import plan_sync
        shard = site["shard"]
        expected = [ExpectedFile(r["name"], r.get("raw_size"), bool(r.get("gzip")), r.get("sha256") or None, r.get("size"))
                    for r in shard["expected"]]
        todo = plan_sync(stage_dir=site["stage_dir"], rank=shard["rank"], expected=expected, decompress=True,
                         verify="size")
        if todo["fetch"]:
            sys.exit("not staged: " + ", ".join(sorted(todo["fetch"])[:5]))
    finally:
        os.unlink(lib.name)
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
scan = ""
for attempt in range(6 if a["scan"] else 0):
    scan = subprocess.run(["ssh-keyscan", "-T", "10", "-t", "ed25519,ecdsa,rsa", *a["ips"]],
                          capture_output=True, text=True).stdout
    if all(any(l.startswith(ip + " ") for l in scan.splitlines()) for ip in a["ips"]):
        break
    time.sleep(3)
print(json.dumps({"pub": pub, "scan": scan, "made": made}))
'''

VERIFY_SCRIPT = r'''
import json, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
a = json.loads(sys.argv[1])
def refused(ip):
    return subprocess.run(
        ["ssh", "-n", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10",
         "-i", "/root/.ssh/id_rsa", "root@" + ip, "true"], capture_output=True).returncode != 0
with ThreadPoolExecutor(64) as pool:  # as the role: 64 at a time (ssh_trust_verify_parallel)
    bad = [ip for ip, no in zip(a["ips"], pool.map(refused, a["ips"])) if no]
print(json.dumps(bad))
'''


# The command line stays short: the script and its arguments travel on stdin. libssh2 refuses
# an exec request that does not fit in one SSH packet (about 32 KiB): a long command line
# failed with ssh2.exceptions.InvalidRequestError (LIBSSH2_ERROR_INVAL, "invalid request").
RUNNER = ("sudo python3 -c 'import json, sys; d = json.load(sys.stdin); sys.argv[1:] = [d[\"args\"]]; "
          "exec(d[\"script\"])'")


def remote(script: str, args: dict) -> bytes:
    """What RUNNER reads on stdin: the script and its arguments (JSON)."""
    return json.dumps({"script": script, "args": json.dumps(args)}).encode()


def _lib() -> str:
    """plugins/module_utils/amlhpc as a zip (package ``amlhpc``), compressed, base64."""
    import io
    import zipfile
    import zlib
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in ("__init__", "health/__init__", "health/fsbench", "staging/__init__", "staging/azcopy_sync",
                     "staging/azcopy_cmd", "staging/azcopy_files", "staging/azcopy_progress", "staging/azcopy_sas",
                     "staging/azcopy_lock", "staging/azcopy_model", "staging/azcopy_paths", "staging/shards",
                     "data/__init__", "data/tfrecord"):
            zf.write(ROOT / "plugins" / "module_utils" / "amlhpc" / f"{name}.py", f"amlhpc/{name}.py")
    return base64.b64encode(zlib.compress(buf.getvalue(), 9)).decode()


def site_args(args: argparse.Namespace, count: int) -> list[dict]:
    """Per node: what site.yml checks there after the nodes phase. The shard plan is made as
    azcopy_shards makes it (the container listed with a SAS, suffix mode)."""
    from datetime import datetime, timedelta, timezone

    from amlhpc.sdk.blob_listing import account_name, list_blobs
    from amlhpc.staging.shards import plan_shards, plan_summary
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    now = datetime.now(timezone.utc)
    sas = generate_container_sas(account_name(args.account_url), args.container, account_key=args.account_key,
                                 permission=ContainerSasPermissions.from_string("rl"),
                                 start=now - timedelta(minutes=5), expiry=now + timedelta(hours=1))
    listing = list_blobs(args.account_url, args.container, "", credential=sas)
    hosts = args.hosts.split(",") if args.hosts else [f"node-{i}" for i in range(count)]
    plan = plan_summary(plan_shards(hosts, "suffix", listing), "suffix", listed=True)
    lib = _lib()
    tools = ["nvidia-smi", "nvbandwidth", "bandwidthTest", "all_reduce_perf", "alltoall_perf", "elbencho", "mpirun"]
    return [{"lib": lib, "tools": tools, "fs_path": args.fs_path, "fs_files": args.fs_files,
             "fs_file_size_mb": args.fs_file_size_mb, "fs_parallel": args.fs_parallel, "azcopy": args.azcopy,
             "stage_dir": args.stage_dir, "shard": plan["shards"][h]} for h in hosts]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes-file", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--user", default="azureuser")
    ap.add_argument("--cluster", default="bench")
    ap.add_argument("--address", default="127.0.0.1")
    ap.add_argument("--vm-size", default="", help="the VM size the inventory names (none: nccl asks the instance "
                                                   "metadata, as the role does)")
    ap.add_argument("--site", action="store_true",
                    help="also what the whole site.yml does on every node on a second run: the health check's "
                         "tool look-up and shared-mount write/read test, and the staged shard checked against the plan")
    ap.add_argument("--hosts", default="", help="site: the inventory names, comma-separated, in rank order")
    ap.add_argument("--account-url", default="")
    ap.add_argument("--container", default="cosmoflow")
    ap.add_argument("--account-key", default="")
    ap.add_argument("--stage-dir", default="/mnt/scratch/cosmoflow")
    ap.add_argument("--fs-path", default="/mnt/scratch")
    ap.add_argument("--fs-files", type=int, default=2)
    ap.add_argument("--fs-file-size-mb", type=int, default=8)
    ap.add_argument("--fs-parallel", type=int, default=8)
    ap.add_argument("--azcopy", default="/usr/local/bin/azcopy")
    ap.add_argument("--known-hosts", default="",
                    help="the controller's known_hosts (the inventory plugin's file): take the nodes' host keys from "
                         "it, as the ssh_trust role does, and scan from the head only where a node has none there")
    args = ap.parse_args()

    nodes = sorted(json.loads(Path(args.nodes_file).read_text()), key=lambda n: int(n["port"]))
    ips = [n["privateIpAddress"] for n in nodes]
    hosts = [args.address] * len(nodes)
    config = [HostConfig(port=int(n["port"]), user=args.user, private_key=args.key) for n in nodes]
    client = ParallelSSHClient(hosts, host_config=config, pool_size=max(len(nodes), 1), timeout=60,
                               num_retries=3, retry_delay=2)
    head = ParallelSSHClient([args.address], host_config=config[:1], timeout=60, num_retries=3, retry_delay=2)

    retried: list[str] = []

    def one(cl: ParallelSSHClient, stdin: bytes | list[bytes], attempts: int = 3) -> list[str]:
        """RUNNER on every host of the client with ``stdin`` (one payload for all, or one per
        host), the outputs in order. A host whose SSH session fails (a libssh2 error) gets the
        command again on a new connection, up to ``attempts`` times; the retries are
        reported. A command that ran and failed is not retried."""
        texts: list[str | None] = [None] * len(cl.hosts)
        todo = list(range(len(cl.hosts)))
        for attempt in range(attempts):
            client = cl if attempt == 0 else ParallelSSHClient(
                [cl.hosts[i] for i in todo], host_config=[cl.host_config[i] for i in todo],
                pool_size=max(len(todo), 1), timeout=60, num_retries=3, retry_delay=2)
            out = client.run_command(RUNNER, stop_on_errors=False)
            for i, o in zip(todo, out):
                if o.exception is None:
                    try:  # the payload on stdin, then EOF
                        data = stdin[i] if isinstance(stdin, list) else stdin
                        o.client.eagain_write(o.channel.write, data)
                        o.client.eagain(o.channel.send_eof)
                    except Exception as exc:  # noqa: BLE001 - retried below like a failed session
                        o.exception = exc
            client.join(out)
            failed = []
            for i, o in zip(todo, out):
                if o.exception is not None:
                    failed.append(i)
                    retried.append(f"{type(o.exception).__name__} on {o.host}:{cl.host_config[i].port}")
                    continue
                if o.exit_code != 0:
                    sys.exit(f"{o.host}:{cl.host_config[i].port} rc {o.exit_code}: " + "\n".join(o.stderr)[-2000:])
                texts[i] = "\n".join(o.stdout)
            todo = failed
            if not todo:
                return [t or "" for t in texts]
        sys.exit(f"no SSH session after {attempts} attempts: {'; '.join(retried[-len(todo):])}")

    comment = f"amlhpc-head@{args.cluster}"
    from_controller = controller_host_keys(
        Path(args.known_hosts).read_text() if args.known_hosts else "",
        [endpoint({"ansible_host": args.address, "ansible_port": n["port"]}) for n in nodes], ips)
    scan = bool(from_controller["missing"])
    head_out = json.loads(one(head, remote(HEAD_SCRIPT, {"ips": ips, "comment": comment, "scan": scan}))[0])
    scan_lines = []
    for line in head_out["scan"].splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith("#") and parts[0] in ips:
            scan_lines.append(tuple(parts[:3]))
    order = {ip: i for i, ip in enumerate(ips)}
    known = ([" ".join(e) for e in sorted(set(scan_lines), key=lambda e: (order[e[0]], e[1], e[2]))] if scan
             else from_controller["lines"])

    defaults = yaml.safe_load((ROOT / "roles" / "nccl" / "defaults" / "main.yml").read_text())
    pinning = choose_pinning({"known": False, "reason": "no nvidia-smi topo -m output"}, "")
    node_args = {
        "key": f"{head_out['pub']} {comment}", "ips": ips, "nodefile": "/etc/amlhpc/nodefile",
        "known_hosts": "/etc/ssh/ssh_known_hosts", "marker": f"amlhpc ssh_trust: cluster {args.cluster}",
        "known": known, "md": "/dev/md128", "imds": defaults["nccl_imds_url"], "vm_size": args.vm_size,
        "topo_dest": defaults["nccl_topo_file_dest"],
        "nccl_conf": nccl_conf_content(defaults["nccl_conf_settings"], None),
        "nccl_env": nccl_env_content(defaults["nccl_env"], [], pinning, None),
    }
    per_node = [dict(node_args) for _ in nodes]
    if args.site:
        for args_, site in zip(per_node, site_args(args, len(nodes))):
            args_["site"] = site
    changed = [json.loads(t) for t in one(client, [remote(NODE_SCRIPT, a) for a in per_node])]
    bad = json.loads(one(head, remote(VERIFY_SCRIPT, {"ips": ips}))[0])
    if bad:
        sys.exit(f"root on the head does not reach {', '.join(bad)}")
    total = sum(len(c) for c in changed) + int(head_out["made"])
    print(json.dumps({"nodes": len(nodes), "changed_files": total, "per_node": [len(c) for c in changed],
                      "retried": retried}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
