# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""aml_job's azureml-core (SDK v1) backend: a ``ScriptRunConfig`` with ``MpiConfiguration``
(nodes x processes per node) submitted to an ``Experiment``.

The workspace comes from ``aml_sdk`` (the auth plan every part shares). azureml-core is
imported inside the functions: without it, this file still imports. The tests put fakes in
at the SDK boundary (``azureml.core.Workspace``, ``Experiment``) and read the real
``ScriptRunConfig`` as the service receives it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from .aml_sdk import AmlClient, is_auth_error
from ..azure.aml_nodes import AmlNodesError
from ..azure.job_runs import (
    COMPLETED,
    attempt_name,
    check_result,
    decide,
    finish,
    quiet,
    service_error,
    settle,
    status_text,
    watch_failed,
)
from ..azure.job_spec import JobRequest


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


def v1_attempts(exp: Any, name: str) -> dict[str, Any]:
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


def wait_v1(run: Any) -> str:
    """Stream ``run``'s log until it ends (azureml-core's ``wait_for_completion``, which raises
    ``ActivityFailedException`` with the run's error for a failed run), then ask until it has
    left post-processing. Returns the service's error ("" when none was raised)."""
    from azureml.exceptions import ActivityFailedException

    error = ""
    try:
        run.wait_for_completion(show_output=True, raise_on_error=True)
    except ActivityFailedException as exc:
        error = service_error(str(getattr(exc, "message", None) or exc))
    settle(lambda: status_text(run.get_status()), time.sleep)
    return error


def run_v1(client: AmlClient, p: Mapping[str, Any], check_mode: bool, spec: dict[str, Any], req: JobRequest,
           prepare: Callable[[], str], log_path: str | None) -> dict[str, Any]:
    """Reuse, submit or resubmit job ``req.name`` (module options ``p``); wait and download
    when ``p['wait']``. ``prepare`` makes the source snapshot (only when submitting)."""
    from azureml.core import Experiment
    with quiet(log_path):
        ws = client.workspace()
        exp = Experiment(ws, spec["experiment"])
        runs = v1_attempts(exp, req.name)
        statuses = {n: r.get_status() for n, r in runs.items()}
        verdict = decide(req.name, statuses.items(), p["force"])
        if check_mode:
            run = runs.get(verdict["run_name"])
            return check_result(verdict, statuses.get(verdict["run_name"]), run.id if run else None)
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
        nxt = attempt_name(req.name, verdict["attempt"] + 1)
        last = statuses.get(verdict["run_name"]) or "NotStarted"  # as last seen (a new run: its first)
        try:
            error = wait_v1(run) if p["wait"] else ""
            status = status_text(run.get_status())
        except Exception as exc:  # any SDK or HTTP error: the run, its last status, its link, what to do
            if is_auth_error(exc):
                raise
            raise AmlNodesError(watch_failed(run.id, last, run.get_portal_url(), exc, nxt)) from None
        result = {"changed": changed, "run_id": run.id, "status": status, "portal_url": run.get_portal_url(),
                  "msg": verdict["msg"], "next_attempt": attempt_name(req.name, verdict["attempt"] + 1)}
        if verdict["previous"]:
            result["previous_run"] = verdict["previous"]
        if p["wait"] and status not in COMPLETED:
            result["error"] = error
        if p["wait"] and p["download_dir"]:
            try:
                run.download_files(prefix="outputs", output_directory=p["download_dir"])
                if status not in COMPLETED:  # the failing node's log tells why
                    run.get_all_logs(destination=os.path.join(p["download_dir"], "logs"))
            except Exception as exc:  # a run that did not complete is reported whatever the download did
                if status in COMPLETED and not is_auth_error(exc):
                    raise AmlNodesError(watch_failed(run.id, status, run.get_portal_url(), exc, nxt,
                                                     downloading=p["download_dir"])) from None
                if status in COMPLETED:
                    raise
                result["download_error"] = f"{type(exc).__name__}: {service_error(str(exc))}"
    return finish(result, p["download_dir"] if p["wait"] else None)
