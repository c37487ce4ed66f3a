"""Issue 40 on the AmlCompute twin (2 nodes, node-local scratch, the stage as root with become).

1. A blob ``v07//etc/amlhpc-sentinel_000.tfrecord.gz``: in 2.1.0 the stage removed the
   root-owned ``/etc/amlhpc-sentinel_000.tfrecord`` of every node. Now the plan refuses the
   blob, naming it; the sentinel is byte for byte the same, still root's, and no node was
   touched.
2. ``kill -9`` of ``ansible-playbook`` while every node's azcopy runs (a bandwidth cap makes
   it slow): within 30 s no azcopy and no stage module is left on any node, nor anything of
   that run on the controller; a rerun right away is not refused, stages every file, and
   leaves no azcopy temporary folder (job plans with the SAS) on any node.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

from conftest import ACCOUNT_KEY, _spawn_azurite, free_port
from project_copy import project_env
from test_multinode import ANSIBLE_PLAYBOOK, ROOT, job_group_vars, user_inventory
from test_stage_safety import _alive, _tree

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from amlhpc.data.cosmoflow_data import generate  # noqa: E402
from amlhpc.data.dataset_prep import compress_all, upload_prepared  # noqa: E402
from twin.cluster import Twin, free_base_port  # noqa: E402

NODES = 2
SENTINEL = "/etc/amlhpc-sentinel_000.tfrecord"


def service(endpoint: str):
    from azure.storage.blob import BlobServiceClient
    return BlobServiceClient.from_connection_string(
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};")


def node_ps(twin: Twin, node) -> list[tuple[int, int, str]]:
    out = twin.exec(node, "ps", "-eo", "pid=,ppid=,args=").stdout
    rows = []
    for line in out.splitlines():
        pid, ppid, args = line.strip().split(None, 2) + [""] * (3 - len(line.strip().split(None, 2)))
        rows.append((int(pid), int(ppid), args))
    return rows


def test_a_root_owned_file_outside_survives_and_a_killed_controller_leaves_nothing_running(tmp_path, project):
    twin = Twin(NODES, tmp_path / "twin", prefix="stagesafe",
                base_port=free_base_port(NODES, start=54200, stop=54300))
    azurite = None
    try:
        twin.start()
        port = free_port()
        (tmp_path / "azurite").mkdir()
        azurite = _spawn_azurite(port, tmp_path / "azurite", host=twin.gateway)
        endpoint = f"http://{twin.gateway}:{port}/devstoreaccount1"
        generate(str(tmp_path / "raw"), train_universes=1, val_universes=0, cube=32)
        prepared = compress_all(str(tmp_path / "raw"), str(tmp_path / "gz"), prefix="v07")
        creds = {"account_name": "devstoreaccount1", "account_key": ACCOUNT_KEY}
        upload_prepared(prepared, endpoint, "cosmoflow", creds, create_container=True)
        names = sorted(str(p.relative_to(tmp_path / "raw")) for p in (tmp_path / "raw").rglob("*.tfrecord"))
        raw = os.urandom(2048)
        from azure.storage.blob import ContentSettings
        evil = service(endpoint).get_container_client("cosmoflow").upload_blob(
            f"v07/{SENTINEL}.gz", gzip.compress(raw), content_settings=ContentSettings(content_encoding="gzip"),
            metadata={"amlhpc_raw_bytes": str(len(raw))})
        for node in twin.nodes:
            assert twin.exec(node, "sh", "-c", f"printf 'root keeps this\\n' > {SENTINEL} && chmod 0644 {SENTINEL}"
                             ).returncode == 0
        group_vars = {**job_group_vars(twin), "stage_account_url": endpoint, "stage_container": "cosmoflow",
                      "stage_prefix": "v07", "stage_mode": "balanced",
                      "stage_azcopy_src": str(ROOT / ".tools" / "bin" / "azcopy"),
                      "prepare_dataset_account_key": ACCOUNT_KEY}
        inv = user_inventory(twin, tmp_path / "inventory", "stagesafe", group_vars)
        with open(tmp_path / "inventory" / "group_vars" / "all" / "main.yml", "a") as f:
            f.write("stage_sas: \"{{ lookup('amlhpc.azureml.blob_sas', stage_account_url, container=stage_container, "
                    "account_key=prepare_dataset_account_key) }}\"\n")
        env = project_env(project, ANSIBLE_FORCE_COLOR="0")
        cmd = [ANSIBLE_PLAYBOOK, "-i", str(inv), "playbooks/stage.yml"]

        # 1. The blob aimed at /etc: refused by the plan, named; nothing on the nodes changed.
        first = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False)
        said = " ".join((first.stdout + first.stderr).split())
        assert first.returncode != 0, first.stdout[-4000:]
        assert f"'{SENTINEL}.gz' (it starts with '/', which would make it an absolute path)" in said, said[-4000:]
        sentinels = {n.container: (twin.exec(n, "stat", "-c", "%U %a %s", SENTINEL).stdout.split(),
                                   twin.exec(n, "cat", SENTINEL).stdout) for n in twin.nodes}
        assert all(v == (["root", "644", "16"], "root keeps this\n") for v in sentinels.values()), sentinels
        assert all(twin.exec(n, "test", "-e", "/mnt/scratch/cosmoflow").returncode != 0 for n in twin.nodes)
        evil.delete_blob()

        # 2. kill -9 of the controller while every node's azcopy runs (1 Mbit/s each).
        capped = [*cmd, "-e", json.dumps({"stage_cap_mbps": 1})]
        proc = subprocess.Popen(capped, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            running: dict[str, list[int]] = {}
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and len(running) < NODES:
                time.sleep(1)
                for node in twin.nodes:
                    rows = node_ps(twin, node)
                    azcopy = [(pid, ppid) for pid, ppid, args in rows if args.startswith("/usr/local/bin/azcopy copy")]
                    if azcopy:
                        running[node.container] = [azcopy[0][0], azcopy[0][1]]  # azcopy and the module
            assert len(running) == NODES, f"azcopy ran on {sorted(running)} only"
            controller = {p for p in _tree(proc.pid) if _alive(p)}
            os.kill(proc.pid, signal.SIGKILL)
            killed = time.monotonic()
            proc.wait()
            left: dict[str, list] = {}
            while time.monotonic() - killed < 30:
                left = {c: [p for p in pids if p in {r[0] for r in node_ps(twin, n)}]
                        for n in twin.nodes for c, pids in running.items() if c == n.container}
                left = {c: p for c, p in left.items() if p}
                if not left and not any(_alive(p) for p in controller):
                    break
                time.sleep(1)
            assert not left, f"on the nodes 30 s after kill -9: {left}"
            assert not any(_alive(p) for p in controller), "the killed run's worker or ssh client is left"
        finally:
            for p in _tree(proc.pid):
                if _alive(p):
                    os.kill(p, signal.SIGKILL)

        rerun = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-2000:]
        held = set()
        for node in twin.nodes:
            out = twin.exec(node, "sh", "-c", "cd /mnt/scratch/cosmoflow && find . -name '*.tfrecord' "
                            "-not -path './.*' -printf '%P\\n'").stdout
            mine = set(out.split())
            assert not held & mine
            held |= mine
            assert twin.exec(node, "sh", "-c", "ls -d /tmp/amlhpc-azcopy-* 2>/dev/null").stdout == ""
            assert twin.exec(node, "cat", SENTINEL).stdout == "root keeps this\n"
        assert sorted(held) == names
        for n in names[:3]:  # whole, as generated
            sums = [twin.exec(node, "sh", "-c", f"sha256sum /mnt/scratch/cosmoflow/{n} 2>/dev/null").stdout.split()[:1]
                    for node in twin.nodes]
            assert [hashlib.sha256((tmp_path / "raw" / n).read_bytes()).hexdigest()] in sums, n
    finally:
        if azurite is not None:
            os.killpg(azurite.pid, 15)
            azurite.wait(10)
        twin.stop()
