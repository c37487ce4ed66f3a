#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Submit the CosmoFlow training job to AzureML (either SDK) or run it here with torchrun.

The wrapper: options, documentation and dispatch. The backends live in module_utils
(``aml_job_v1``, ``aml_job_v2``, ``aml_job_local``), the job spec in ``job_spec``, the
attempt logic in ``job_runs``, the workspace and credential in ``aml_sdk`` (the auth plan
the inventory plugin and aml_compute_cluster use too)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: aml_job
short_description: Run the CosmoFlow training job on AzureML or on this machine
version_added: "1.0.0"
description:
  - Builds the job from C(plugins/module_utils/amlhpc/azure/job_spec.py) and submits it.
  - The AzureML backends connect to the workspace as the inventory plugin
    P(amlhpc.azureml.azureml_compute#inventory) and M(amlhpc.azureml.aml_compute_cluster) do
    (the same O(auth_source) rules, environment variables and error messages).
  - C(azure_ai_ml) (SDK v2, the default) - a C(command) job with C(MpiDistribution), an
    environment built from the Dockerfile's folder, C(resources.instance_count), C(docker_args)
    (docker run arguments that bind the BeeOND mount into the container, C(-v /mnt/scratch:/data))
    and C(shm_size).
  - C(azureml_core) (SDK v1, out of support since 2026-06-30; kept for workspaces that still use
    it) - an C(Environment) from the project's Dockerfile, a C(ScriptRunConfig) with
    C(MpiConfiguration) (nodes x processes per node) and the same docker run arguments.
  - C(local) - the same training script with torchrun and the workload venv's Python on the
    control host; writes only under O(output_dir); needs no root.
  - The staging SAS never appears in arguments or variables. azure_ai_ml reads it in the job
    from O(sas_keyvault_url) with its managed identity; azureml_core stores it in the
    workspace's default Key Vault under O(sas_secret_name) (the job reads it with
    C(Run.get_secret)); local passes it in the child processes' environment.
  - A run is submitted once per O(name). Running the task again reports the existing run
    (changed=false) while it is queued, running or completed. After a failed or cancelled run
    it submits a new attempt under a new name (C(<name>-r2), C(<name>-r3), ...), as an AzureML v2
    job name can never be reused; v1 runs carry C(amlhpc_attempt) in their tags. O(force=true)
    submits a new attempt whatever the last one did.
  - Check mode looks the runs up (read-only) and reports what a real run would do, changed
    only when it would submit, with the run name it would use. It uploads and submits nothing.
  - Waiting streams the run's log into O(log_path) (module output is JSON only), then downloads
    the run's C(outputs/) folder to O(download_dir) and returns its metrics.
  - A run waited for that does not end C(Completed) fails the task with one message - the run, its
    status, its studio link, the service's error and the last lines of the failing node's log (the
    log the error names, else the first rank whose log ends in a traceback; the logs of every process
    are downloaded to O(download_dir), C(artifacts/user_logs/) or C(logs/)). C(Failed), C(Canceled)
    and C(CancelRequested) - the next run of the task submits a new attempt. C(NotResponding) (it may
    come back), C(Paused) and C(Unknown) or any status the module does not know - no new attempt is
    submitted on its own (a second copy could run beside it); the message says what to do, and
    O(force=true) submits one.
  - A completed run, once downloaded, is recorded in C(<download_dir>/.amlhpc-job.json) (the
    backend, the workspace, the job name, the run). While that record and the outputs are there,
    running the task again (check mode too) answers from them, changed=false, without asking the
    workspace, streaming the log or downloading the outputs again (a completed AzureML run never
    changes). O(force=true) submits a new attempt as before; deleting the record or the outputs
    asks the workspace again. A record of another workspace or job name is not used.
attributes:
  action:
    support: full
    details:
      - Its action plugin answers a recorded completed run (see the description) on the
        controller, without running the module; everything else runs the module.
  async:
    support: none
  bypass_host_loop:
    support: none
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
  - ansible.builtin.action_common_attributes.flow
options:
  backend:
    description:
      - Where the job runs.
      - C(azure_ai_ml) - azure-ai-ml (SDK v2), the default.
      - C(azureml_core) - azureml-core (SDK v1), out of support since 2026-06-30 (Microsoft's end of
        support for SDK v1); kept for workspaces that still use it. It was the default before, so a
        task that names no backend and is to keep submitting through azureml-core says so now.
      - C(local) - torchrun on the control host.
    type: str
    choices: [azure_ai_ml, azureml_core, local]
    default: azure_ai_ml
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
    description: Workspace Key Vault secret name holding the SAS (azureml_core, SDK v1).
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
      - The submit role passes the node's NCCL set-up this way (C(/etc/nccl.conf), the topology file,
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
  node_verdict:
    description:
      - Where the health gate left nodes out (C(healthcheck_on_failure=exclude)) - C(file), the verdict file on every
        node, and C(id), the verdict's id (the healthcheck role's C(healthcheck_verdict)).
      - Every node then runs C(launch.py) once (one process per node, the file mounted read-only); it starts torchrun
        with O(process_count_per_node) processes and the elastic rendezvous of the good nodes where its node's
        verdict says it trains, and ends at once, without training, elsewhere. AzureML cannot leave a node out of a
        job, so the job does.
      - Empty (the default) - the training script runs as before.
    type: dict
    default: {}
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
  work_dir:
    description:
      - AzureML backends - the folder for the source snapshot (C(src/)) and the image's build
        context (C(docker/)) the SDK uploads, rewritten on every submission.
      - Default C(<cwd>/.cache/aml_job/<name>); a module run by a play on the control host runs in
        the playbook's folder, so the submit role passes one under its project folder.
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
- name: Job | Train CosmoFlow on 4 NDv4 nodes (azure-ai-ml, the default backend)
  amlhpc.azureml.aml_job:
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
    # The job's managed identity reads the SAS from this Key Vault secret.
    sas_keyvault_url: https://kv-hpc.vault.azure.net/cosmoflow-sas
    train_args: {epochs: 64, batch_size: 4, amp: bf16}
    download_dir: "{{ playbook_dir }}/../outputs/cosmoflow-4x8"

- name: Job | Legacy - the same on a workspace that still uses azureml-core (SDK v1, out of support since 2026-06-30)
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
    # Stored in the workspace's default Key Vault under this name; the job reads it back.
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
  description:
    - What was decided, in one sentence (reused, answered from the record of a completed run,
      submitted, resubmitted after a failure; local - run here, or finished here before).
  returned: success
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
error:
  description: The service's error of a run that did not complete (empty when it gave none).
  returned: when waited for and the run did not complete
  type: str
  version_added: 2.2.0
failed_log:
  description: The downloaded log of the node that failed (the one the message quotes).
  returned: when waited for, the run did not complete and its node logs came down
  type: str
  version_added: 2.2.0
download_error:
  description: Why the outputs or logs of a run that did not complete could not be downloaded.
  returned: when that download failed
  type: str
  version_added: 2.2.0
node_loss:
  description:
    - The node the run lost, as the job's heartbeat named it in the run's log (C(--node-loss-timeout) of the
      training script) - C(node) (its host name) and C(ip), C(ranks), C(world), C(seen) (C(missed heartbeat) or
      C(collective timed out)), C(last) and C(at) (its last beat and when it was found, UTC), C(sentence).
  returned: when the run failed because a node was lost
  type: dict
  version_added: 2.2.0
"""

import os
import shutil
import sys
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.azure.aml_job_local import run_local
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.azure.aml_job_options import (
    ARGUMENT_SPEC,
    REQUIRED_IF,
    record_identity,
    recorded_answer,
    request_from,
)
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.sdk.aml_job_v1 import run_v1
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.sdk.aml_job_v2 import run_v2
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.azure.aml_nodes import (
    AmlNodesError,
    resolve_auth,
    subscription_from,
)
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.sdk.aml_sdk import AmlClient, connect
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.azure.job_runs import (
    COMPLETED,
    failing_log,
    failure_message,
    log_refusal,
    log_tail,
    node_logs,
    stopped_first,
    write_record,
)
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.azure.job_spec import (
    JobRequest,
    JobSpecError,
    build_spec,
    leaks,
    sas_like_values,
    snapshot_source,
)
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.recovery.node_loss import parse_loss_file
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_sas import redact

# The SDK of each AzureML backend (aml_sdk's client names).
SDKS = {"azureml_core": "azureml-core", "azure_ai_ml": "azure-ai-ml"}
# Where each backend's run logs land in download_dir (azure-ai-ml's jobs.download: the artifact
# store under artifacts/; azureml-core's get_all_logs: logs/).
LOGS = {"azure_ai_ml": "artifacts", "azureml_core": "logs"}


def unfinished(p: dict[str, Any], result: dict[str, Any], log_path: str) -> str:
    """The message of an AzureML run that was waited for and did not complete, with the last
    lines of its failing node's log (the streamed log when no node log came down); records
    that log's path in ``result['failed_log']``."""
    logs = node_logs(os.path.join(p["download_dir"], LOGS[p["backend"]])) if p["download_dir"] else {}
    error = result.get("error") or ""
    name = failing_log({n: log_tail(path) for n, path in logs.items()}, error)
    if name:
        result["failed_log"], tail = logs[name], log_tail(logs[name])
    else:
        name, tail = f"the streamed log {log_path}", log_tail(log_path)
        if result.get("download_error"):
            name += f" (the node logs did not come down: {result['download_error']})"
    refused = log_refusal(result.get("failed_log") or log_path)
    return failure_message(result["run_id"], result["status"], result.get("portal_url"), error,
                           result.get("next_attempt", "a new name"), name, tail, refused)


def workspace_client(p: dict[str, Any]) -> AmlClient:
    """The workspace through the backend's SDK, with the credential the shared auth plan picks."""
    auth = resolve_auth(p["auth_source"], p, os.environ)
    return connect(SDKS[p["backend"]], subscription_from(p, os.environ), p["resource_group"], p["workspace_name"],
                   auth, who=f"backend {p['backend']}", alternative="use backend: local")


def run_azureml(module: AnsibleModule, spec: dict[str, Any], req: JobRequest, work: str,
                log_path: str | None) -> dict[str, Any]:
    p = module.params

    def prepare_v1() -> str:
        return snapshot_source(p["source_dir"], os.path.join(work, "src"), p["packages"])

    def prepare_v2() -> tuple[str, dict[str, str]]:
        # The Dockerfile alone is the build context (it copies nothing in).
        build = os.path.join(work, "docker")
        os.makedirs(build, exist_ok=True)
        shutil.copyfile(p["dockerfile"], os.path.join(build, "Dockerfile"))
        return prepare_v1(), {"path": build, "dockerfile_path": "Dockerfile"}

    client = workspace_client(p)
    try:
        if p["backend"] == "azureml_core":
            result = run_v1(client, p, module.check_mode, spec, req, prepare_v1, log_path)
        else:
            result = run_v2(client, p, module.check_mode, spec, req, prepare_v2, log_path)
    except (AmlNodesError, JobSpecError, ImportError):
        raise
    except Exception as exc:  # an SDK call refused the credential: the shared one sentence
        refused = client.auth_failure(exc)
        if refused is None:
            raise
        raise refused from None
    if p["wait"] and p["download_dir"] and not module.check_mode:
        write_record(p["download_dir"], record_identity(p, os.environ), result)
    result["spec"] = spec
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=REQUIRED_IF,
        supports_check_mode=True,
    )
    p = module.params
    # A run this controller saw complete and downloaded: answered from its record (the action
    # plugin gives the same answer without running the module).
    recorded = recorded_answer(p, module.check_mode, os.environ)
    if recorded:
        module.exit_json(**recorded)
    # A SAS in the plain arguments is refused below; the result's invocation must not show it back
    # (ansible-core 2.18 prints the invocation at -vvv).
    module.no_log_values.update(sas_like_values(p["train_args"], p["environment_variables"]))
    try:
        req = request_from(p)
        spec = build_spec(req, p["python"] or "python")
    except JobSpecError as exc:
        module.fail_json(msg=str(exc))
    if leaks(spec, p["sas"]):
        module.fail_json(msg="internal error: the SAS reached the job spec; refusing to submit")
    work = p["work_dir"] or os.path.join(os.getcwd(), ".cache", "aml_job", p["name"])
    where = req.output_dir if p["backend"] == "local" else (p["download_dir"] or work)
    log_path = p["log_path"] or os.path.join(where, "run.log")
    if p["backend"] != "local" and p["wait"] and not p["download_dir"] and not module.check_mode:
        module.fail_json(msg="wait needs download_dir (where the run's outputs/ are fetched to)")
    if module.check_mode:
        log_path = None

    # The log is appended to (a rerun, an attempt after a failure): only this run's part is read.
    log_start = os.path.getsize(log_path) if log_path and os.path.exists(log_path) else 0
    try:
        if p["backend"] == "local":
            result = run_local(p, module.check_mode, req, log_path)
        else:
            result = run_azureml(module, spec, req, work, log_path)
    except (JobSpecError, AmlNodesError) as exc:
        module.fail_json(msg=str(exc))
    except ImportError as exc:
        module.fail_json(msg=f"the {p['backend']} SDK is not importable by {sys.executable}: {exc}; "
                             "install requirements.txt into the controller venv")
    if module.check_mode:
        module.exit_json(**result)
    result["log_path"] = log_path
    if result["status"] not in COMPLETED and (p["backend"] == "local" or p["wait"]):
        # The job's heartbeat named a lost node (workload/cosmoflow/heartbeat.py): that sentence first.
        loss = parse_loss_file(log_path, start=log_start)
        if loss:
            result["node_loss"] = loss
        if p["backend"] == "local":
            message = (f"run {result['run_id']} ended {result['status']} (local run); running the task again runs "
                       f"it again. Last lines of {log_path}:\n{log_tail(log_path)}")
            message = stopped_first(result["run_id"], log_refusal(log_path), message)
        else:
            message = unfinished(p, result, log_path)
        if loss:
            message = f"{loss['sentence']} {message}"
        # The job's last lines may hold a secret the module was never given (the checkpoint store's
        # SAS, read by the job from a file on the node): every signature goes, whoever printed it.
        message = redact(message)
        for key in ("error", "download_error"):  # the service's words, which can quote the job's
            if result.get(key):
                result[key] = redact(result[key])
        result.pop("msg", None)
        result.pop("next_attempt", None)
        module.fail_json(msg=message, **result)
    result.pop("next_attempt", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
