"""The whole run on the AmlCompute twin (tests/twin/cluster.py), as a user would run it.

Three nodes that behave like AmlCompute's: one public address with a NAT port per node, a
non-root admin user with sudo, root-owned /mnt and /mnt/scratch, private IPs on their own
network. The inventory is what a user writes from inventory/examples/ (a saved list_nodes()
payload, ``source: nodes_file``) and group_vars; SSH checks host keys: the inventory plugin
keeps the controller's known_hosts for the nodes (no accept-new, no StrictHostKeyChecking=no).
site.yml runs: SSH trust, NCCL, the health gate (before staging;
the mount test on the real scratch path), the data set uploaded gzip-encoded to Azurite and
staged into every node's local scratch, then the training job submitted with the azure_ai_ml
backend to the twin's AzureML stand-in, which runs it on the nodes (one launcher per node,
rendezvous on the head's private IP, scratch mounted at /data). A second run reports changed=0.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ACCOUNT_KEY, _spawn_azurite, free_port
from project_copy import project_env

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from twin.cluster import VM_SIZE, Twin, free_base_port  # noqa: E402

NODES = 3
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
WORKLOAD_PYTHON = str(ROOT / ".venv-workload" / "bin" / "python")
# The job's training options (the small model of the local default, one process per node, 3
# epochs; why these, in the file), which tests/workload/test_jobs_learn.py shows to learn.
TRAIN_ARGS = yaml.safe_load((ROOT / "tests" / "twin" / "train_args.yml").read_text())


def assert_learned(download_dir: Path) -> None:
    """The downloaded job's loss fell: the training loss of the last epoch at most 70 % of the
    first epoch's, and the validation loss below the first epoch's (a model collapsed to a
    constant keeps both where they are)."""
    sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
    from amlhpc.azure import job_spec

    epochs = job_spec.read_metrics(job_spec.find_outputs(str(download_dir)) or str(download_dir))["epochs"]
    assert len(epochs) == TRAIN_ARGS["epochs"], epochs
    first, last = epochs[0], epochs[-1]
    assert last["train_loss"] < 0.7 * first["train_loss"] and last["val_loss"] < first["val_loss"], epochs


def recap(output: str) -> dict[str, dict[str, int]]:
    """Per-host counters of the PLAY RECAP."""
    out = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        out[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counters)}
    return out


def user_inventory(twin: Twin, where: Path, cluster: str, group_vars: dict) -> Path:
    """inventory/examples/saved.azureml_compute.yml and group_vars/all, filled in for the twin."""
    example = yaml.safe_load((ROOT / "inventory" / "examples" / "saved.azureml_compute.yml").read_text())
    (where / "group_vars" / "all").mkdir(parents=True)
    nodes_file = twin.write_nodes_file(where / "nodes.json")
    example.update({"cluster": cluster, "nodes_file": str(nodes_file), "min_nodes": len(twin.nodes),
                    "max_nodes": len(twin.nodes), "known_hosts_file": str(where / "known_hosts")})
    example["vm_size"] = VM_SIZE  # the twin is no ND96asr_v4: a CPU size, no GPU thresholds
    inv = where / f"{cluster}.azureml_compute.yml"
    inv.write_text(yaml.safe_dump(example))
    (where / "group_vars" / "all" / "main.yml").write_text(yaml.safe_dump(group_vars))
    return inv


def twin_env(state: Path, project: Path) -> dict[str, str]:
    """ansible-playbook's environment in the test's project folder (tests/project_copy.py: run it
    with cwd=project; outputs/<run>, the report pages and .cache/aml_job land there): the twin's
    AzureML stands in for azure-ai-ml's MLClient."""
    standin = str(ROOT / "tests" / "twin" / "azureml_standin")
    return project_env(project, ANSIBLE_FORCE_COLOR="0", TWIN_AZUREML_STATE=str(state),
                       PYTHONPATH=os.pathsep.join(filter(None, [standin, os.environ.get("PYTHONPATH", "")])))


def azureml_state(twin: Twin, where: Path, **extra) -> Path:
    state = where / "azureml.json"
    state.write_text(json.dumps({"twin": str(twin.save_state(where / "twin.json")), "python": WORKLOAD_PYTHON,
                                 "runs": str(where / "runs"), "jobs": {}, **extra}))
    return state


def job_group_vars(twin: Twin) -> dict:
    """What every twin run's group_vars say: the user's key, the AzureML workspace (the twin's
    stand-in answers), the job."""
    return {
        "ansible_ssh_private_key_file": str(twin.key),
        "aml_cluster_manage": False,
        "aml_cluster_subscription_id": "00000000-0000-0000-0000-000000000000",
        "aml_cluster_resource_group": "rg-hpc",
        "aml_cluster_workspace_name": "ws-hpc",
        "submit_backend": "azure_ai_ml",
        "submit_process_count_per_node": 1,
        "submit_shm_size": "1g",
        "submit_train_args": TRAIN_ARGS,
        # The twin's links share two cores with everything else (a healthy iperf3 pair measured
        # 0.24 to 7 Gb/s): the health role's pair gate is judged by a floor, as a user sets one
        # for a CPU size, not by its median rule (a link fault on the twin is below 0.01 Gb/s).
        "healthcheck_pair_thresholds": {"default": {"iperf3": 0.05}},
        "healthcheck_pair_relative": 0,
    }


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    t = Twin(NODES, tmp_path_factory.mktemp("twin"), prefix="amlhpc-twin-e2e", base_port=free_base_port(NODES))
    try:
        yield t.start()
    finally:
        t.stop()


@pytest.fixture(scope="module")
def gateway_azurite(twin, tmp_path_factory):
    """Azurite on the node network's gateway address, so the nodes reach it."""
    gateway = twin.gateway
    workdir = tmp_path_factory.mktemp("azurite-e2e")
    port = free_port()
    proc = _spawn_azurite(port, workdir, host=gateway)
    yield f"http://{gateway}:{port}/devstoreaccount1"
    os.killpg(proc.pid, 15)
    proc.wait(10)


def test_site_on_the_twin(twin, gateway_azurite, tmp_path, project):
    scratch = tmp_path / "controller"
    group_vars = {
        **job_group_vars(twin),
        "submit_download_dir": str(scratch / "outputs"),
        "stage_account_url": gateway_azurite,
        "stage_container": "cosmoflow",
        # Air-gapped nodes: azcopy comes from the controller.
        "stage_azcopy_src": str(ROOT / ".tools" / "bin" / "azcopy"),
        "prepare_dataset_src": str(scratch / "cosmoflow-src"),
        "prepare_dataset_generate": True,
        "prepare_dataset_account_key": ACCOUNT_KEY,
        "prepare_dataset_create_container": True,
        "healthcheck_fs_files": 2,
        "healthcheck_fs_file_size_mb": 8,
        # With the no_log switch off, the modules themselves must still never show the SAS.
        "amlhpc_no_log": False,
    }
    inv = user_inventory(twin, tmp_path / "inventory", "e2e", group_vars)
    # The SAS reaches the play as a lookup, never on a command line or in a file.
    with open(tmp_path / "inventory" / "group_vars" / "all" / "main.yml", "a") as f:
        f.write("stage_sas: \"{{ lookup('amlhpc.azureml.blob_sas', stage_account_url, container=stage_container, "
                "account_key=prepare_dataset_account_key) }}\"\n")
    state = azureml_state(twin, tmp_path, audit_reads=True)

    def run() -> subprocess.CompletedProcess:
        return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "site.yml"], cwd=project, env=twin_env(state, project),
                              capture_output=True, text=True, timeout=1800, check=False)

    # Check mode on nodes where nothing was done yet runs through, says what it would do, and
    # changes nothing on the nodes (no stage folder, no head key).
    check = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "site.yml", "--check", "--diff"], cwd=project,
                           env=twin_env(state, project), capture_output=True, text=True, timeout=1800, check=False)
    (tmp_path / "check.log").write_text(check.stdout + check.stderr)
    assert check.returncode == 0, check.stdout[-8000:] + check.stderr[-2000:]
    assert "would generate" in check.stdout, check.stdout[-8000:]
    for node in twin.nodes:
        assert twin.exec(node, "test", "-e", "/root/.ssh").returncode != 0

    first = run()
    (tmp_path / "first.log").write_text(first.stdout + first.stderr)
    assert first.returncode == 0, first.stdout[-8000:] + first.stderr[-2000:]
    ranked = twin.ranked()
    hosts = [f"e2e-{i}" for i in range(NODES)]
    assert set(hosts) <= set(recap(first.stdout))

    # The health gate ran before the data set was copied, and measured the real scratch mount
    # (root's /mnt/scratch) on every node as the non-root admin user's play.
    plays = re.findall(r"^PLAY \[(.*)\]", first.stdout, re.M)
    assert plays.index("Check the health of every node") < plays.index("Stage the data set")
    table = first.stdout[first.stdout.index("Show the pass/fail table"):]
    for check in ("fs_write", "fs_read"):
        rows = re.findall(rf"^.*\b{check}\b.*$", table[:table.index("PLAY [")], re.M)
        assert len(rows) == NODES and all(" PASS " in r for r in rows), rows

    # SSH trust for real: root on the head reaches every node by private IP, no prompt.
    for node in twin.nodes:
        res = twin.exec(ranked[0], "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                        f"root@{node.private_ip}", "hostname")
        assert res.returncode == 0 and res.stdout.strip() == node.hostname, res.stderr
    nodefile = twin.exec(ranked[0], "cat", "/etc/amlhpc/nodefile").stdout.split()
    assert nodefile == [n.private_ip for n in ranked]

    # Staging: every file of the data set on exactly one node's local scratch, decompressed.
    src = scratch / "cosmoflow-src"
    expected = {str(p.relative_to(src)).removesuffix(".gz"): p for p in src.rglob("*.tfrecord*")}
    assert len(expected) > 0
    seen: dict[str, str] = {}
    for node in ranked:
        listing = twin.exec(node, "bash", "-c", "cd /mnt/scratch/cosmoflow && find . -name '*.tfrecord*' "
                            "-not -path './.*' -printf '%P\\n' | sort").stdout.split()
        for name in listing:
            assert name.endswith(".tfrecord"), f"{node.hostname}: {name} kept its .gz suffix"
            assert name not in seen, f"{name} staged on both {seen[name]} and {node.hostname}"
            seen[name] = node.hostname
        sums = twin.exec(node, "bash", "-c", "cd /mnt/scratch/cosmoflow && sha256sum " + " ".join(listing)).stdout
        for line in sums.splitlines():
            digest, name = line.split()
            raw = expected[name].read_bytes()
            raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
            assert hashlib.sha256(raw).hexdigest() == digest, f"{node.hostname}: {name} differs from the source"
    assert sorted(seen) == sorted(expected)
    assert len(set(seen.values())) == NODES, "every node got a shard"

    # Training ran on the nodes: one launcher per node; each rank read the first 42 files of its
    # own node's shard (n_train 126 over 3 nodes), each once.
    jobs = json.loads(state.read_text())["jobs"]
    assert list(jobs) == ["cosmoflow"] and jobs["cosmoflow"]["status"] == "Completed"
    logs = Path(jobs["cosmoflow"]["logs"]).read_text()
    assert f"{NODES} process(es) on {NODES} node(s)" in logs
    reads = json.loads((tmp_path / "runs" / "cosmoflow" / "reads.json").read_text())
    train = {p.removeprefix("/data/cosmoflow/"): v for p, v in reads.items() if "/train/" in p}
    assert set(train) <= {n for n in expected if n.startswith("train/")}
    assert len(train) == TRAIN_ARGS["n_train"]
    assert {n: v["count"] for n, v in train.items()} == {n: TRAIN_ARGS["epochs"] for n in train}
    rank_of = {n.hostname: str(i) for i, n in enumerate(ranked)}
    assert all(v["ranks"] == [rank_of[seen[n]]] for n, v in train.items()), "a rank read another node's file"

    # NCCL's set-up reached the job: the variables of the head's env file and its files mounted.
    rest = json.loads((tmp_path / "runs" / "cosmoflow" / "rest.json").read_text())
    assert "--data-scope node" in rest["command"]
    assert rest["environmentVariables"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "-v /etc/nccl.conf:/etc/nccl.conf:ro" in rest["resources"]["dockerArgs"]

    # The job learned: the training loss of its last epoch at most 70 % of the first's (50 %
    # where tests/workload/test_jobs_learn.py runs these settings), the validation loss lower.
    assert_learned(scratch / "outputs")

    # The run ends with its report; the SAS never shows.
    assert "training loss per epoch" in first.stdout
    assert "sig=" not in first.stdout + first.stderr

    second = run()
    (tmp_path / "second.log").write_text(second.stdout + second.stderr)
    assert second.returncode == 0, second.stdout[-6000:]
    counters = recap(second.stdout)
    # The head's key was read by the scan's command and found as asked: neither the file nor
    # the openssh_keypair module ran on the head.
    for task in ("Make sure root's .ssh directory exists on each head", "Generate each head's passwordless key"):
        block = second.stdout[second.stdout.index(task):].split("\nTASK [")[0]
        assert re.search(r"skipping: \[(e2e-\d+)\] => \(item=\1\)", block) and "ok: [" not in block, block
    # The job's NCCL settings came from the env file the nccl role wrote on the head in this run
    # (its fact), not from a read of it (the first run's job had them: rest.json above).
    block = second.stdout[second.stdout.index("Read the NCCL job environment the head was given"):].split("\nTASK [")[0]
    assert "skipping: [localhost]" in block and "ok: [localhost]" not in block, block
    changed = {h: counters[h]["changed"] for h in [*hosts, "localhost"]}
    assert changed == {h: 0 for h in [*hosts, "localhost"]}, json.dumps(changed)
    assert list(json.loads(state.read_text())["jobs"]) == ["cosmoflow"], "the finished run was submitted again"
    # ... nor downloaded again: the controller's record of the completed run answered.
    assert json.loads(state.read_text())["jobs"]["cosmoflow"]["downloads"] == 1
    assert "the workspace not asked" in second.stdout

    # A rerun of the SSH trust starts no module anywhere: the head's key read (and scan) and the
    # trust check are shell commands run through sudo without a tty (ansible.builtin.raw), each
    # node's task reads its files with one shell command. Before, the head ran the command
    # module twice, one after the other, with every node waiting.
    trust = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), "playbooks/ssh_trust.yml", "-vvv"], cwd=project,
                           env=twin_env(state, project), capture_output=True, text=True, timeout=600, check=False)
    (tmp_path / "trust.log").write_text(trust.stdout + trust.stderr)
    assert trust.returncode == 0, trust.stdout[-6000:]
    assert re.findall(r"Using module file \S+", trust.stdout) == []
    assert {h: recap(trust.stdout)[h]["changed"] for h in hosts} == {h: 0 for h in hosts}
    check = trust.stdout[trust.stdout.index("Check that root on each head reaches every node"):].split("\nTASK [")[0]
    assert re.search(r"^ok: \[e2e-\d+", check, re.M) and "failed:" not in check, check[-3000:]
