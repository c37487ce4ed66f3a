# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""aml_job's options, the job request they make, and the answer for a run the controller
has the record of (``job_runs.RECORD``): shared by the module and its action plugin.

The action plugin answers from the record on the controller, in the worker Ansible forks for
the task, and runs the module only where there is no such record: a rerun of a finished job
then costs no module run (no interpreter, no SDK import). Both use :func:`recorded_answer`,
so the answer is the same wherever it is made.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .aml_nodes import auth_argument_spec, subscription_from
from .job_runs import RECORD, finish, read_record, recorded_result
from .job_spec import JobRequest, build_spec, leaks

ARGUMENT_SPEC: dict[str, dict[str, Any]] = dict(
    # azure_ai_ml (SDK v2) by default: azureml-core (SDK v1) is out of support since 2026-06-30.
    backend=dict(type="str", default="azure_ai_ml", choices=["azure_ai_ml", "azureml_core", "local"]),
    name=dict(type="str", required=True),
    experiment=dict(type="str", default="cosmoflow"),
    **auth_argument_spec(),
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
    node_verdict=dict(type="dict", default={}),
    max_run_seconds=dict(type="int", default=0),
    wait=dict(type="bool", default=True),
    force=dict(type="bool", default=False),
    download_dir=dict(type="path"),
    log_path=dict(type="path"),
    work_dir=dict(type="path"),
    output_dir=dict(type="path"),
    python=dict(type="path"),
    timeout=dict(type="int", default=3600),
)
"""aml_job's options (its DOCUMENTATION describes them)."""

REQUIRED_IF = [("backend", "local", ("python",)), ("backend", "azureml_core", ("dockerfile", "compute")),
               ("backend", "azure_ai_ml", ("dockerfile", "compute"))]


def request_from(p: Mapping[str, Any]) -> JobRequest:
    """The job request of the options ``p``."""
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
        mounts=p["mounts"], node_verdict=p.get("node_verdict") or {})


def record_identity(p: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """What the record of job ``p['name']`` must match: the backend, the workspace, the name."""
    return {**p, "subscription_id": subscription_from(p, environ)}


def recorded_answer(p: Mapping[str, Any], check_mode: bool, environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The task's whole result for options ``p`` where the download folder holds the record of
    this job's completed run and its outputs (an AzureML backend, waiting, not forced); None
    where the workspace is to be asked. The spec is built as the module builds it (a spec
    error or a SAS in it leaves the answer to the module, which says so)."""
    download_dir = p.get("download_dir")
    if p["backend"] == "local" or not p["wait"] or not download_dir or p["force"]:
        return None
    record = read_record(download_dir, record_identity(p, environ))
    if record is None:
        return None
    try:
        spec = build_spec(request_from(p), p["python"] or "python")
    except ValueError:
        return None
    if leaks(spec, p["sas"]):
        return None
    result = finish(recorded_result(record, os.path.join(download_dir, RECORD)), download_dir)
    result["spec"] = spec
    if not check_mode:
        result["log_path"] = p["log_path"] or os.path.join(download_dir, "run.log")
    return result
