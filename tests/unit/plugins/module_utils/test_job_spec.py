from __future__ import annotations

import json
import os
import re

import pytest

from amlhpc.azure.job_spec import (
    JobRequest,
    JobSpecError,
    build_spec,
    find_outputs,
    leaks,
    read_metrics,
    snapshot_source,
    train_arguments,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def staged(backend: str, **kw) -> JobRequest:
    base = dict(backend=backend, name="cf-4x8", compute="gpu", node_count=4, process_count_per_node=8,
                account="mydata", container="cosmoflow", stage_dir="/data/cosmoflow", shard_mode="balanced",
                sas_secret_name="cosmoflow-sas", sas_keyvault_url="https://kv1.vault.azure.net/cosmoflow-sas",
                train_args={"epochs": 64, "batch_size": 4, "amp": "bf16", "no_log1p": False},
                environment_variables={"NCCL_DEBUG": "INFO"})
    return JobRequest(**{**base, **kw})


def test_train_arguments():
    assert train_arguments({"batch_size": 4, "amp": "bf16", "verbose": True, "off": False, "none": None,
                            "decay": ["32:0.25", "64:0.125"]}) == [
        "--amp", "bf16", "--batch-size", "4", "--decay", "32:0.25", "64:0.125", "--verbose"]
    with pytest.raises(JobSpecError, match="not an option name"):
        train_arguments({"--x; rm": 1})


def test_v1_spec_mpi_docker_and_secret_reference():
    spec = build_spec(staged("azureml_core"))
    assert spec["distribution"] == {"type": "mpi", "node_count": 4, "process_count_per_node": 8}
    assert spec["docker"]["arguments"] == ["-v", "/mnt/scratch:/data"]
    args = spec["arguments"]
    assert args[args.index("--sas") + 1] == "aml-secret:cosmoflow-sas"
    assert args[args.index("--shard-mode") + 1] == "balanced"
    assert "--no-log1p" not in args and args[args.index("--amp") + 1] == "bf16"
    assert spec["environment_variables"] == {"NCCL_DEBUG": "INFO"}
    assert spec["secrets"] == {"sas": {"store": "workspace_keyvault", "name": "cosmoflow-sas"}}


def test_v2_spec_command_distribution_resources():
    spec = build_spec(staged("azure_ai_ml", dockerfile="workload/Dockerfile"))
    assert spec["distribution"] == {"type": "mpi", "process_count_per_instance": 8}
    assert spec["resources"]["instance_count"] == 4
    assert spec["resources"]["docker_args"] == "-v /mnt/scratch:/data"
    assert spec["command"].startswith("python train.py --account mydata ")
    assert "--sas keyvault:https://kv1.vault.azure.net/cosmoflow-sas" in spec["command"]
    assert spec["environment"]["build"] == {"path": "workload", "dockerfile_path": "Dockerfile"}


def test_local_spec_is_torchrun_with_env_reference():
    req = staged("local", node_count=1, process_count_per_node=2, output_dir="/p/outputs/r1")
    spec = build_spec(req, python="/p/.venv-workload/bin/python", port=4242)
    cmd = spec["command"]
    assert cmd[:8] == ["/p/.venv-workload/bin/python", "-m", "torch.distributed.run", "--nproc_per_node", "2",
                       "--master_addr", "127.0.0.1", "--master_port"]
    assert cmd[9] == "workload/train.py"
    assert cmd[cmd.index("--sas") + 1] == "env:AMLHPC_STAGE_SAS" and spec["sas_env"] == "AMLHPC_STAGE_SAS"
    assert cmd[cmd.index("--output-dir") + 1] == "/p/outputs/r1"


def test_data_dir_instead_of_staging():
    spec = build_spec(JobRequest(backend="azureml_core", name="r", compute="gpu", data_dir="/data/cosmo"))
    assert spec["arguments"][:2] == ["--data-dir", "/data/cosmo"] and "--sas" not in spec["arguments"]
    assert spec["secrets"] == {}


@pytest.mark.parametrize(("change", "message"), [
    ({"compute": ""}, "needs compute"),
    ({"stage_dir": ""}, "needs container and stage_dir"),
    ({"account": "", "data_dir": ""}, "give data_dir"),
    ({"sas_secret_name": ""}, "sas_secret_name"),
    ({"train_args": {"sas": "env:X"}}, "may not set sas"),
    ({"train_args": {"token": "sv=2024-01-01&sig=abc"}}, "looks like a SAS token"),
    ({"environment_variables": {"X": "?sv=2024&sig=abc"}}, "looks like a SAS token"),
    ({"node_count": 0}, ">= 1"),
    ({"sas_secret_name": "cosmo_sas"}, "is not a Key Vault secret name"),
])
def test_bad_requests_name_the_fix(change, message):
    with pytest.raises(JobSpecError, match=re.escape(message)):
        build_spec(staged("azureml_core", **change))


def test_unknown_backend():
    with pytest.raises(JobSpecError, match="backend must be one of azureml_core, azure_ai_ml, local"):
        build_spec(staged("slurm"))


def test_local_backend_is_one_node():
    with pytest.raises(JobSpecError, match="node_count must be 1"):
        build_spec(staged("local", node_count=2))


def test_leaks_finds_a_secret_anywhere():
    assert leaks({"a": ["x", {"b": "..sig=S3CRET.."}], "S3CRET": 1}, "S3CRET") == [".a[1].b", ".<key>"]
    assert leaks(build_spec(staged("azureml_core")), "sig=S3CRET") == []


def test_snapshot_puts_the_shared_package_next_to_the_workload(tmp_path):
    dest = snapshot_source(os.path.join(ROOT, "workload"), str(tmp_path / "src"),
                           [os.path.join(ROOT, "plugins", "module_utils", "amlhpc")])
    assert os.path.isfile(os.path.join(dest, "amlhpc", "data", "tfrecord.py"))
    assert not os.path.islink(os.path.join(dest, "amlhpc"))
    assert os.path.isfile(os.path.join(dest, "train.py"))
    assert not any("__pycache__" in d for d, _unused, _unused in os.walk(dest))


def test_read_metrics_and_find_outputs(tmp_path):
    out = tmp_path / "artifacts" / "outputs"
    out.mkdir(parents=True)
    lines = [{"kind": "config", "step": 0}, {"kind": "step", "step": 1, "loss": 0.5, "time": 1.0},
             {"kind": "step", "step": 2, "loss": 0.4, "time": 2.0},
             {"kind": "epoch", "step": 2, "epoch": 0, "val_mae": 0.3, "time": 3.0}]
    (out / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (out / "summary.json").write_text(json.dumps({"val_mae": 0.3}))
    assert find_outputs(str(tmp_path)) == str(out)
    m = read_metrics(str(out))
    assert m["steps"] == [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.4}]
    assert m["epochs"] == [{"step": 2, "epoch": 0, "val_mae": 0.3}] and m["summary"] == {"val_mae": 0.3}
    assert find_outputs(str(tmp_path / "nothing")) is None


def test_dockerfile_installs_exactly_the_image_requirements():
    with open(os.path.join(ROOT, "workload", "requirements.txt"), encoding="utf-8") as f:
        wanted = sorted(line.strip() for line in f if line.strip() and not line.startswith("#"))
    with open(os.path.join(ROOT, "workload", "Dockerfile"), encoding="utf-8") as f:
        text = f.read()
    pip = text[text.index("pip install"):text.index("&& python -c")]
    installed = sorted(tok for tok in pip.replace("\\", " ").split() if "==" in tok)
    assert installed == wanted
    assert re.search(r"^FROM nvcr\.io/nvidia/pytorch:", text, re.MULTILINE)
    assert not re.search(r"^\s*(COPY|ADD)\s", text, re.MULTILINE)  # self-contained: v1 sends the text alone


def test_data_scope_follows_the_storage_layout():
    from amlhpc.azure.job_spec import data_scope_for, data_scope_problem
    assert data_scope_for(shared_scratch=True) == "global"
    assert data_scope_for(shared_scratch=False) == "node"
    assert data_scope_problem(None, False) is None and data_scope_problem("node", False) is None
    assert "node-local scratch" in data_scope_problem("global", False)
    assert "BeeOND gives every node the whole data set" in data_scope_problem("node", True)
    assert "must be one of global, node" in data_scope_problem("rack", True)


@pytest.mark.parametrize("backend", ["azureml_core", "azure_ai_ml", "local"])
def test_data_scope_reaches_the_script(backend):
    req = staged(backend, node_count=1 if backend == "local" else 4, data_scope="node")
    spec = build_spec(req, python="python")
    args = spec.get("arguments") or spec.get("command")
    args = args if isinstance(args, list) else args.split()
    assert args[args.index("--data-scope") + 1] == "node"
    with pytest.raises(JobSpecError, match="data_scope must be one of"):
        build_spec(staged(backend, node_count=1, data_scope="rack"), python="python")


NCCL_MOUNTS = ["/etc/nccl.conf:/etc/nccl.conf", "/etc/amlhpc/nccl.env:/etc/amlhpc/nccl.env",
               "/opt/microsoft/ndv4/topo.xml:/opt/microsoft/ndv4/topo.xml"]


def test_mounts_become_read_only_docker_args_on_both_sdks():
    v1 = build_spec(staged("azureml_core", mounts=NCCL_MOUNTS))
    assert v1["docker"]["arguments"] == ["-v", "/mnt/scratch:/data", "-v", "/etc/nccl.conf:/etc/nccl.conf:ro",
                                         "-v", "/etc/amlhpc/nccl.env:/etc/amlhpc/nccl.env:ro",
                                         "-v", "/opt/microsoft/ndv4/topo.xml:/opt/microsoft/ndv4/topo.xml:ro"]
    v2 = build_spec(staged("azure_ai_ml", dockerfile="workload/Dockerfile", mounts=NCCL_MOUNTS))
    assert v2["resources"]["docker_args"] == " ".join(v1["docker"]["arguments"])
    with pytest.raises(JobSpecError, match="is not HOST_PATH:JOB_PATH"):
        build_spec(staged("azureml_core", mounts=["etc/nccl.conf"]))


def test_stage_shared_follows_beeond_or_is_refused_with_the_fix():
    from amlhpc.azure.job_spec import stage_shared_problem
    for unset in (None, ""):
        assert stage_shared_problem(unset, True) is None and stage_shared_problem(unset, False) is None
    assert stage_shared_problem(True, True) is None and stage_shared_problem("false", False) is None
    assert "would remove the files other nodes' shards hold" in stage_shared_problem(False, True)
    assert "on two nodes, which node-scope training refuses" in stage_shared_problem("True", False)
    assert stage_shared_problem("sometimes", False) == "stage_shared must be true or false, got 'sometimes'"


def test_with_nodes_left_out_every_node_runs_the_launcher_once():
    """The health gate excluded nodes: AzureML places the job on nodes it chooses, so every node
    runs launch.py (one process), which starts torchrun with the node's processes where it trains."""
    verdict = {"file": "/etc/amlhpc/health-verdict.json", "id": "0123abcd"}
    req = JobRequest(backend="azure_ai_ml", name="cf", compute="gpu", node_count=4, process_count_per_node=8,
                     data_dir="/data/cosmoflow", data_scope="node", dockerfile="workload/Dockerfile",
                     node_verdict=verdict)
    spec = build_spec(req)
    assert spec["command"] == ("python launch.py --verdict /etc/amlhpc/health-verdict.json --verdict-id 0123abcd "
                               "--nproc-per-node 8 -- train.py --data-dir /data/cosmoflow --data-scope node "
                               "--output-dir outputs --uneven-shards even")
    assert spec["distribution"] == {"type": "mpi", "process_count_per_instance": 1}
    # The good nodes' shards may differ by a file: read evenly, unless train_args says otherwise.
    refuse = build_spec(JobRequest(**{**req.__dict__, "train_args": {"uneven_shards": "refuse"}}))
    assert refuse["command"].endswith("--output-dir outputs --uneven-shards refuse")
    assert spec["resources"]["instance_count"] == 4
    assert "-v /etc/amlhpc/health-verdict.json:/etc/amlhpc/health-verdict.json:ro" in spec["resources"]["docker_args"]
    v1 = build_spec(JobRequest(**{**req.__dict__, "backend": "azureml_core"}))
    assert v1["script"] == "launch.py" and v1["arguments"][:6] == ["--verdict", verdict["file"], "--verdict-id",
                                                                   "0123abcd", "--nproc-per-node", "8"]
    assert v1["distribution"]["process_count_per_node"] == 1
    # No node left out: the training script as before.
    plain = build_spec(JobRequest(**{**req.__dict__, "node_verdict": {}}))
    assert plain["command"].startswith("python train.py ") and plain["distribution"]["process_count_per_instance"] == 8
    with pytest.raises(JobSpecError, match="node_verdict needs file and id"):
        build_spec(JobRequest(**{**req.__dict__, "node_verdict": {"file": "/x"}}))
