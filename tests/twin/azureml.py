"""The twin's AzureML: what azure-ai-ml's ``MLClient`` talks to when aml_job submits to the twin.

``aml_job`` (backend azure_ai_ml) runs unchanged: it builds the real ``command`` job; the
stand-in turns it into the REST payload the service would receive
(``job._to_job()._to_rest_object()``) and runs that on the twin's nodes (``Twin.run_job``):
command, instance count, processes per instance, docker arguments, shared memory and
environment variables, all from the payload. The job history (name -> status) lives in the
state file, so a second ``aml_job`` sees the finished run as the service would.

Set by the test: ``TWIN_AZUREML_STATE`` (a JSON file: ``{"twin": <Twin.save_state path>,
"python": <the workload venv's interpreter>, "jobs": {...}}``) and ``PYTHONPATH`` including
``tests/twin/azureml_standin``. What it cannot stand in for: image builds from the Dockerfile
(the job containers run the test image with the workload venv mounted), Key Vault secrets,
run history in the portal.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from twin.cluster import Twin


class ResourceNotFoundError(Exception):
    """As azure-core names it (aml_job tells "not found" from other errors by the name)."""


class _Job:
    def __init__(self, name: str, status: str) -> None:
        self.name, self.status = name, status
        self.studio_url = f"https://ml.azure.com/runs/{name}?twin=1"


class TwinJobs:
    def __init__(self, state_path: str) -> None:
        self.state_path = Path(state_path)

    def _state(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text())

    def _save(self, state: dict[str, Any]) -> None:
        self.state_path.write_text(json.dumps(state, indent=2))

    def get(self, name: str) -> _Job:
        job = self._state().get("jobs", {}).get(name)
        if job is None:
            raise ResourceNotFoundError(f"job {name} not found")
        return _Job(name, job["status"])

    def create_or_update(self, job: Any, experiment_name: str | None = None, **_: Any) -> _Job:
        rest = job._to_job()._to_rest_object().as_dict()["properties"]
        state = self._state()
        twin = Twin.attach(Path(state["twin"]))
        name = job.name
        runs = Path(state["runs"]) / name
        run = twin.run_job(rest, Path(job.code), python=state["python"], name=name, outputs=runs / "outputs",
                           timeout=state.get("timeout", 900), audit_reads=state.get("audit_reads", False))
        (runs / "rest.json").write_text(json.dumps(rest, indent=2, default=str))
        (runs / "logs.txt").write_text("\n".join(f"===== node {i} (rc {rc})\n{log}" for i, (rc, log)
                                                  in enumerate(zip(run.returncodes, run.logs))))
        (runs / "reads.json").write_text(json.dumps({p: {"count": n, "ranks": sorted(run.readers[p])}
                                                     for p, n in run.reads.items()}, indent=2))
        state.setdefault("jobs", {})[name] = {"status": "Completed" if run.ok else "Failed",
                                              "outputs": str(runs / "outputs"), "logs": str(runs / "logs.txt"),
                                              "experiment": experiment_name}
        self._save(state)
        return _Job(name, state["jobs"][name]["status"])

    def stream(self, name: str) -> None:
        job = self._state()["jobs"][name]
        print(Path(job["logs"]).read_text())

    def download(self, name: str, download_path: str, all: bool = False, **_: Any) -> None:  # noqa: A002
        job = self._state()["jobs"][name]
        dest = Path(download_path) / "artifacts" / "outputs"
        if dest.exists():
            shutil.rmtree(dest)
        if Path(job["outputs"]).exists():
            shutil.copytree(job["outputs"], dest)


class TwinMLClient:
    """``MLClient(credential, subscription_id, resource_group, workspace_name)``: only ``jobs``."""

    def __init__(self, credential: Any = None, subscription_id: str | None = None,
                 resource_group_name: str | None = None, workspace_name: str | None = None, **_: Any) -> None:
        self.jobs = TwinJobs(os.environ["TWIN_AZUREML_STATE"])
