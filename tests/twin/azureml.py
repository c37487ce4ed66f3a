"""The twin's AzureML: what azure-ai-ml's ``MLClient`` talks to when aml_job submits to the twin,
and when the cluster phase (aml_compute_cluster, the azureml_compute inventory) asks for the
cluster (``TwinWorld``: its REST payload in the state file, its nodes the twin's containers).

``aml_job`` (backend azure_ai_ml) runs unchanged: it builds the real ``command`` job; the
stand-in turns it into the REST payload the service would receive
(``job._to_job()._to_rest_object()``) and runs that on the twin's nodes (``Twin.run_job``):
command, instance count, processes per instance, docker arguments, shared memory and
environment variables, all from the payload. The job history (name -> status) lives in the
state file, so a second ``aml_job`` sees the finished run as the service would. A failed run's
stream raises azure-ai-ml's ``JobException`` with the run's error (the first node that failed, its
log named), and its download brings each node's log (``artifacts/user_logs/``), as the SDK's do.

Set by the test: ``TWIN_AZUREML_STATE`` (a JSON file: ``{"twin": <Twin.save_state path>,
"python": <the workload venv's interpreter>, "jobs": {...}}``, and for the cluster's API
``"cluster": <name>, "workspace": <name>, "computes": {<name>: <ComputeResource payload>}``) and ``PYTHONPATH`` including
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

from azureml_fakes import RG, SUB, WS, World, fake_credential, fake_transport, install_arm, install_v1
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
        # Each node's log where AzureML's artifact store keeps the processes' logs (user_logs/),
        # and the run's error as run history gives it: the first node that failed, its log named.
        (runs / "user_logs").mkdir(exist_ok=True)
        for i, log in enumerate(run.logs):
            (runs / "user_logs" / f"std_log_node_{i}.txt").write_text(log)
        failed = [(i, rc) for i, rc in enumerate(run.returncodes) if rc != 0]
        error = None if run.ok else {"error": {"code": "UserError", "message": (
            f"Execution failed. User process on node {failed[0][0]} exited with status code {failed[0][1]}. Please "
            f"check log file 'user_logs/std_log_node_{failed[0][0]}.txt' for error details." if failed else
            "Execution failed.")}}
        (runs / "reads.json").write_text(json.dumps({p: {"count": n, "ranks": sorted(run.readers[p])}
                                                     for p, n in run.reads.items()}, indent=2))
        state.setdefault("jobs", {})[name] = {"status": "Completed" if run.ok else "Failed",
                                              "outputs": str(runs / "outputs"), "logs": str(runs / "logs.txt"),
                                              "user_logs": str(runs / "user_logs"), "error": error,
                                              "experiment": experiment_name}
        self._save(state)
        return _Job(name, state["jobs"][name]["status"])

    def stream(self, name: str) -> None:
        """The run's log; for a failed run, azure-ai-ml's JobException with the run's error, worded
        as the SDK's stream words it."""
        job = self._state()["jobs"][name]
        print(Path(job["logs"]).read_text())
        if job["status"] == "Failed":
            from azure.ai.ml.exceptions import ErrorCategory, ErrorTarget, JobException
            raise JobException(message="Exception : \n {} ".format(json.dumps(job.get("error"), indent=4)),
                               target=ErrorTarget.JOB, no_personal_data_message="Exception raised on failed job.",
                               error_category=ErrorCategory.SYSTEM_ERROR)

    def download(self, name: str, download_path: str, all: bool = False, **_: Any) -> None:  # noqa: A002
        state = self._state()
        job = state["jobs"][name]
        job["downloads"] = job.get("downloads", 0) + 1  # what a rerun should not repeat
        self._save(state)
        dest = Path(download_path) / "artifacts" / "outputs"
        if dest.exists():
            shutil.rmtree(dest)
        if Path(job["outputs"]).exists():
            shutil.copytree(job["outputs"], dest)
        if job.get("user_logs") and Path(job["user_logs"]).exists():
            shutil.copytree(job["user_logs"], Path(download_path) / "artifacts" / "user_logs", dirs_exist_ok=True)


class TwinWorld(World):
    """The twin's AmlCompute, behind the REST calls azure-ai-ml makes (``fake_transport``): the
    cluster's ``ComputeResource`` payload lives in the state file (``computes``: name ->
    payload; ``cluster``: the one whose nodes are the twin's), and its nodes are the twin's
    containers, listed by ``listNodes`` as AmlCompute lists them. A scale the service is asked
    for adds or removes containers (``Twin.scale``: new nodes come with new node ids, host keys
    and ports), so the inventory read after it finds what is really there. An identity change
    is recorded in the payload, as ARM answers it."""

    def __init__(self, state_path: str) -> None:
        self.state_path = Path(state_path)
        state = json.loads(self.state_path.read_text())
        super().__init__(workspace=state.get("workspace", WS), grow_on_scale=False)
        self.refresh()

    def refresh(self) -> None:
        """Read the state file and the twin again: another process (the module) may have scaled
        the twin since this one (the inventory plugin, read again by refresh_inventory) last looked."""
        state = json.loads(self.state_path.read_text())
        self.twin_state = Path(state["twin"])
        self.twin = Twin.attach(self.twin_state)
        self.cluster = state.get("cluster")
        self.clusters = {name: {"compute": compute, "nodes": self.twin.list_nodes() if name == self.cluster else []}
                         for name, compute in state.get("computes", {}).items()}

    def set_scale(self, name: str, min_nodes: int, max_nodes: int, idle: str | None = None) -> None:
        super().set_scale(name, min_nodes, max_nodes, idle)
        if name == self.cluster:
            if len(self.twin.nodes) != min_nodes:
                self.twin.scale(min_nodes)
                self.twin.save_state(self.twin_state)
            self.clusters[name]["nodes"] = self.twin.list_nodes()
        inner = self.clusters[name]["compute"]["properties"]["properties"]
        inner["currentNodeCount"] = inner["targetNodeCount"] = len(self.clusters[name]["nodes"])
        self._save()

    def put_identity(self, name: str, block: dict[str, Any] | None) -> None:
        super().put_identity(name, block)
        self._save()

    def patch_identity(self, name: str, block: dict[str, Any]) -> None:
        super().patch_identity(name, block)
        self._save()

    def _save(self) -> None:
        state = json.loads(self.state_path.read_text())
        state["computes"] = {name: c["compute"] for name, c in self.clusters.items()}
        self.state_path.write_text(json.dumps(state, indent=2))


def twin_ml_client(real: type) -> type:
    """In place of azure-ai-ml's ``MLClient`` (``real``): that client itself over
    :class:`TwinWorld` (``compute``: get, create or update, list nodes), with the twin's ``jobs``."""

    # The world of the newest client: the module's own requests to the resource manager (a PATCH
    # that scales the cluster) go to it too, so the wait that follows lists what the PATCH made.
    current: dict[str, TwinWorld] = {}

    class TwinMLClient(real):  # type: ignore[misc,valid-type]
        def __init__(self, credential: Any = None, subscription_id: str | None = None,
                     resource_group_name: str | None = None, workspace_name: str | None = None,
                     **kwargs: Any) -> None:
            world = current["world"] = TwinWorld(os.environ["TWIN_AZUREML_STATE"])
            kwargs["transport"] = fake_transport(world)
            super().__init__(fake_credential(world, credential), subscription_id or SUB, resource_group_name or RG,
                             workspace_name or world.workspace, **kwargs)
            self._twin_jobs = TwinJobs(os.environ["TWIN_AZUREML_STATE"])

        @property
        def jobs(self) -> TwinJobs:
            return self._twin_jobs

    install_arm(_SetAttr(), lambda: current.get("world") or TwinWorld(os.environ["TWIN_AZUREML_STATE"]))
    return TwinMLClient


class _SetAttr:
    """What install_v1 needs of pytest's monkeypatch, for a process that stays patched."""

    @staticmethod
    def setattr(target: Any, name: str, value: Any) -> None:
        setattr(target, name, value)


def install_azureml_core() -> None:
    """azureml-core's Workspace, AmlCompute and ComputeTarget become the fakes of
    ``tests/azureml_fakes.py`` over :class:`TwinWorld`: its own ScaleSettings, status and
    node-page readers on the twin's payload and nodes."""
    install_v1(_SetAttr(), TwinWorld(os.environ["TWIN_AZUREML_STATE"]))
