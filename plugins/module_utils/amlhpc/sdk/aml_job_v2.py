# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""aml_job's azure-ai-ml (SDK v2) backend: a ``command`` job with ``MpiDistribution``, its
environment built from the Dockerfile, submitted through ``MLClient.jobs``.

The ``MLClient`` comes from ``aml_sdk`` (the auth plan every part shares). azure-ai-ml is
imported inside the functions: without it, this file still imports. A v2 job name is unique
in the workspace for good, so each attempt has its own (``job_runs.attempt_name``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from .aml_sdk import AmlClient, is_auth_error, is_not_found
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
    lookup_failed,
    watch_failed,
)
from ..azure.aml_nodes import AmlNodesError
from ..azure.job_spec import JobRequest


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


def v2_attempts(jobs: Any, name: str) -> dict[str, Any]:
    """The v2 jobs of job ``name`` by attempt name: ``name``, ``name-r2``, ... until one is missing."""
    found: dict[str, Any] = {}
    attempt = 1
    while True:
        try:
            found[attempt_name(name, attempt)] = jobs.get(attempt_name(name, attempt))
        except Exception as exc:  # ResourceNotFoundError: no such attempt
            # AAD's refusal may say "... was not found in the directory": not a missing job.
            if is_auth_error(exc) or not is_not_found(exc):
                raise
            return found
        attempt += 1


def wait_v2(jobs: Any, name: str, seen: dict[str, Any] | None = None) -> tuple[Any, str]:
    """Stream job ``name``'s log until it ends (azure-ai-ml's ``jobs.stream``), then ask until
    it has left post-processing. Returns the job as it ended and the service's error: the SDK
    raises ``JobException`` (its message the run's error) for a failed job; it returns for every
    other ending (Canceled, NotResponding, Paused, ...), and may return while still Finalizing."""
    from azure.ai.ml.exceptions import JobException

    error = ""
    try:
        jobs.stream(name)
    except JobException as exc:
        error = service_error(str(getattr(exc, "message", None) or exc))
    latest: dict[str, Any] = {} if seen is None else seen  # the job as last read, for an error's message

    def status() -> str:
        latest["job"] = jobs.get(name)
        return status_text(latest["job"].status)

    settle(status, time.sleep)
    return latest["job"], error


def run_v2(client: AmlClient, p: Mapping[str, Any], check_mode: bool, spec: dict[str, Any], req: JobRequest,
           prepare: Callable[[], tuple[str, dict[str, str]]], log_path: str | None) -> dict[str, Any]:
    """Reuse, submit or resubmit job ``req.name`` (module options ``p``); wait and download
    when ``p['wait']``. ``prepare`` makes the source snapshot and the image's build context."""
    with quiet(log_path):
        jobs = client.client().jobs
        try:
            found = v2_attempts(jobs, req.name)
        except Exception as exc:  # any SDK or HTTP error while looking the job up: nothing was submitted
            if is_auth_error(exc):
                raise
            raise AmlNodesError(lookup_failed(req.name, exc)) from None
        verdict = decide(req.name, ((n, status_text(j.status)) for n, j in found.items()), p["force"])
        if check_mode:
            job = found.get(verdict["run_name"])
            return check_result(verdict, status_text(job.status) if job else None, job.name if job else None)
        changed = verdict["action"] == "submit"
        if changed:
            snapshot, build = prepare()
            spec["environment"]["build"] = build
            job = jobs.create_or_update(v2_job({**spec, "display_name": verdict["run_name"]}, snapshot),
                                        experiment_name=spec["experiment_name"])
        else:
            job = found[verdict["run_name"]]
        error = ""
        nxt = attempt_name(req.name, verdict["attempt"] + 1)
        if p["wait"]:
            seen = {"job": job}
            try:
                job, error = wait_v2(jobs, job.name, seen)
            except Exception as exc:  # any SDK or HTTP error: the run, its last status, its link, what to do
                if is_auth_error(exc):
                    raise
                last = seen["job"]
                raise AmlNodesError(watch_failed(job.name, status_text(last.status), job.studio_url, exc,
                                                 nxt)) from None
        status = status_text(job.status)
        result = {"changed": changed, "run_id": job.name, "status": status, "portal_url": job.studio_url,
                  "msg": verdict["msg"], "next_attempt": attempt_name(req.name, verdict["attempt"] + 1)}
        if verdict["previous"]:
            result["previous_run"] = verdict["previous"]
        if p["wait"] and status not in COMPLETED:
            result["error"] = error
        if p["wait"] and p["download_dir"]:
            # The outputs, and the logs of every process (artifacts/user_logs/): a run that did not
            # complete is told by its failing node's log; what it saved is kept for a resume.
            try:
                jobs.download(job.name, download_path=p["download_dir"], all=True)
            except Exception as exc:  # a run that did not complete is reported whatever the download did
                if status in COMPLETED and not is_auth_error(exc):
                    raise AmlNodesError(watch_failed(job.name, status, job.studio_url, exc, nxt,
                                                     downloading=p["download_dir"])) from None
                if status in COMPLETED:
                    raise
                result["download_error"] = f"{type(exc).__name__}: {service_error(str(exc))}"
    return finish(result, p["download_dir"] if p["wait"] else None)
