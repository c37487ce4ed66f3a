#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Submit the CosmoFlow training job to AzureML (either SDK) or run it here with torchrun."""

from __future__ import annotations

DOCUMENTATION = r"""
module: aml_job
short_description: Run the CosmoFlow training job on AzureML or on this machine
version_added: "1.0.0"
description:
  - Builds the job from C(plugins/module_utils/amlhpc/job_spec.py) and submits it.
  - C(azureml_core) (SDK v1) - an C(Environment) from the project's Dockerfile, a
    C(ScriptRunConfig) with C(MpiConfiguration) (nodes x processes per node) and docker run
    arguments that bind the BeeOND mount into the container (C(-v /mnt/scratch:/data)).
  - C(azure_ai_ml) (SDK v2) - a C(command) job with C(MpiDistribution), an environment built
    from the Dockerfile's folder, C(resources.instance_count), C(docker_args) and C(shm_size).
  - C(local) - the same training script with torchrun and the workload venv's Python on the
    control host; writes only under O(output_dir); needs no root.
  - The staging SAS never appears in arguments or variables. azureml_core stores it in the
    workspace's default Key Vault under O(sas_secret_name) (the job reads it with
    C(Run.get_secret)); azure_ai_ml reads it in the job from O(sas_keyvault_url) with its
    managed identity; local passes it in the child processes' environment.
  - A run is submitted once per O(name). Running the task again reports the existing run
    (changed=false) while it is queued, running or completed. After a failed or cancelled run
    it submits a new attempt under a new name (C(<name>-r2), C(<name>-r3), ...), as an AzureML v2
    job name can never be reused; v1 runs carry C(amlhpc_attempt) in their tags. O(force=true)
    submits a new attempt whatever the last one did.
  - Check mode looks the runs up (read-only) and reports what a real run would do, changed
    only when it would submit, with the run name it would use. It uploads and submits nothing.
  - Waiting streams the run's log into O(log_path) (module output is JSON only), then downloads
    the run's C(outputs/) folder to O(download_dir) and returns its metrics.
attributes:
  check_mode:
    support: full
    details: Builds and returns the job spec; submits and runs nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - amlhpc.azureml.azure_auth
  - ansible.builtin.action_common_attributes
options:
  backend:
    description: Where the job runs.
    type: str
    choices: [azureml_core, azure_ai_ml, local]
    default: azureml_core
  name:
    description: Run name (v2 job name, v1 tag C(amlhpc_run), local outputs subfolder).
    type: str
    required: true
  experiment:
    description: Experiment name.
    type: str
    default: cosmoflow
  compute:
    description: AmlCompute cluster name (AzureML backends).
    type: str
  node_count:
    description: Nodes of the job.
    type: int
    default: 1
  process_count_per_node:
    description: Training processes per node (one per GPU).
    type: int
    default: 1
  source_dir:
    description: Training code folder; symbolic links in it are resolved into a snapshot.
    type: path
    required: true
  packages:
    description:
      - Python packages (folders) the training code imports, copied next to it in the snapshot
        the AzureML backends upload, each under its folder's name.
      - The CosmoFlow workload needs the collection's C(plugins/module_utils/amlhpc). The local
        backend runs O(source_dir) in place, whose C(train.py) finds that package itself.
    type: list
    elements: path
    default: []
  script:
    description: Entry script inside O(source_dir).
    type: str
    default: train.py
  dockerfile:
    description: The image's Dockerfile (AzureML backends).
    type: path
  environment_name:
    description: AzureML environment name.
    type: str
    default: amlhpc-cosmoflow
  docker_args:
    description: docker run arguments of every node's container.
    type: list
    elements: str
    default: ["-v", "/mnt/scratch:/data"]
  shm_size:
    description: Shared memory of the container (DataLoader workers use it).
    type: str
    default: 64g
  data_dir:
    description: Data set root inside the job (train/ and validation/), when no staging is wanted.
    type: str
  account:
    description: Storage account URL or name to stage from (turns staging on).
    type: str
  container:
    description: Blob container of the data set.
    type: str
  prefix:
    description: Blob prefix inside the container.
    type: str
    default: ""
  stage_dir:
    description: Where each node stages its shard (inside the job).
    type: str
  shard_mode:
    description: How files are split between nodes.
    type: str
    choices: [suffix, balanced]
    default: suffix
  sas:
    description: SAS token for staging; stored as a secret, never passed in plain text.
    type: str
  sas_secret_name:
    description: Workspace Key Vault secret name holding the SAS (azureml_core).
    type: str
  sas_keyvault_url:
    description: C(https://VAULT.vault.azure.net/NAME) of the SAS secret (azure_ai_ml).
    type: str
  train_args:
    description: "Options of the training script: C({batch_size: 4}) becomes C(--batch-size 4)."
    type: dict
    default: {}
  environment_variables:
    description: Environment of the training processes (NCCL settings, for instance). No secrets.
    type: dict
    default: {}
  mounts:
    description:
      - Files or folders of every node handed to the job container read-only, as C(NODE_PATH:JOB_PATH)
        (added to the docker arguments as C(-v NODE_PATH:JOB_PATH:ro), on either SDK).
      - The submit play passes the node's NCCL set-up this way (C(/etc/nccl.conf), the topology file,
        C(/etc/amlhpc/nccl.env)).
    type: list
    elements: str
    default: []
  data_scope:
    description:
      - How the ranks split the data files they see (C(--data-scope) of the training script).
        C(global) when every node sees the whole data set (shared scratch, BeeOND); C(node) when
        each node holds only its own shard (node-local scratch). Omitted - the script's default.
    type: str
    choices: [global, node]
  max_run_seconds:
    description: Wall-clock limit of the run (0 - the service default).
    type: int
    default: 0
  wait:
    description: Wait for the run to finish, streaming its log to O(log_path).
    type: bool
    default: true
  force:
    description: Submit a new attempt even when the last one completed or is still going.
    type: bool
    default: false
  download_dir:
    description: Where a finished AzureML run's outputs are downloaded (required with O(wait)).
    type: path
  log_path:
    description: File receiving the streamed run log (default C(<download_dir or output_dir>/run.log)).
    type: path
  output_dir:
    description: Local backend - outputs folder of the run (default C(<cwd>/outputs/<name>)).
    type: path
  python:
    description: Local backend - the Python with torch (the workload venv).
    type: path
  timeout:
    description: Local backend - seconds before the run is stopped.
    type: int
    default: 3600
author:
  - amlhpc contributors (@amlhpc)
"""

EXAMPLES = r"""
- name: Job | Train CosmoFlow on 4 NDv4 nodes
  amlhpc.azureml.aml_job:
    backend: azureml_core
    name: cosmoflow-4x8
    subscription_id: "{{ aml_subscription_id }}"
    resource_group: "{{ aml_resource_group }}"
    workspace_name: "{{ aml_workspace }}"
    compute: gpu
    node_count: 4
    process_count_per_node: 8
    source_dir: "{{ playbook_dir }}/../workload"
    packages: ["{{ playbook_dir }}/../plugins/module_utils/amlhpc"]
    dockerfile: "{{ playbook_dir }}/../workload/Dockerfile"
    account: mydatasets
    container: cosmoflow
    stage_dir: /data/cosmoflow
    sas: "{{ cosmoflow_sas }}"
    sas_secret_name: cosmoflow-sas
    train_args: {epochs: 64, batch_size: 4, amp: bf16}
    download_dir: "{{ playbook_dir }}/../outputs/cosmoflow-4x8"

- name: Job | Train on this machine
  amlhpc.azureml.aml_job:
    backend: local
    name: smoke
    source_dir: workload
    python: .venv-workload/bin/python
    process_count_per_node: 2
    data_dir: .scratch/cosmoflow
    train_args: {cube: 16, conv_layers: 2, epochs: 2}
"""

RETURN = r"""
spec:
  description: The job as submitted (no secret in it).
  returned: always
  type: dict
run_id:
  description: AzureML run ID or job name; the local run's name. In check mode, the name a submission would use.
  returned: always
  type: str
previous_run:
  description: The earlier attempt this run follows (its run name), when there was one.
  returned: when an earlier attempt exists
  type: str
msg:
  description: What was decided, in one sentence (reused, submitted, resubmitted after a failure).
  returned: AzureML backends
  type: str
status:
  description: Final (or current, without O(wait)) status, for example C(Completed).
  returned: always
  type: str
portal_url:
  description: AzureML studio link of the run.
  returned: AzureML backends
  type: str
outputs_dir:
  description: Local folder holding the run's outputs (metrics.jsonl, summary.json, checkpoints/).
  returned: when the run finished and its outputs are here
  type: str
metrics:
  description: C(steps) (step, loss), C(epochs) (train/val loss, val MAE, samples/s) and C(summary).
  returned: when the outputs are here
  type: dict
log_path:
  description: The streamed log of the run.
  returned: when waited for
  type: str
"""

import contextlib
import os
import shutil
import sys
import socket
import subprocess
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.job_runs import FAILED, attempt_name, decide
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.job_spec import (
    SAS_ENV,
    JobRequest,
    JobSpecError,
    build_spec,
    find_outputs,
    leaks,
    read_metrics,
    snapshot_source,
)


# --- SDK objects (what the tests check at the SDK boundary) --------------------------------

def v1_objects(spec: dict[str, Any], dockerfile_text: str, source_directory: str | None = None):
    """azureml-core ``(ScriptRunConfig, Environment)`` for a v1 spec."""
    from azureml.core import Environment, ScriptRunConfig
    from azureml.core.runconfig import DockerConfiguration, MpiConfiguration

    env = Environment.from_dockerfile(name=spec["environment"]["name"], dockerfile=dockerfile_text)
    env.python.user_managed_dependencies = spec["environment"]["user_managed_dependencies"]
    docker = spec["docker"]
    dist = spec["distribution"]
    src = ScriptRunConfig(
        source_directory=source_directory or spec["source_directory"], script=spec["script"],
        arguments=list(spec["arguments"]), compute_target=spec["compute_target"], environment=env,
        distributed_job_config=MpiConfiguration(process_count_per_node=dist["process_count_per_node"],
                                                node_count=dist["node_count"]),
        docker_runtime_config=DockerConfiguration(use_docker=docker["use_docker"], arguments=list(docker["arguments"]),
                                                  shm_size=docker["shm_size"]),
        max_run_duration_seconds=spec["max_run_duration_seconds"])
    src.run_config.environment_variables = dict(spec["environment_variables"])
    return src, env


def v2_job(spec: dict[str, Any], code: str | None = None):
    """azure-ai-ml command job for a v2 spec."""
    from azure.ai.ml import MpiDistribution, command
    from azure.ai.ml.entities import BuildContext, Environment

    build = spec["environment"]["build"]
    env = Environment(name=spec["environment"]["name"],
                      build=BuildContext(path=build["path"], dockerfile_path=build["dockerfile_path"]))
    res = spec["resources"]
    kwargs: dict[str, Any] = {}
    if spec.get("timeout"):
        kwargs["timeout"] = spec["timeout"]
    return command(
        name=spec["display_name"], display_name=spec["display_name"], experiment_name=spec["experiment_name"],
        code=code or spec["code"], command=spec["command"], environment=env, compute=spec["compute"],
        environment_variables=dict(spec["environment_variables"]),
        distribution=MpiDistribution(process_count_per_instance=spec["distribution"]["process_count_per_instance"]),
        instance_count=res["instance_count"], shm_size=res["shm_size"], docker_args=res["docker_args"], **kwargs)


# --- authentication -------------------------------------------------------------------------

def _auth_kind(p: dict[str, Any]) -> str:
    kind = p["auth_source"]
    if kind == "auto":
        if (p["client_id"] or os.environ.get("AZURE_CLIENT_ID")) and (p["secret"] or os.environ.get("AZURE_SECRET")):
            return "service_principal"
        if os.environ.get("IDENTITY_ENDPOINT") or os.environ.get("MSI_ENDPOINT"):
            return "msi"
        return "cli"
    return "service_principal" if kind == "env" else kind


def _sp(p: dict[str, Any]) -> tuple[str, str, str]:
    values = (p["tenant"] or os.environ.get("AZURE_TENANT", ""), p["client_id"] or os.environ.get("AZURE_CLIENT_ID", ""),
              p["secret"] or os.environ.get("AZURE_SECRET", ""))
    if not all(values):
        raise JobSpecError("service principal authentication needs tenant, client_id and secret "
                           "(or AZURE_TENANT, AZURE_CLIENT_ID, AZURE_SECRET)")
    return values


def v1_workspace(p: dict[str, Any]):
    from azureml.core import Workspace
    from azureml.core import authentication as a
    kind = _auth_kind(p)
    if kind == "service_principal":
        tenant, client, secret = _sp(p)
        auth = a.ServicePrincipalAuthentication(tenant_id=tenant, service_principal_id=client,
                                                service_principal_password=secret)
    elif kind == "msi":
        auth = a.MsiAuthentication(identity_config={"client_id": p["client_id"]} if p["client_id"] else None)
    else:
        auth = a.AzureCliAuthentication()
    return Workspace(_subscription(p), p["resource_group"], p["workspace_name"], auth=auth)


def v2_client(p: dict[str, Any]):
    from azure.ai.ml import MLClient
    from azure import identity
    kind = _auth_kind(p)
    if kind == "service_principal":
        tenant, client, secret = _sp(p)
        cred = identity.ClientSecretCredential(tenant, client, secret)
    elif kind == "msi":
        cred = identity.ManagedIdentityCredential(client_id=p["client_id"]) if p["client_id"] \
            else identity.ManagedIdentityCredential()
    else:
        cred = identity.AzureCliCredential()
    return MLClient(cred, _subscription(p), p["resource_group"], p["workspace_name"])


def _subscription(p: dict[str, Any]) -> str:
    sub = p["subscription_id"] or os.environ.get("AZURE_SUBSCRIPTION_ID")
    if not (sub and p["resource_group"] and p["workspace_name"]):
        raise JobSpecError("AzureML backends need subscription_id (or AZURE_SUBSCRIPTION_ID), resource_group "
                           "and workspace_name")
    return sub


# --- backends -----------------------------------------------------------------------------

@contextlib.contextmanager
def _quiet(log_path: str | None):
    """SDK chatter (and streamed logs) go to the log file (None: nowhere, in check mode):
    module stdout is JSON only."""
    if log_path:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    with open(log_path or os.devnull, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        yield log


def _check_result(verdict: dict[str, Any], existing: Any, status: str | None, run_id: str | None) -> dict:
    """What check mode reports: the run that would be reused, or the one that would be submitted."""
    result: dict[str, Any] = {"changed": verdict["action"] == "submit"}
    if verdict["previous"]:
        result["previous_run"] = verdict["previous"]
    if verdict["action"] == "reuse":
        result.update(run_id=run_id, status=status, msg=verdict["msg"])
    else:
        result.update(run_id=verdict["run_name"], status="NotSubmitted (check mode)",
                      msg=f"would submit {verdict['run_name']}: {verdict['msg']}")
    return result


def _finish(result: dict[str, Any], download_dir: str | None) -> dict[str, Any]:
    outputs = find_outputs(download_dir) if download_dir else None
    if outputs:
        result["outputs_dir"] = outputs
        result["metrics"] = read_metrics(outputs)
    return result


def _v1_attempts(exp: Any, name: str) -> dict[str, Any]:
    """The v1 runs of job ``name`` by attempt name (the newest run of each attempt)."""
    runs: dict[str, Any] = {}
    for run in exp.get_runs(tags={"amlhpc_run": name}):  # newest first
        tags = run.tags or {}
        try:
            attempt = int(tags.get("amlhpc_attempt") or 1)
        except ValueError:
            continue
        runs.setdefault(attempt_name(name, attempt), run)
    return runs


def run_v1(module: AnsibleModule, spec: dict[str, Any], req: JobRequest, prepare: Any, log_path: str | None) -> dict:
    p = module.params
    from azureml.core import Experiment
    with _quiet(log_path):
        ws = v1_workspace(p)
        exp = Experiment(ws, spec["experiment"])
        runs = _v1_attempts(exp, req.name)
        statuses = {n: r.get_status() for n, r in runs.items()}
        verdict = decide(req.name, statuses.items(), p["force"])
        if module.check_mode:
            run = runs.get(verdict["run_name"])
            return _check_result(verdict, run, statuses.get(verdict["run_name"]), run.id if run else None)
        if verdict["action"] == "reuse":
            run, changed = runs[verdict["run_name"]], False
        else:
            with open(p["dockerfile"], encoding="utf-8") as f:
                dockerfile_text = f.read()
            if p["sas"]:
                ws.get_default_keyvault().set_secret(name=req.sas_secret_name, value=p["sas"])
            src, _unused = v1_objects(spec, dockerfile_text, prepare())
            run = exp.submit(src, tags={"amlhpc_run": req.name, "amlhpc_attempt": str(verdict["attempt"])})
            run.display_name = verdict["run_name"]
            changed = True
        if p["wait"]:
            run.wait_for_completion(show_output=True, raise_on_error=False)
        status = run.get_status()
        result = {"changed": changed, "run_id": run.id, "status": status, "portal_url": run.get_portal_url(),
                  "msg": verdict["msg"]}
        if verdict["previous"]:
            result["previous_run"] = verdict["previous"]
        if p["wait"] and p["download_dir"]:
            run.download_files(prefix="outputs", output_directory=p["download_dir"])
    return _finish(result, p["download_dir"] if p["wait"] else None)


def _v2_attempts(client: Any, name: str) -> dict[str, Any]:
    """The v2 jobs of job ``name`` by attempt name: ``name``, ``name-r2``, ... until one is missing."""
    jobs: dict[str, Any] = {}
    attempt = 1
    while True:
        try:
            jobs[attempt_name(name, attempt)] = client.jobs.get(attempt_name(name, attempt))
        except Exception as exc:  # ResourceNotFoundError: no such attempt
            if "NotFound" not in type(exc).__name__ and "not found" not in str(exc).lower():
                raise
            return jobs
        attempt += 1


def run_v2(module: AnsibleModule, spec: dict[str, Any], req: JobRequest, prepare: Any, log_path: str | None) -> dict:
    p = module.params
    with _quiet(log_path):
        client = v2_client(p)
        jobs = _v2_attempts(client, req.name)
        verdict = decide(req.name, ((n, j.status) for n, j in jobs.items()), p["force"])
        if module.check_mode:
            job = jobs.get(verdict["run_name"])
            return _check_result(verdict, job, job.status if job else None, job.name if job else None)
        changed = verdict["action"] == "submit"
        if changed:
            snapshot, build = prepare()
            spec["environment"]["build"] = build
            job = client.jobs.create_or_update(v2_job({**spec, "display_name": verdict["run_name"]}, snapshot),
                                               experiment_name=spec["experiment_name"])
        else:
            job = jobs[verdict["run_name"]]
        if p["wait"]:
            client.jobs.stream(job.name)
            job = client.jobs.get(job.name)
        result = {"changed": changed, "run_id": job.name, "status": job.status, "portal_url": job.studio_url,
                  "msg": verdict["msg"]}
        if verdict["previous"]:
            result["previous_run"] = verdict["previous"]
        if p["wait"] and p["download_dir"]:
            client.jobs.download(job.name, download_path=p["download_dir"], all=True)
    return _finish(result, p["download_dir"] if p["wait"] else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_local(module: AnsibleModule, req: JobRequest, log_path: str) -> dict:
    p = module.params
    summary = os.path.join(req.output_dir, "summary.json")
    if os.path.exists(summary) and not p["force"]:
        return {"changed": False, "run_id": req.name, "status": "Completed", "outputs_dir": req.output_dir,
                "metrics": read_metrics(req.output_dir), "spec": build_spec(req, p["python"])}
    if module.check_mode:
        return {"changed": True, "run_id": req.name, "status": "NotSubmitted (check mode)",
                "spec": build_spec(req, p["python"])}
    spec = build_spec(req, p["python"], _free_port())
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_", "OMPI_"))}
    env.update(spec["environment_variables"])
    if req.account:
        if not p["sas"]:
            raise JobSpecError("local staging needs sas (it is handed to the job in its environment only)")
        env[SAS_ENV] = p["sas"]
    os.makedirs(req.output_dir, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "a", encoding="utf-8") as log:
        try:
            # The training job's output goes to the log file as it runs, under a timeout:
            # run_command holds it in memory and has no timeout.
            proc = subprocess.run(spec["command"], env=env,  # pylint: disable=ansible-bad-function
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=p["timeout"], check=False)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = None
    status = "Completed" if rc == 0 else ("TimedOut" if rc is None else "Failed")
    result = {"changed": True, "run_id": req.name, "status": status, "rc": rc, "spec": spec,
              "elapsed_s": round(time.monotonic() - started, 1), "outputs_dir": req.output_dir,
              "metrics": read_metrics(req.output_dir)}
    return result


def _tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def request_from(p: dict[str, Any]) -> JobRequest:
    out = p["output_dir"] or os.path.join(os.getcwd(), "outputs", p["name"])
    return JobRequest(
        backend=p["backend"], name=p["name"], experiment=p["experiment"], compute=p["compute"] or "",
        node_count=p["node_count"], process_count_per_node=p["process_count_per_node"],
        source_dir=p["source_dir"], script=p["script"],
        dockerfile=p["dockerfile"] or "", environment_name=p["environment_name"], docker_args=p["docker_args"],
        shm_size=p["shm_size"], data_dir=p["data_dir"] or "", account=p["account"] or "",
        container=p["container"] or "", prefix=p["prefix"] or "", stage_dir=p["stage_dir"] or "",
        shard_mode=p["shard_mode"], sas_secret_name=p["sas_secret_name"] or "",
        sas_keyvault_url=p["sas_keyvault_url"] or "", train_args=p["train_args"],
        environment_variables=p["environment_variables"], max_run_seconds=p["max_run_seconds"],
        output_dir=out if p["backend"] == "local" else "outputs", data_scope=p["data_scope"] or "",
        mounts=p["mounts"])


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            backend=dict(type="str", default="azureml_core", choices=["azureml_core", "azure_ai_ml", "local"]),
            name=dict(type="str", required=True),
            experiment=dict(type="str", default="cosmoflow"),
            subscription_id=dict(type="str"),
            resource_group=dict(type="str"),
            workspace_name=dict(type="str"),
            auth_source=dict(type="str", default="auto", choices=["auto", "cli", "env", "msi", "service_principal"]),
            client_id=dict(type="str"),
            secret=dict(type="str", no_log=True),
            tenant=dict(type="str"),
            compute=dict(type="str"),
            node_count=dict(type="int", default=1),
            process_count_per_node=dict(type="int", default=1),
            source_dir=dict(type="path", required=True),
            packages=dict(type="list", elements="path", default=[]),
            script=dict(type="str", default="train.py"),
            dockerfile=dict(type="path"),
            environment_name=dict(type="str", default="amlhpc-cosmoflow"),
            docker_args=dict(type="list", elements="str", default=["-v", "/mnt/scratch:/data"]),
            shm_size=dict(type="str", default="64g"),
            data_dir=dict(type="str"),
            account=dict(type="str"),
            container=dict(type="str"),
            prefix=dict(type="str", default=""),
            stage_dir=dict(type="str"),
            shard_mode=dict(type="str", default="suffix", choices=["suffix", "balanced"]),
            sas=dict(type="str", no_log=True),
            sas_secret_name=dict(type="str", no_log=False),
            sas_keyvault_url=dict(type="str", no_log=False),
            train_args=dict(type="dict", default={}),
            environment_variables=dict(type="dict", default={}),
            mounts=dict(type="list", elements="str", default=[]),
            data_scope=dict(type="str", choices=["global", "node"]),
            max_run_seconds=dict(type="int", default=0),
            wait=dict(type="bool", default=True),
            force=dict(type="bool", default=False),
            download_dir=dict(type="path"),
            log_path=dict(type="path"),
            output_dir=dict(type="path"),
            python=dict(type="path"),
            timeout=dict(type="int", default=3600),
        ),
        required_if=[("backend", "local", ("python",)), ("backend", "azureml_core", ("dockerfile", "compute")),
                     ("backend", "azure_ai_ml", ("dockerfile", "compute"))],
        supports_check_mode=True,
    )
    p = module.params
    try:
        req = request_from(p)
        spec = build_spec(req, p["python"] or "python")
    except JobSpecError as exc:
        module.fail_json(msg=str(exc))
    if leaks(spec, p["sas"]):
        module.fail_json(msg="internal error: the SAS reached the job spec; refusing to submit")
    work = os.path.join(os.getcwd(), ".cache", "aml_job", p["name"])
    where = req.output_dir if p["backend"] == "local" else (p["download_dir"] or work)
    log_path = p["log_path"] or os.path.join(where, "run.log")
    if p["backend"] != "local" and p["wait"] and not p["download_dir"] and not module.check_mode:
        module.fail_json(msg="wait needs download_dir (where the run's outputs/ are fetched to)")
    if module.check_mode:
        log_path = None

    def prepare_v1() -> str:
        return snapshot_source(p["source_dir"], os.path.join(work, "src"), p["packages"])

    def prepare_v2() -> tuple[str, dict[str, str]]:
        # The Dockerfile alone is the build context (it copies nothing in).
        build = os.path.join(work, "docker")
        os.makedirs(build, exist_ok=True)
        shutil.copyfile(p["dockerfile"], os.path.join(build, "Dockerfile"))
        return prepare_v1(), {"path": build, "dockerfile_path": "Dockerfile"}

    try:
        if p["backend"] == "local":
            result = run_local(module, req, log_path)
        else:
            if p["backend"] == "azureml_core":
                result = run_v1(module, spec, req, prepare_v1, log_path)
            else:
                result = run_v2(module, spec, req, prepare_v2, log_path)
            result["spec"] = spec
    except JobSpecError as exc:
        module.fail_json(msg=str(exc))
    except ImportError as exc:
        module.fail_json(msg=f"the {p['backend']} SDK is not importable by {sys.executable}: {exc}; "
                             "install requirements.txt into the controller venv")
    if module.check_mode:
        module.exit_json(**result)
    result["log_path"] = log_path
    if result["status"] in FAILED:
        decided = result.pop("msg", "")
        module.fail_json(msg=f"run {result['run_id']} ended {result['status']} ({decided or 'local run'}); running "
                             f"the task again submits a new attempt. Last lines of {log_path}:\n"
                             f"{_tail(log_path)}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
