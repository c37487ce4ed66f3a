# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The CosmoFlow training job, described as plain data for either AzureML SDK or a local run.

Standard library only. ``plugins/modules/aml_job.py`` turns these dicts into SDK objects
(azureml-core ``ScriptRunConfig`` or azure-ai-ml ``command``) or a torchrun command line.

SAS handling. The token is never an argument, an environment variable value or part of a
spec. The job gets a *reference* with ``--sas``:

* azureml-core (v1): ``aml-secret:NAME`` - a secret in the workspace's default Key Vault; the
  module stores it there (``Keyvault.set_secret``) when given the token, and the job reads it
  with ``Run.get_context().get_secret(NAME)`` (workload/cosmoflow/sas.py).
* azure-ai-ml (v2): ``keyvault:https://VAULT.vault.azure.net/NAME`` - read in the job with its
  managed identity; the secret is put there beforehand (``az keyvault secret set``).
* local: ``env:AMLHPC_STAGE_SAS`` - the variable is set only in the child processes'
  environment, never on their command line.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

BACKENDS = ("azureml_core", "azure_ai_ml", "local")
DATA_SCOPES = ("global", "node")
DEFAULT_DOCKER_ARGS = ("-v", "/mnt/scratch:/data")
SAS_ENV = "AMLHPC_STAGE_SAS"
_SAS_LIKE = re.compile(r"(^|[?&])(sig|se|sv|sp|sr)=", re.IGNORECASE)
_KV_NAME = re.compile(r"^[0-9A-Za-z-]{1,127}$")
_OPTION = re.compile(r"^[a-z][a-z0-9_-]*$")
# Options that the spec sets itself from its own fields: not accepted in train_args.
_RESERVED = {"account", "container", "prefix", "sas", "stage_dir", "shard_mode", "data_dir", "output_dir",
             "data_scope"}


class JobSpecError(ValueError):
    """The job request does not make sense; the message names the fix."""


@dataclass
class JobRequest:
    """What the user asks for (the module's options, minus workspace and authentication)."""

    backend: str
    name: str
    experiment: str = "cosmoflow"
    compute: str = ""
    node_count: int = 1
    process_count_per_node: int = 1
    source_dir: str = "workload"
    script: str = "train.py"
    dockerfile: str = "workload/Dockerfile"
    environment_name: str = "amlhpc-cosmoflow"
    docker_args: Sequence[str] = DEFAULT_DOCKER_ARGS
    shm_size: str = "64g"
    data_dir: str = ""
    account: str = ""
    container: str = ""
    prefix: str = ""
    stage_dir: str = ""
    shard_mode: str = "suffix"
    sas_secret_name: str = ""
    sas_keyvault_url: str = ""
    sas_env: bool = False
    train_args: Mapping[str, Any] = field(default_factory=dict)
    environment_variables: Mapping[str, str] = field(default_factory=dict)
    max_run_seconds: int = 0
    output_dir: str = "outputs"
    # How the ranks split the files they see: "global" (every node sees every file: shared
    # scratch such as BeeOND), "node" (each node sees its own shard: node-local scratch);
    # "" leaves the script's default. See data_scope_for().
    data_scope: str = ""
    # Files of the node handed to the job read-only at the same path (NCCL's nccl.conf, topology
    # file and environment file): "-v PATH:PATH:ro" in the docker arguments of either SDK.
    mounts: Sequence[str] = ()
    # The health gate left nodes out (healthcheck_on_failure: exclude): {"file": the verdict
    # file on each node, "id": the verdict's id}. Every node then runs launch.py once, which
    # trains there only if the node's verdict says so (launch_arguments()).
    node_verdict: Mapping[str, Any] = field(default_factory=dict)


def data_scope_for(shared_scratch: bool) -> str:
    """The data scope that follows the storage layout: on a shared scratch (BeeOND) every node
    sees the whole data set and the ranks split it globally; on node-local scratch each node
    holds only its staged shard and its local ranks split that."""
    return "global" if shared_scratch else "node"


def data_scope_problem(requested: str | None, shared_scratch: bool) -> str | None:
    """One sentence when an explicitly requested data scope contradicts the storage layout."""
    if not requested:
        return None
    if requested not in DATA_SCOPES:
        return f"submit_data_scope must be one of {', '.join(DATA_SCOPES)}, got {requested!r}"
    wanted = data_scope_for(shared_scratch)
    if requested == wanted:
        return None
    if shared_scratch:
        return ("submit_data_scope is 'node' but BeeOND gives every node the whole data set (shared "
                "scratch): every node would read every file; drop submit_data_scope (it follows "
                "beeond_enabled) or set it to 'global'")
    return ("submit_data_scope is 'global' but the data set is staged onto node-local scratch "
            "(beeond_enabled is false): the ranks would read only 1/N of it; drop submit_data_scope "
            "(it follows beeond_enabled) or set it to 'node'")


def stage_shared_problem(stage_shared: Any, shared_scratch: bool) -> str | None:
    """One sentence when an explicitly set ``stage_shared`` contradicts the storage layout (it
    follows ``beeond_enabled`` when left unset: None or empty)."""
    if stage_shared is None or stage_shared == "":
        return None
    text = str(stage_shared).strip().lower()
    if text not in ("true", "false", "yes", "no", "1", "0", "on", "off"):
        return f"stage_shared must be true or false, got {stage_shared!r}"
    shared = text in ("true", "yes", "1", "on")
    if shared == shared_scratch:
        return None
    if shared_scratch:
        return ("stage_shared is false but BeeOND gives every node one stage folder: a node would remove the "
                "files other nodes' shards hold; drop stage_shared (it follows beeond_enabled)")
    return ("stage_shared is true but the data set is staged onto node-local scratch (beeond_enabled is false): "
            "after the nodes change, a file another node's shard holds would stay, on two nodes, which "
            "node-scope training refuses; drop stage_shared (it follows beeond_enabled)")


def train_arguments(options: Mapping[str, Any]) -> list[str]:
    """``{"batch_size": 4, "amp": "bf16", "flag": True}`` -> ``["--batch-size", "4", "--amp", "bf16", "--flag"]``.
    False and None leave the option out; lists repeat the value positions (``nargs``)."""
    out: list[str] = []
    for key in sorted(options):
        value = options[key]
        if not _OPTION.match(key):
            raise JobSpecError(f"train_args key {key!r} is not an option name (letters, digits, _ and -)")
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, *(str(v) for v in value)]
        else:
            out += [flag, str(value)]
    return out


def _check(req: JobRequest) -> None:
    if req.backend not in BACKENDS:
        raise JobSpecError(f"backend must be one of {', '.join(BACKENDS)}, got {req.backend!r}")
    if req.node_count < 1 or req.process_count_per_node < 1:
        raise JobSpecError("node_count and process_count_per_node must be >= 1")
    if req.backend != "local" and not req.compute:
        raise JobSpecError(f"backend {req.backend} needs compute (the AmlCompute cluster name)")
    if req.backend == "local" and req.node_count != 1:
        raise JobSpecError("the local backend runs on this machine only: node_count must be 1")
    staging = bool(req.account)
    if staging and not (req.container and req.stage_dir):
        raise JobSpecError("staging (account) needs container and stage_dir")
    if not staging and not req.data_dir:
        raise JobSpecError("give data_dir (data already in place) or account/container/stage_dir (stage first)")
    if staging and req.backend == "azureml_core" and not req.sas_secret_name:
        raise JobSpecError("azureml_core staging needs sas_secret_name (a workspace Key Vault secret)")
    if staging and req.backend == "azure_ai_ml" and not req.sas_keyvault_url:
        raise JobSpecError("azure_ai_ml staging needs sas_keyvault_url (https://VAULT.vault.azure.net/NAME)")
    if req.sas_secret_name and not _KV_NAME.match(req.sas_secret_name):
        raise JobSpecError(f"sas_secret_name {req.sas_secret_name!r} is not a Key Vault secret name "
                           "(1-127 letters, digits and hyphens)")
    if req.data_scope and req.data_scope not in DATA_SCOPES:
        raise JobSpecError(f"data_scope must be one of {', '.join(DATA_SCOPES)}, got {req.data_scope!r}")
    for mount in req.mounts:
        if not str(mount).startswith("/") or str(mount).count(":") != 1 or not str(mount).split(":")[1].startswith("/"):
            raise JobSpecError(f"mount {mount!r} is not HOST_PATH:JOB_PATH (both absolute)")
    reserved = sorted(set(k.replace("-", "_") for k in req.train_args) & _RESERVED)
    if reserved:
        raise JobSpecError(f"train_args may not set {', '.join(reserved)}: they are options of the job itself")
    for key, value in list(req.train_args.items()) + list(req.environment_variables.items()):
        if isinstance(value, str) and _SAS_LIKE.search(value):
            raise JobSpecError(f"{key} looks like a SAS token; pass the token as sas (no_log) so it is kept as "
                               "a secret, never in plain arguments or variables")


def sas_like_values(*options: Mapping[str, Any] | None) -> list[str]:
    """The string values of ``options`` (train_args, environment_variables) that _check refuses as
    SAS tokens: the module marks them no_log, so its refusal does not show them back."""
    return [value for opts in options for value in (opts or {}).values()
            if isinstance(value, str) and _SAS_LIKE.search(value)]


def sas_reference(req: JobRequest) -> str:
    if req.backend == "azureml_core":
        return f"aml-secret:{req.sas_secret_name}"
    if req.backend == "azure_ai_ml":
        return f"keyvault:{req.sas_keyvault_url}"
    return f"env:{SAS_ENV}"


def script_arguments(req: JobRequest) -> list[str]:
    """The training script's arguments (no secret among them)."""
    _check(req)
    args: list[str] = []
    if req.account:
        args += ["--account", req.account, "--container", req.container, "--stage-dir", req.stage_dir,
                 "--shard-mode", req.shard_mode, "--sas", sas_reference(req)]
        if req.prefix:
            args += ["--prefix", req.prefix]
    else:
        args += ["--data-dir", req.data_dir]
    if req.data_scope:
        args += ["--data-scope", req.data_scope]
    args += ["--output-dir", req.output_dir]
    return args + train_arguments(req.train_args)


LAUNCHER = "launch.py"


def launch_arguments(req: JobRequest) -> tuple[str, list[str], int]:
    """(script, its arguments, processes per node) of every node's command: the training
    script itself, or, where the health gate left nodes out, the per-node launcher that starts
    torchrun with ``process_count_per_node`` processes where the node's verdict says it trains.
    The good nodes then hold the left-out node's files in shards that may differ by a file or
    so: in node scope, unless ``train_args`` says otherwise, every node reads as many as the
    smallest shard holds (``--uneven-shards even``, which names the files left unread) instead
    of the reference's refusal."""
    args = script_arguments(req)
    if not req.node_verdict:
        return req.script, args, req.process_count_per_node
    if req.data_scope == "node" and "uneven_shards" not in {k.replace("-", "_") for k in req.train_args}:
        args += ["--uneven-shards", "even"]
    verdict_file, verdict_id = req.node_verdict.get("file"), req.node_verdict.get("id")
    if not verdict_file or not verdict_id:
        raise JobSpecError("node_verdict needs file and id (the healthcheck role's healthcheck_verdict)")
    return LAUNCHER, ["--verdict", str(verdict_file), "--verdict-id", str(verdict_id), "--nproc-per-node",
                      str(req.process_count_per_node), "--", req.script, *args], 1


def _environment_variables(req: JobRequest) -> dict[str, str]:
    return {str(k): str(v) for k, v in sorted(req.environment_variables.items())}


def docker_arguments(req: JobRequest) -> list[str]:
    """The docker run arguments of every node's job container: the request's, then one
    read-only bind mount per entry of ``mounts``."""
    args = list(req.docker_args)
    for mount in req.mounts:
        args += ["-v", f"{mount}:ro"]
    if req.node_verdict.get("file"):
        args += ["-v", f"{req.node_verdict['file']}:{req.node_verdict['file']}:ro"]
    return args


def v1_spec(req: JobRequest) -> dict[str, Any]:
    """azureml-core: Environment.from_dockerfile + ScriptRunConfig with MpiConfiguration."""
    script, args, procs = launch_arguments(req)
    return {
        "backend": "azureml_core",
        "experiment": req.experiment,
        "display_name": req.name,
        "compute_target": req.compute,
        "source_directory": req.source_dir,
        "script": script,
        "arguments": args,
        "environment": {"name": req.environment_name, "dockerfile": req.dockerfile,
                        "user_managed_dependencies": True},
        "docker": {"use_docker": True, "arguments": docker_arguments(req), "shm_size": req.shm_size},
        "distribution": {"type": "mpi", "node_count": req.node_count,
                         "process_count_per_node": procs},
        "environment_variables": _environment_variables(req),
        "secrets": ({"sas": {"store": "workspace_keyvault", "name": req.sas_secret_name}} if req.account else {}),
        "max_run_duration_seconds": req.max_run_seconds or 2592000,
    }


def v2_spec(req: JobRequest) -> dict[str, Any]:
    """azure-ai-ml: command() with MpiDistribution, an environment built from the Dockerfile."""
    script, args, procs = launch_arguments(req)
    spec: dict[str, Any] = {
        "backend": "azure_ai_ml",
        "experiment_name": req.experiment,
        "display_name": req.name,
        "compute": req.compute,
        "code": req.source_dir,
        "command": " ".join(shlex.quote(a) for a in ["python", script, *args]),
        "environment": {"name": req.environment_name,
                        "build": {"path": os.path.dirname(req.dockerfile) or ".",
                                  "dockerfile_path": os.path.basename(req.dockerfile)}},
        "distribution": {"type": "mpi", "process_count_per_instance": procs},
        "resources": {"instance_count": req.node_count, "shm_size": req.shm_size,
                      "docker_args": " ".join(shlex.quote(a) for a in docker_arguments(req))},
        "environment_variables": _environment_variables(req),
        "secrets": ({"sas": {"store": "keyvault", "url": req.sas_keyvault_url}} if req.account else {}),
    }
    if req.max_run_seconds:
        spec["timeout"] = req.max_run_seconds
    return spec


def local_spec(req: JobRequest, python: str, port: int = 0) -> dict[str, Any]:
    """torchrun on this machine with the workload venv's interpreter."""
    args = script_arguments(req)
    command = [python, "-m", "torch.distributed.run", "--nproc_per_node", str(req.process_count_per_node),
               "--master_addr", "127.0.0.1", "--master_port", str(port or 29500),
               os.path.join(req.source_dir, req.script), *args]
    return {"backend": "local", "command": command, "output_dir": req.output_dir,
            "environment_variables": _environment_variables(req),
            "sas_env": SAS_ENV if req.account else None}


def build_spec(req: JobRequest, python: str = "python", port: int = 0) -> dict[str, Any]:
    if req.backend == "azureml_core":
        return v1_spec(req)
    if req.backend == "azure_ai_ml":
        return v2_spec(req)
    _check(req)
    return local_spec(req, python, port)


def leaks(obj: Any, secret: str | None) -> list[str]:
    """Paths inside ``obj`` (dicts, lists, strings) where ``secret`` appears."""
    if not secret:
        return []
    found: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(str(k), f"{where}.<key>")
                walk(v, f"{where}.{k}")
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")
        elif isinstance(value, str) and secret in value:
            found.append(where or "<root>")

    walk(obj, "")
    return found


def snapshot_source(source_dir: str, dest: str, packages: Iterable[str] = (),
                    ignore: Iterable[str] = ("__pycache__", "*.pyc", "outputs", ".pytest_cache")) -> str:
    """Copy the training code into a fresh ``dest``, with each of ``packages`` (folders, e.g.
    the collection's ``plugins/module_utils/amlhpc``) next to it under its own name, so the job
    imports the shared code the Ansible side uses (one copy in the repository). Symbolic
    links are resolved: the SDKs upload what is inside ``dest``."""
    if os.path.exists(dest):
        shutil.rmtree(dest)
    patterns = shutil.ignore_patterns(*ignore)
    shutil.copytree(source_dir, dest, symlinks=False, ignore=patterns)
    for package in packages:
        shutil.copytree(package, os.path.join(dest, os.path.basename(os.path.normpath(package))),
                        symlinks=False, ignore=patterns)
    return dest


def read_metrics(output_dir: str) -> dict[str, Any]:
    """Step losses, epoch records and the summary of a finished run's outputs folder."""
    steps: list[dict[str, Any]] = []
    epochs: list[dict[str, Any]] = []
    resume: list[dict[str, Any]] = []  # where a resumed run resumed from, what the interruption cost
    path = os.path.join(output_dir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                if rec.get("kind") == "step":
                    steps.append({"step": rec["step"], "loss": rec["loss"]})
                elif rec.get("kind") == "epoch":
                    epochs.append({k: v for k, v in rec.items() if k not in ("kind", "time")})
                elif rec.get("kind") == "resume":
                    resume.append({k: v for k, v in rec.items() if k != "kind"})
    summary: dict[str, Any] = {}
    spath = os.path.join(output_dir, "summary.json")
    if os.path.exists(spath):
        with open(spath, encoding="utf-8") as f:
            summary = json.load(f)
    metrics: dict[str, Any] = {"steps": steps, "epochs": epochs, "summary": summary}
    if resume:
        metrics["resume"] = resume
    return metrics


def find_outputs(download_dir: str) -> str | None:
    """Where a downloaded run keeps its outputs folder (v1: outputs/, v2: artifacts/outputs/)."""
    for candidate in ("outputs", os.path.join("artifacts", "outputs"), os.path.join("named-outputs", "outputs")):
        path = os.path.join(download_dir, candidate)
        if os.path.exists(os.path.join(path, "metrics.jsonl")) or os.path.exists(os.path.join(path, "summary.json")):
            return path
    return None
