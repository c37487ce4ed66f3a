"""aml_job at the SDK boundary: the real azureml-core / azure-ai-ml job objects are built from
the spec and inspected as the service would receive them; only the calls that need Azure
(workspace, submit, stream, download) are fakes, put in where the SDKs are
(``azureml.core.Workspace`` / ``Experiment``, ``azure.ai.ml.MLClient``)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import ansible.module_utils
import pytest
from ansible_compat import patch_module_args
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[4]
if str(ROOT / "plugins" / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(ROOT / "plugins" / "module_utils"))

_spec = importlib.util.spec_from_file_location("aml_job", ROOT / "plugins/modules/aml_job.py")
aml_job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(aml_job)

from amlhpc.sdk.aml_job_v1 import v1_objects  # noqa: E402
from amlhpc.sdk.aml_job_v2 import v2_job  # noqa: E402
from amlhpc.azure.job_spec import JobRequest, build_spec  # noqa: E402
from azureml_fakes import RG, SUB, WS, World, install_v1, install_v2, write_certificate  # noqa: E402

SAS = "sv=2024-11-04&ss=b&srt=co&sp=rl&se=2026-12-01T00%3A00%3A00Z&sig=FAKE-test-signature%3D"
DOCKERFILE = ROOT / "workload" / "Dockerfile"


def request(backend: str, **kw) -> JobRequest:
    base = dict(backend=backend, name="cf-4x8", compute="gpu", node_count=4, process_count_per_node=8,
                source_dir=str(ROOT / "workload"), dockerfile=str(DOCKERFILE), account="mydata",
                container="cosmoflow", stage_dir="/data/cosmoflow", sas_secret_name="cosmoflow-sas",
                sas_keyvault_url="https://kv1.vault.azure.net/cosmoflow-sas",
                train_args={"epochs": 64, "batch_size": 4}, environment_variables={"NCCL_IB_DISABLE": "0"})
    return JobRequest(**{**base, **kw})


def v1_payload(src) -> dict:
    """What azureml-core sends to the service for a ScriptRunConfig."""
    from azureml._execution._commands import _serialize_run_config_to_dict
    from azureml.core.script_run_config import get_run_config_from_script_run
    return _serialize_run_config_to_dict(get_run_config_from_script_run(src))


def test_v1_script_run_config_as_the_service_sees_it():
    spec = build_spec(request("azureml_core"))
    src, env = v1_objects(spec, DOCKERFILE.read_text(), str(ROOT / "workload"))
    payload = v1_payload(src)
    assert payload["script"] == "train.py" and payload["target"] == "gpu"
    assert payload["nodeCount"] == 4 and payload["mpi"]["processCountPerNode"] == 8
    assert payload["docker"]["arguments"] == ["-v", "/mnt/scratch:/data"]
    assert payload["docker"]["useDocker"] is True and payload["docker"]["shmSize"] == "64g"
    args = payload["arguments"]
    assert args[args.index("--sas") + 1] == "aml-secret:cosmoflow-sas"
    assert args[args.index("--batch-size") + 1] == "4"
    assert payload["environmentVariables"] == {"NCCL_IB_DISABLE": "0"}
    environment = payload["environment"]
    assert environment["docker"]["baseDockerfile"] == DOCKERFILE.read_text()
    assert environment["docker"]["baseImage"] is None
    assert environment["python"]["userManagedDependencies"] is True
    assert SAS not in json.dumps(payload) and "TOPSECRET" not in json.dumps(payload)


def wire_properties(job) -> dict:
    """The job's properties as the service receives them (wire names, jobType, computeId): the REST
    models of azure-ai-ml 1.35 (arm_ml_service) give them from as_dict(), the msrest models of
    1.31 (requirements.txt's oldest) from serialize()."""
    rest = job._to_job()._to_rest_object()
    return (rest.serialize() if hasattr(rest, "serialize") else rest.as_dict())["properties"]


def test_v2_command_job_as_the_service_sees_it():
    spec = build_spec(request("azure_ai_ml"))
    job = v2_job(spec, str(ROOT / "workload"))
    rest = wire_properties(job)
    assert rest["jobType"] == "Command" and rest["computeId"] == "gpu"
    assert rest["distribution"] == {"distributionType": "Mpi", "processCountPerInstance": 8}
    assert rest["resources"]["instanceCount"] == 4
    assert rest["resources"]["dockerArgs"] == "-v /mnt/scratch:/data" and rest["resources"]["shmSize"] == "64g"
    assert rest["command"].startswith("python train.py --account mydata --container cosmoflow ")
    assert "--sas keyvault:https://kv1.vault.azure.net/cosmoflow-sas" in rest["command"]
    assert rest["environmentVariables"] == {"NCCL_IB_DISABLE": "0"}
    assert job.environment.build.dockerfile_path == "Dockerfile"
    assert Path(job.environment.build.path) == ROOT / "workload"
    assert "TOPSECRET" not in json.dumps(rest, default=str)


# --- the module, with Azure faked past the SDK objects ------------------------------------

def _azureml_core_run():
    from azureml.core import Run
    return Run


class FakeRun:
    """A submitted azureml-core run whose waiting is azureml-core's own (``Run.wait_for_completion``
    and the ``_stream_run_output`` it calls, on this run's details): it prints the run's link and
    summary and raises ``ActivityFailedException`` with the run's error for a failed run, as against
    Azure. A run is met in its final status (the SDK's polling loop, which fetches log URLs, is not run)."""

    count = 0
    _stream_run_output = _azureml_core_run()._stream_run_output

    def __init__(self, src, tags, status="Completed", error=None, logs=None, before=None):
        """``status``: how the run ends; ``before``: its status until it is waited for (default: ``status``)."""
        FakeRun.count += 1
        self.src, self.tags, self.id = src, tags, f"cosmoflow_1700000000_{FakeRun.count:04d}"
        self._run_id = self.id
        self.display_name, self.status, self.error, self.seen = None, status, error, before or status
        self.logs = logs if logs is not None else {
            "azureml-logs/70_driver_log_0.txt": "[cosmoflow] epoch 0: train loss 0.3\n"}

    def get_details(self):
        return {"runId": self.id, "status": self.status, "logFiles": {}, "warnings": [],
                **({"error": {"error": {"code": "UserError", "message": self.error}}} if self.error else {})}

    def get_all_logs(self, destination=None):
        """As azureml-core's: every log of the run written under ``destination`` by its name."""
        written = []
        for name, text in self.logs.items():
            path = Path(destination) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(str(path))
        return written

    def wait_for_completion(self, show_output=False, raise_on_error=True):
        self.seen = self.status
        return _azureml_core_run().wait_for_completion(self, show_output=show_output, raise_on_error=raise_on_error)

    def get_status(self):
        return self.seen

    def get_portal_url(self):
        return "https://ml.azure.com/runs/" + self.id

    def download_files(self, prefix=None, output_directory=None, **_):
        out = Path(output_directory) / prefix
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.jsonl").write_text(json.dumps({"kind": "step", "step": 1, "loss": 0.4}) + "\n")
        (out / "summary.json").write_text(json.dumps({"val_mae": 0.2}))


class FakeV1:
    """An experiment's runs; the workspace (and its Key Vault) is azureml_fakes' (``world``)."""

    def __init__(self, world=None):
        self.world = world or World()
        self.submitted, self.runs = [], []
        fake = self

        class Experiment:
            def __init__(self, ws, name):
                self.name = name

            def get_runs(self, tags=None, **_):
                # azureml-core filters on the given tags (a run may carry more), newest first.
                return [r for r in reversed(fake.runs) if all(r.tags.get(k) == v for k, v in (tags or {}).items())]

            def submit(self, src, tags=None):
                fake.submitted.append(src)
                run = FakeRun(src, tags)
                fake.runs.append(run)
                return run

        self.experiment = Experiment

    @property
    def secrets(self):
        return self.world.secrets


@pytest.fixture()
def v1(monkeypatch):
    import azureml.core
    fake = FakeV1()
    install_v1(monkeypatch, fake.world)
    monkeypatch.setattr(azureml.core, "Experiment", fake.experiment)
    return fake


def module_args(tmp_path, backend="azureml_core", **kw):
    base = {"backend": backend, "name": "cf-4x8", "subscription_id": SUB, "resource_group": RG,
            "workspace_name": WS, "auth_source": "cli", "compute": "gpu", "node_count": 4, "process_count_per_node": 8,
            "source_dir": str(ROOT / "workload"), "dockerfile": str(DOCKERFILE), "account": "mydata",
            "container": "cosmoflow", "stage_dir": "/data/cosmoflow", "sas": SAS,
            "sas_secret_name": "cosmoflow-sas", "sas_keyvault_url": "https://kv1.vault.azure.net/cosmoflow-sas",
            "train_args": {"epochs": 2}, "download_dir": str(tmp_path / "dl"),
            "packages": [str(ROOT / "plugins" / "module_utils" / "amlhpc")]}
    return {**base, **kw}


def run_module(capsys, args) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        aml_job.main()
    return json.loads(capsys.readouterr().out)


def test_v1_submit_stores_the_sas_as_a_secret_waits_and_downloads(v1, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run_module(capsys, module_args(tmp_path))
    assert out["changed"] is True and out["status"] == "Completed", out
    assert v1.secrets == {"cosmoflow-sas": SAS}
    (src,) = v1.submitted
    payload = v1_payload(src)
    assert payload["mpi"]["processCountPerNode"] == 8 and payload["nodeCount"] == 4
    assert "TOPSECRET" not in json.dumps(payload)
    # The snapshot holds the shared package next to the training code.
    assert (Path(src.source_directory) / "amlhpc" / "data" / "tfrecord.py").is_file()
    # ... under the module's working folder: <cwd>/.cache/aml_job/<name> unless work_dir says.
    assert Path(src.source_directory) == tmp_path / ".cache" / "aml_job" / "cf-4x8" / "src"
    assert out["metrics"]["steps"] == [{"step": 1, "loss": 0.4}] and out["metrics"]["summary"] == {"val_mae": 0.2}
    log = Path(out["log_path"]).read_text()
    assert f"RunId: {out['run_id']}" in log and "Execution Summary" in log and "TOPSECRET" not in log
    assert "TOPSECRET" not in json.dumps(out)
    again = run_module(capsys, module_args(tmp_path))
    assert again["changed"] is False and len(v1.submitted) == 1


def test_check_mode_submits_nothing(v1, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run_module(capsys, module_args(tmp_path, _ansible_check_mode=True))
    assert out["changed"] is True and v1.submitted == [] and v1.secrets == {}
    assert out["spec"]["distribution"]["node_count"] == 4
    assert out["run_id"] == "cf-4x8" and "would submit" in out["msg"]


def test_check_mode_after_a_completed_run_reports_no_change(v1, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    v1.runs.append(FakeRun(None, {"amlhpc_run": "cf-4x8"}, status="Completed"))
    out = run_module(capsys, module_args(tmp_path, _ansible_check_mode=True))
    assert out["changed"] is False and v1.submitted == [] and out["status"] == "Completed"


def test_check_mode_after_a_failed_run_reports_the_resubmission(v1, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    v1.runs.append(FakeRun(None, {"amlhpc_run": "cf-4x8"}, status="Failed"))
    out = run_module(capsys, module_args(tmp_path, _ansible_check_mode=True))
    assert out["changed"] is True and v1.submitted == [] and v1.secrets == {}
    assert out["run_id"] == "cf-4x8-r2" and "ended Failed" in out["msg"]


@pytest.mark.parametrize("status", ["Failed", "Canceled"])
def test_v1_failed_or_cancelled_run_is_resubmitted_under_a_new_name(v1, capsys, tmp_path, monkeypatch, status):
    monkeypatch.chdir(tmp_path)
    v1.runs.append(FakeRun(None, {"amlhpc_run": "cf-4x8"}, status=status))
    out = run_module(capsys, module_args(tmp_path))
    assert out["changed"] is True and out["status"] == "Completed", out
    (src,) = v1.submitted
    new = v1.runs[-1]
    assert new.tags == {"amlhpc_run": "cf-4x8", "amlhpc_attempt": "2"} and new.display_name == "cf-4x8-r2"
    assert out["run_id"] == new.id and out["previous_run"] == "cf-4x8"
    # The new attempt completed: a third run submits nothing.
    again = run_module(capsys, module_args(tmp_path))
    assert again["changed"] is False and len(v1.submitted) == 1


def test_failed_run_fails_the_task_with_the_log_tail(v1, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(FakeRun, "get_status", lambda self: "Failed")
    out = run_module(capsys, module_args(tmp_path))
    assert out["failed"] is True and "ended Failed" in out["msg"] and "epoch 0" in out["msg"]
    assert not (tmp_path / "dl" / ".amlhpc-job.json").exists(), "a failed run was recorded as done"


V1_LOGS = {"azureml-logs/70_driver_log_0.txt": "[cosmoflow] epoch 0: train loss 0.3\n",
           "azureml-logs/70_driver_log_2.txt": "[cosmoflow] epoch 0: train loss 0.3\nTraceback (most recent call "
                                               "last):\nRuntimeError: NCCL error: unhandled system error\n"}


def test_v1_a_failed_run_fails_the_task_naming_run_status_link_error_and_the_failing_nodes_log(
        v1, capsys, tmp_path, monkeypatch):
    """azureml-core's wait_for_completion raises ActivityFailedException for a failed run: the
    task fails in one message with the failing node's log (from the run's logs), no traceback."""
    monkeypatch.chdir(tmp_path)
    error = "User process 'Rank 2' exited with status code 1. Please check log file 'azureml-logs/70_driver_log_2.txt'"
    # Running when looked up (reused, waited for); it ends Failed while waited for.
    ended = FakeRun(None, {"amlhpc_run": "cf-4x8"}, status="Failed", error=error, logs=V1_LOGS, before="Running")
    v1.runs.append(ended)
    out = run_module(capsys, module_args(tmp_path))
    assert out["failed"] is True and out["status"] == "Failed" and v1.submitted == [], out
    assert out["msg"].startswith(f"run {ended.id} ended Failed (https://ml.azure.com/runs/{ended.id}): "
                                 "User process 'Rank 2' exited with status code 1"), out["msg"]
    assert "submits a new attempt (cf-4x8-r2)" in out["msg"]
    assert "Last lines of azureml-logs/70_driver_log_2.txt:" in out["msg"]
    assert out["msg"].endswith("RuntimeError: NCCL error: unhandled system error\n")


def test_v1_a_run_cancelled_while_waited_for_fails_the_task(v1, capsys, tmp_path, monkeypatch):
    """azureml-core's wait returns for a cancelled run (it raises for Failed only): the task fails."""
    monkeypatch.chdir(tmp_path)
    v1.runs.append(FakeRun(None, {"amlhpc_run": "cf-4x8"}, status="Canceled", logs=V1_LOGS, before="Queued"))
    out = run_module(capsys, module_args(tmp_path))
    assert out["failed"] is True and out["status"] == "Canceled", out
    assert "ended Canceled" in out["msg"] and "Last lines of azureml-logs/70_driver_log_2.txt" in out["msg"]


def test_sas_in_train_args_is_refused(v1, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run_module(capsys, module_args(tmp_path, train_args={"token": "sp=r&sig=abc"}))
    assert out["failed"] is True and "looks like a SAS token" in out["msg"] and v1.submitted == []


class FakeJobs:
    def __init__(self, tmp_path):
        self.created, self.tmp = [], tmp_path
        self.existing = {}

    def get(self, name):
        if name not in self.existing:
            from azure.core.exceptions import ResourceNotFoundError
            raise ResourceNotFoundError(f"job {name} not found")
        return self.existing[name]

    def create_or_update(self, job, experiment_name=None):
        self.created.append((job, experiment_name))
        return self.add(job.name, "Completed")

    def add(self, name, status):
        job_obj = type("Job", (), {"name": name, "status": status, "studio_url": "https://ml.azure.com/runs/" + name})()
        self.existing[name] = job_obj
        return job_obj

    def stream(self, name):
        print("RunId:", name, "\n[cosmoflow] epoch 0: train loss 0.3")

    def download(self, name, download_path=".", all=False):
        out = Path(download_path) / "artifacts" / "outputs"
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.jsonl").write_text(json.dumps({"kind": "step", "step": 1, "loss": 0.5}) + "\n")


def fake_ml_client(monkeypatch, jobs):
    """``azure.ai.ml.MLClient`` with only ``jobs``, recording how it was built."""
    import azure.ai.ml
    built = []

    class MLClient:
        def __init__(self, credential, subscription_id=None, resource_group_name=None, workspace_name=None, **kw):
            built.append((type(credential).__name__, subscription_id, resource_group_name, workspace_name))
            self.jobs = jobs

    monkeypatch.setattr(azure.ai.ml, "MLClient", MLClient)
    return built


def test_v2_submit_builds_the_command_job_streams_and_downloads(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jobs = FakeJobs(tmp_path)
    built = fake_ml_client(monkeypatch, jobs)
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert out["changed"] is True and out["status"] == "Completed", out
    ((job, experiment),) = jobs.created
    rest = wire_properties(job)
    assert experiment == "cosmoflow" and rest["distribution"]["processCountPerInstance"] == 8
    assert rest["resources"]["instanceCount"] == 4 and rest["resources"]["dockerArgs"] == "-v /mnt/scratch:/data"
    assert "TOPSECRET" not in json.dumps(rest, default=str) + json.dumps(out)
    # The image is built from a folder holding the Dockerfile alone.
    assert sorted(p.name for p in Path(job.environment.build.path).iterdir()) == ["Dockerfile"]
    assert out["metrics"]["steps"] == [{"step": 1, "loss": 0.5}]
    assert built == [("AzureCliCredential", SUB, RG, WS)]
    again = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert again["changed"] is False and len(jobs.created) == 1


def test_without_a_backend_the_job_goes_through_azure_ai_ml(v1, capsys, tmp_path, monkeypatch):
    """azureml-core (SDK v1) is out of support since 2026-06-30: a task that names no backend
    submits an azure-ai-ml command job, and azureml-core's Experiment sees nothing."""
    monkeypatch.chdir(tmp_path)
    jobs = FakeJobs(tmp_path)
    built = fake_ml_client(monkeypatch, jobs)
    args = module_args(tmp_path)
    del args["backend"]
    out = run_module(capsys, args)
    assert out["changed"] is True and out["spec"]["backend"] == "azure_ai_ml", out
    assert len(built) == 1 and [job.name for job, _unused in jobs.created] == ["cf-4x8"]
    assert v1.submitted == [] and v1.secrets == {}


def test_v2_failed_job_is_resubmitted_under_a_new_name(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jobs = FakeJobs(tmp_path)
    jobs.add("cf-4x8", "Failed")
    fake_ml_client(monkeypatch, jobs)
    check = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml", _ansible_check_mode=True))
    assert check["changed"] is True and check["run_id"] == "cf-4x8-r2" and jobs.created == []
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    ((job, _unused),) = jobs.created
    assert job.name == "cf-4x8-r2" and out["run_id"] == "cf-4x8-r2" and out["changed"] is True
    again = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml", _ansible_check_mode=True))
    assert again["changed"] is False and again["run_id"] == "cf-4x8-r2"


def test_local_check_mode_after_a_finished_run_reports_no_change(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / "outputs" / "smoke"
    out_dir.mkdir(parents=True)
    (out_dir / "summary.json").write_text("{}")
    args = {"backend": "local", "name": "smoke", "source_dir": str(ROOT / "workload"), "python": "python",
            "data_dir": str(tmp_path), "output_dir": str(out_dir), "_ansible_check_mode": True}
    assert run_module(capsys, args)["changed"] is False
    (out_dir / "summary.json").unlink()
    assert run_module(capsys, args)["changed"] is True


NCCL = {"environment_variables": {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_TOPO_FILE": "/opt/microsoft/ndv4/topo.xml"},
        "mounts": ["/etc/nccl.conf:/etc/nccl.conf", "/etc/amlhpc/nccl.env:/etc/amlhpc/nccl.env",
                   "/opt/microsoft/ndv4/topo.xml:/opt/microsoft/ndv4/topo.xml"]}


def test_nccl_settings_and_data_scope_reach_both_services():
    """The node's NCCL files reach the job container read-only and its variables its
    environment; the data scope reaches the script, on either SDK as the service sees it."""
    mounts = ["-v", "/mnt/scratch:/data", "-v", "/etc/nccl.conf:/etc/nccl.conf:ro",
              "-v", "/etc/amlhpc/nccl.env:/etc/amlhpc/nccl.env:ro",
              "-v", "/opt/microsoft/ndv4/topo.xml:/opt/microsoft/ndv4/topo.xml:ro"]
    kw = dict(environment_variables=NCCL["environment_variables"], mounts=NCCL["mounts"], data_scope="node")
    src, _unused = v1_objects(build_spec(request("azureml_core", **kw)), DOCKERFILE.read_text(),
                              str(ROOT / "workload"))
    payload = v1_payload(src)
    assert payload["docker"]["arguments"] == mounts
    assert payload["environmentVariables"] == NCCL["environment_variables"]
    assert payload["arguments"][payload["arguments"].index("--data-scope") + 1] == "node"
    rest = v2_job(build_spec(request("azure_ai_ml", **kw)), str(ROOT / "workload"))
    rest = wire_properties(rest)
    assert rest["resources"]["dockerArgs"] == " ".join(mounts)
    assert rest["environmentVariables"] == NCCL["environment_variables"]
    assert "--data-scope node" in rest["command"]


# --- authentication: the same plan as the inventory plugin and aml_compute_cluster ---------

AUTH_ENV = ("AZURE_CLIENT_ID", "AZURE_SECRET", "AZURE_CLIENT_SECRET", "AZURE_TENANT", "AZURE_TENANT_ID",
            "AZURE_SUBSCRIPTION_ID", "IDENTITY_ENDPOINT", "MSI_ENDPOINT", "AZURE_X509_CERTIFICATE_PATH",
            "AZURE_CLIENT_CERTIFICATE_PATH", "AZURE_CLIENT_CERTIFICATE_PASSWORD", "AZURE_FEDERATED_TOKEN_FILE",
            "AZURE_PROFILE", "AZURE_CLOUD_ENVIRONMENT", "AZURE_AUTHORITY_HOST")

# (auth options of the task, environment of the controller)
AUTH_CASES = {
    "env, azure-identity's variable names": (
        {"auth_source": "env"}, {"AZURE_CLIENT_ID": "app", "AZURE_CLIENT_SECRET": "s3", "AZURE_TENANT_ID": "tn"}),
    "env ignores the task's client_id": (
        {"auth_source": "env", "client_id": "other"}, {"AZURE_CLIENT_ID": "app", "AZURE_SECRET": "s3",
                                                       "AZURE_TENANT": "tn"}),
    "auto, half options half environment": (
        {"auth_source": "auto", "client_id": "app"}, {"AZURE_SECRET": "s3", "AZURE_TENANT": "tn"}),
    "auto, a principal in the environment": (
        {"auth_source": "auto"}, {"AZURE_CLIENT_ID": "app", "AZURE_SECRET": "s3", "AZURE_TENANT": "tn"}),
    "auto, a principal in the options": (
        {"auth_source": "auto", "client_id": "app", "secret": "s3", "tenant": "tn"}, {}),
    "auto on a managed identity host": (
        {"auth_source": "auto"}, {"IDENTITY_ENDPOINT": "http://169.254.169.254/msi"}),
    "msi, the client id from the environment": (
        {"auth_source": "msi"}, {"AZURE_CLIENT_ID": "uami"}),
    "service_principal, the tenant from azure-identity's variable": (
        {"auth_source": "service_principal", "client_id": "app", "secret": "s3"}, {"AZURE_TENANT_ID": "tn"}),
    "cli": ({"auth_source": "cli"}, {}),
    "env, a workload identity (GitHub Actions, AKS)": (
        {"auth_source": "env"}, {"AZURE_CLIENT_ID": "app", "AZURE_TENANT_ID": "tn",
                                 "AZURE_FEDERATED_TOKEN_FILE": "/var/run/secrets/azure/tokens/azure-identity-token"}),
    "auto, a workload identity in the environment": (
        {"auth_source": "auto"}, {"AZURE_CLIENT_ID": "app", "AZURE_TENANT_ID": "tn",
                                  "AZURE_FEDERATED_TOKEN_FILE": "/var/run/secrets/azure/tokens/azure-identity-token"}),
    "service_principal with a certificate": (
        {"auth_source": "service_principal", "client_id": "app", "tenant": "tn",
         "x509_certificate_path": "{home}/sp.pem"}, {}),
    "credential_file, a profile": ({"auth_source": "credential_file", "profile": "hpc"}, {}),
    "auto, a sovereign cloud": ({"auth_source": "auto", "cloud_environment": "AzureChinaCloud"}, {}),
}


def _v1_credential(cred) -> tuple:
    """The v1 fakes record their keyword arguments: the credential as built (for a token source,
    the azure-identity credential behind it)."""
    built = dict(vars(cred))
    tokens = built.pop("_get_token_for_audience", None)
    if tokens is not None:
        built["tokens"] = _v2_credential(tokens.credential)
    return type(cred).__name__, sorted(built.items())


def _v2_credential(cred) -> tuple:
    inner = getattr(cred, "_credential", None)
    return (type(cred).__name__, getattr(cred, "_tenant_id", None), getattr(cred, "_client_id", None),
            getattr(cred, "_client_credential", None), type(inner).__name__ if inner else None)


@pytest.fixture()
def auth_env(monkeypatch, tmp_path):
    """No Azure variables, and a home whose ~/.azure/credentials has a profile "hpc"."""
    for name in AUTH_ENV:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    (home / ".azure").mkdir(parents=True)
    (home / ".azure" / "credentials").write_text(
        f"[hpc]\nsubscription_id = {SUB}\nclient_id = app\nsecret = s3\ntenant = tn\n")
    write_certificate(home / "sp.pem")
    monkeypatch.setenv("HOME", str(home))

    def put(env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
    return put


@pytest.mark.parametrize("case", list(AUTH_CASES))
def test_v1_workspace_credential_is_the_shared_auth_plans(case, capsys, tmp_path, monkeypatch, auth_env):
    """aml_job builds the azureml-core credential exactly as aml_compute_cluster and the
    inventory plugin do (aml_sdk's plan) for every auth option combination."""
    from amlhpc.sdk import aml_sdk
    from amlhpc.azure.aml_nodes import resolve_auth, subscription_from
    import azureml.core

    options, env = AUTH_CASES[case]
    options = {k: v.replace("{home}", os.environ["HOME"]) for k, v in options.items()}
    auth_env(env)
    world = World()
    install_v1(monkeypatch, world)
    monkeypatch.setattr(azureml.core, "Experiment", FakeV1(world).experiment)
    params = {"subscription_id": SUB, "resource_group": RG, "workspace_name": WS, **options}
    aml_sdk.connect("azureml-core", subscription_from(params, os.environ), RG, WS,
                    resolve_auth(params["auth_source"], params, os.environ)).workspace()
    monkeypatch.chdir(tmp_path)
    out = run_module(capsys, module_args(tmp_path, _ansible_check_mode=True, **params))
    assert not out.get("failed"), out
    expected, built = world.credentials
    assert _v1_credential(built) == _v1_credential(expected)


@pytest.mark.parametrize("case", list(AUTH_CASES))
def test_v2_client_credential_is_the_shared_auth_plans(case, capsys, tmp_path, monkeypatch, auth_env):
    from amlhpc.sdk import aml_sdk
    from amlhpc.azure.aml_nodes import resolve_auth

    options, env = AUTH_CASES[case]
    options = {k: v.replace("{home}", os.environ["HOME"]) for k, v in options.items()}
    auth_env(env)
    world = World()
    install_v2(monkeypatch, world)
    params = {"subscription_id": SUB, "resource_group": RG, "workspace_name": WS, **options}
    aml_sdk.connect("azure-ai-ml", SUB, RG, WS, resolve_auth(params["auth_source"], params, os.environ)).client()
    monkeypatch.chdir(tmp_path)
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml", _ansible_check_mode=True, **params))
    assert not out.get("failed"), out
    assert out["run_id"] == "cf-4x8" and "would submit" in out["msg"]
    expected, built = world.credentials
    assert _v2_credential(built) == _v2_credential(expected)


def test_service_principal_without_its_secret_is_refused_in_the_shared_words(capsys, tmp_path, auth_env,
                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run_module(capsys, module_args(tmp_path, _ansible_check_mode=True, auth_source="service_principal",
                                         client_id="app", tenant="tn"))
    assert out["failed"] is True
    assert out["msg"] == ("auth_source service_principal needs secret (or AZURE_SECRET) or x509_certificate_path "
                          "(or AZURE_X509_CERTIFICATE_PATH), which is not set")


@pytest.mark.parametrize("backend", ["azureml_core", "azure_ai_ml"])
def test_a_refused_login_is_one_sentence_naming_the_auth_source(backend, capsys, tmp_path, auth_env,
                                                                monkeypatch):
    import azureml.core
    world = World()
    world.auth_error = "AADSTS700016: Application with identifier 'app' was not found in the directory."
    install_v1(monkeypatch, world)
    install_v2(monkeypatch, world)
    monkeypatch.setattr(azureml.core, "Experiment", FakeV1(world).experiment)
    monkeypatch.chdir(tmp_path)
    out = run_module(capsys, module_args(tmp_path, backend=backend, _ansible_check_mode=True, auth_source="auto"))
    assert out["failed"] is True
    assert out["msg"].startswith("Azure authentication failed with auth_source auto (azure-identity's "
                                 "DefaultAzureCredential: environment, workload identity, managed identity, Azure "
                                 "CLI, ...): AADSTS700016"), out["msg"]
    assert "Traceback" not in out["msg"]


def test_a_missing_sdk_or_workspace_option_is_named_for_the_backend(capsys, tmp_path, monkeypatch, auth_env):
    import sys
    monkeypatch.chdir(tmp_path)
    out = run_module(capsys, module_args(tmp_path, _ansible_check_mode=True, resource_group=None))
    assert out["failed"] is True
    assert out["msg"] == ("backend azureml_core needs resource_group (subscription_id may also come from "
                          "AZURE_SUBSCRIPTION_ID)")
    monkeypatch.setitem(sys.modules, "azure.ai.ml", None)  # not importable
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml", _ansible_check_mode=True))
    assert out["failed"] is True
    assert out["msg"].startswith("backend azure_ai_ml needs the Python package azure-ai-ml, which ")
    assert out["msg"].endswith("(or make setup), or use backend: local")


def test_the_snapshot_and_build_context_go_to_work_dir(capsys, tmp_path, monkeypatch):
    """The play's working directory is not the project's (Ansible runs a local module in the
    playbook's folder): the role says where the AzureML backends may write."""
    monkeypatch.chdir(tmp_path)
    jobs = FakeJobs(tmp_path)
    fake_ml_client(monkeypatch, jobs)
    work = tmp_path / "project" / ".cache" / "aml_job" / "cf-4x8"
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml", work_dir=str(work)))
    assert out["changed"] is True, out
    ((job, _unused),) = jobs.created
    assert Path(job.code) == work / "src" and Path(job.environment.build.path) == work / "docker"
    assert not (tmp_path / ".cache").exists()


def test_v2_rerun_after_a_completed_download_asks_the_workspace_nothing(capsys, tmp_path, monkeypatch):
    """A run this controller saw complete and downloaded is answered from the record in the
    download folder: no client, no stream, no second download (check mode too)."""
    monkeypatch.chdir(tmp_path)
    jobs = FakeJobs(tmp_path)
    built = fake_ml_client(monkeypatch, jobs)
    first = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert first["changed"] is True and len(built) == 1, first
    record = tmp_path / "dl" / ".amlhpc-job.json"
    assert json.loads(record.read_text())["run_id"] == "cf-4x8" and "sig=" not in record.read_text()
    for check_mode in (True, False):
        again = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml", _ansible_check_mode=check_mode))
        assert again["changed"] is False and again["run_id"] == "cf-4x8" and again["status"] == "Completed", again
        assert again["portal_url"] == "https://ml.azure.com/runs/cf-4x8" and str(record) in again["msg"]
        assert again["metrics"]["steps"] == [{"step": 1, "loss": 0.5}]
    assert len(built) == 1, "the rerun asked the workspace"
    # force submits a new attempt, through the workspace, and records it.
    forced = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml", force=True))
    assert forced["changed"] is True and forced["run_id"] == "cf-4x8-r2" and len(built) == 2
    assert json.loads(record.read_text())["run_id"] == "cf-4x8-r2"
    # Another workspace's job of the same name is not this record's.
    other = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml", workspace_name="ws-other"))
    assert other["changed"] is False and len(built) == 3
    # Outputs gone from the controller: the workspace is asked and the run downloaded again.
    import shutil
    shutil.rmtree(tmp_path / "dl" / "artifacts")
    again = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert again["changed"] is False and len(built) == 4 and again["metrics"]["steps"] == [{"step": 1, "loss": 0.5}]


def test_v1_rerun_after_a_completed_download_asks_the_workspace_nothing(v1, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = run_module(capsys, module_args(tmp_path))
    assert first["changed"] is True and first["status"] == "Completed", first

    def no_workspace(_p):
        raise AssertionError("the rerun asked the workspace")

    monkeypatch.setattr(aml_job, "workspace_client", no_workspace)
    again = run_module(capsys, module_args(tmp_path))
    assert again["changed"] is False and again["run_id"] == first["run_id"], again
    assert again["metrics"] == first["metrics"] and len(v1.submitted) == 1


@pytest.mark.parametrize("where", ["train_args", "environment_variables"])
def test_a_sas_in_plain_arguments_is_refused_and_not_shown_back(capsys, tmp_path, where):
    """A SAS token put in train_args or environment_variables (not sas, which is no_log) is refused,
    and the refusal does not show it either: the module's result carries its invocation, which
    ansible-core 2.18 prints at -vvv (tests/unit/test_no_log_failures.py runs the play)."""
    secret = "sp=r&sig=placeholder-for-the-test"
    out = run_module(capsys, module_args(tmp_path, sas=None, **{where: {"token": secret}}))
    assert out["failed"] is True
    assert out["msg"].startswith("token looks like a SAS token; pass the token as sas (no_log)"), out
    assert "placeholder-for-the-test" not in json.dumps(out)


# --- job outcomes: every status the service ends a run in, as the SDKs report it ------------
#
# azure-ai-ml: the real MLClient over azureml_fakes' HTTP transport, so the SDK's own
# jobs.stream reads run history and raises its JobException for a failed job.

RANK3_FAILED = ("Execution failed. User process 'Rank 3' exited with status code 1. Please check log file "
                "'user_logs/std_log_process_3.txt' for error details.")
NODE_LOGS = {
    "user_logs/std_log_process_0.txt": "[cosmoflow] epoch 0: train loss 0.3\n[cosmoflow] epoch 1: train loss 0.2\n",
    "user_logs/std_log_process_3.txt": "[cosmoflow] epoch 0: train loss 0.3\nTraceback (most recent call last):\n"
                                       "  File \"train.py\", line 9, in <module>\n"
                                       "RuntimeError: CUDA error: an illegal memory access was encountered\n",
    "outputs/metrics.jsonl": json.dumps({"kind": "step", "step": 1, "loss": 0.5}) + "\n",
}


@pytest.fixture()
def v2_world(monkeypatch, tmp_path, auth_env):
    world = World()
    install_v2(monkeypatch, world)
    monkeypatch.chdir(tmp_path)
    return world


def test_v2_a_failed_job_fails_the_task_naming_job_status_link_error_and_the_failing_nodes_log(
        v2_world, capsys, tmp_path):
    """azure-ai-ml's stream raises JobException when the job ends Failed: the task fails in one
    message (job, status, studio link, the service's error) with the last lines of the log of the
    node that failed (rank 3 here, not the rank 0 log the SDK streams), not a traceback."""
    v2_world.add_job("cf-4x8", ["Running", "Failed"], error=RANK3_FAILED, artifacts=NODE_LOGS)
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert out["failed"] is True and out["status"] == "Failed", out
    msg = out["msg"]
    assert msg.startswith("run cf-4x8 ended Failed (https://ml.azure.com/runs/cf-4x8?wsid="), msg
    assert "User process 'Rank 3' exited with status code 1" in msg
    assert "running the task again submits a new attempt (cf-4x8-r2)" in msg
    assert "Last lines of user_logs/std_log_process_3.txt" in msg and msg.endswith(
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"), msg
    assert out["failed_log"] == str(tmp_path / "dl" / "artifacts" / "user_logs" / "std_log_process_3.txt")
    assert v2_world.calls["v2 GET run details"] >= 1, "the SDK's own stream did not run"
    assert not (tmp_path / "dl" / ".amlhpc-job.json").exists()


def test_v2_a_completed_job_streams_and_downloads_through_the_sdk(v2_world, capsys, tmp_path):
    v2_world.add_job("cf-4x8", ["Running", "Completed"], artifacts=NODE_LOGS)
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert not out.get("failed") and out["status"] == "Completed" and out["changed"] is False, out
    assert out["portal_url"].startswith("https://ml.azure.com/runs/cf-4x8?wsid=")
    assert out["metrics"]["steps"] == [{"step": 1, "loss": 0.5}]
    assert "Execution Summary" in Path(out["log_path"]).read_text()  # what the SDK's stream wrote
    assert json.loads((tmp_path / "dl" / ".amlhpc-job.json").read_text())["status"] == "Completed"


# status -> (what the message says besides the job, its status and its link; whose log it shows)
ENDINGS = {
    "Canceled": ("ended Canceled", "user_logs/std_log_process_3.txt"),
    "NotResponding": ("AzureML has had no heartbeat from it", "user_logs/std_log_process_3.txt"),
    "Paused": ("resume it in the studio", "user_logs/std_log_process_3.txt"),
    # Not an ending the SDK downloads from (its TERMINAL_STATUSES): the streamed log is shown.
    "Unknown": ("which aml_job does not know", "the streamed log"),
}


@pytest.mark.parametrize("status", list(ENDINGS))
def test_v2_every_other_ending_fails_the_task_saying_what_to_do(status, v2_world, capsys, tmp_path):
    """The stream returns without raising for these (the SDK raises only for Failed); the task
    still fails, naming the status, the link, the way on and the log with the traceback."""
    v2_world.add_job("cf-4x8", ["Running", status], artifacts=NODE_LOGS)
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert out["failed"] is True and out["status"] == status, out
    assert out["msg"].startswith(f"run cf-4x8 {'ended' if status == 'Canceled' else 'is'} {status} "
                                 "(https://ml.azure.com/runs/cf-4x8?wsid="), out["msg"]
    said, log = ENDINGS[status]
    assert said in out["msg"] and f"Last lines of {log}" in out["msg"], out["msg"]


def test_v2_a_job_left_cancelling_is_waited_for_until_it_has_ended(v2_world, capsys, tmp_path, monkeypatch):
    """The SDK's stream returns while the job is still CancelRequested (post-processing, not an
    ending: its download refuses the job); the module asks again until it has ended."""
    from amlhpc.sdk import aml_job_v2
    v2_world.add_job("cf-4x8", ["Running", "CancelRequested"], artifacts=NODE_LOGS)
    slept = []

    def ends_later(seconds):
        slept.append(seconds)
        v2_world.jobs["cf-4x8"]["statuses"].append("Canceled")
        v2_world.job_status("cf-4x8", advance=True)

    monkeypatch.setattr(aml_job_v2.time, "sleep", ends_later)
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert out["failed"] is True and out["status"] == "Canceled" and len(slept) == 1, out
    assert "Last lines of user_logs/std_log_process_3.txt" in out["msg"], out["msg"]


def test_the_twins_failed_job_is_reported_as_the_sdks(tmp_path):
    """The twin's AzureML (tests/twin/azureml.py) answers a failed run as azure-ai-ml does: its
    stream raises JobException with the run's error, its download brings each node's log; the
    backend's wait reads them as it reads the SDK's."""
    from amlhpc.sdk.aml_job_v2 import wait_v2
    from amlhpc.azure.job_runs import failing_log, node_logs
    from twin.azureml import TwinJobs

    logs = tmp_path / "run" / "user_logs"
    logs.mkdir(parents=True)
    (logs / "std_log_node_0.txt").write_text("[cosmoflow] epoch 0\n")
    (logs / "std_log_node_1.txt").write_text("Traceback (most recent call last):\nRuntimeError: killed\n")
    (tmp_path / "run" / "logs.txt").write_text("===== node 0 (rc 0)\n")
    error = {"error": {"code": "UserError", "message": "Execution failed. User process on node 1 exited with status "
                                                       "code 137. Please check log file 'user_logs/std_log_node_1.txt'"}}
    state = tmp_path / "azureml.json"
    state.write_text(json.dumps({"jobs": {"cf": {"status": "Failed", "logs": str(tmp_path / "run" / "logs.txt"),
                                                 "outputs": str(tmp_path / "run" / "outputs"),
                                                 "user_logs": str(logs), "error": error}}}))
    jobs = TwinJobs(str(state))
    job, said = wait_v2(jobs, "cf")
    assert job.status == "Failed" and said.startswith("Execution failed. User process on node 1 exited"), said
    jobs.download("cf", download_path=str(tmp_path / "dl"), all=True)
    found = node_logs(str(tmp_path / "dl" / "artifacts"))
    assert failing_log({n: Path(p).read_text() for n, p in found.items()}, said) == "user_logs/std_log_node_1.txt"


# ---------------------------------------------------------------------------------------
# Issue 51, item 1: every way a watch can end is a sentence (azure-ai-ml over the fake transport).

LINK = "https://ml.azure.com/runs/cf-4x8?wsid="


def test_v2_a_failed_run_without_an_error_object_names_what_is_known(v2_world, capsys, tmp_path):
    v2_world.add_job("cf-4x8", ["Running", "Failed"], artifacts=NODE_LOGS)
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert out["failed"] is True and out["status"] == "Failed", out
    assert "Exception :" not in out["msg"], out["msg"]
    assert out["msg"].startswith(f"run cf-4x8 ended Failed ({LINK}"), out["msg"]
    assert "AzureML recorded no error for it" in out["msg"] and "Last lines of" in out["msg"], out["msg"]


# route -> (its scripted answers, what the message says)
WATCH_ERRORS = {
    "403 on the run's details": ("details", [403], "refused this machine (403)"),
    "429 past the SDK's retries": ("details", [429] * 8, "throttling"),
    "503 past the SDK's retries": ("details", [503] * 8, "answered 503"),
    "a reset connection": ("details", ["reset"] * 8, "connection to Azure failed"),
    "a timeout": ("details", ["timeout"] * 8, "connection to Azure failed"),
    "409": ("details", [409], "changed at the same time"),
}


@pytest.mark.parametrize("case", list(WATCH_ERRORS))
def test_v2_an_error_while_watching_names_the_run_its_status_its_link_and_that_a_rerun_resumes(
        case, v2_world, capsys, tmp_path):
    route, answers, says = WATCH_ERRORS[case]
    v2_world.add_job("cf-4x8", ["Running", "Completed"], artifacts=NODE_LOGS)
    v2_world.faults[route] = list(answers)
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert out["failed"] is True, out
    msg = out["msg"]
    assert msg.startswith(f"run cf-4x8 ({LINK}"), msg
    assert "its last known status is Running, so it is still going in AzureML" in msg, msg
    assert says in msg and msg.endswith("running the task again resumes watching this same run "
                                        "(nothing new is submitted)."), msg
    # The rerun: the same job is watched again (nothing submitted), and now it ends.
    v2_world.faults.clear()
    again = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert not again.get("failed") and again["status"] == "Completed" and again["changed"] is False, again
    assert again["run_id"] == "cf-4x8"


def test_v2_a_job_that_vanished_while_watched_says_a_rerun_submits_it_anew(v2_world, capsys, tmp_path):
    v2_world.add_job("cf-4x8", ["Running", "Completed"], artifacts=NODE_LOGS)
    v2_world.faults["job"] = [None, None, 404]  # found (cf-4x8, and no cf-4x8-r2), then gone
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert out["failed"] is True, out
    assert out["msg"].startswith(f"run cf-4x8 ({LINK}") and "is no longer in the workspace" in out["msg"], out
    assert out["msg"].endswith("running the task again submits it anew."), out["msg"]


def test_v2_a_completed_run_whose_download_fails_says_a_rerun_downloads_it(v2_world, capsys, tmp_path):
    v2_world.add_job("cf-4x8", ["Running", "Completed"], artifacts=NODE_LOGS)
    v2_world.faults["storage"] = [403]
    out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert out["failed"] is True, out
    assert out["msg"].startswith(f"run cf-4x8 ended Completed ({LINK}"), out["msg"]
    msg = out["msg"]
    assert "could not be downloaded to" in msg and "not authorized" in msg and "(403)" in msg, msg
    assert out["msg"].endswith("running the task again downloads them (nothing is submitted again)."), out["msg"]
    assert not (tmp_path / "dl" / ".amlhpc-job.json").exists()
    again = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    assert not again.get("failed") and again["status"] == "Completed", again


ANSWERS = st.sampled_from([None, None, 403, 404, 409, 429, 500, 502, 503, 504, "reset", "timeout"])


@settings(derandomize=True, max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(job=st.lists(ANSWERS, max_size=6), details=st.lists(ANSWERS, max_size=6),
       storage=st.lists(st.sampled_from([None, 403, "reset"]), max_size=1),
       ending=st.sampled_from(["Completed", "Failed", "Canceled"]), error=st.sampled_from([None, RANK3_FAILED]))
@example(job=[], details=[429] * 8, storage=[], ending="Completed", error=None)
def test_v2_any_sequence_of_service_answers_ends_in_one_sentence(monkeypatch, tmp_path_factory, capsys, auth_env,
                                                                 job, details, storage, ending, error):
    """Whatever the service answers while the task looks the job up, watches and downloads it
    (errors, retries, resets, timeouts), the task ends as the job did or fails in one sentence
    that names the job and says what a rerun does; no exception escapes."""
    tmp_path = tmp_path_factory.mktemp("watch")
    with monkeypatch.context() as m:
        world = World()
        install_v2(m, world)
        m.chdir(tmp_path)
        world.add_job("cf-4x8", ["Running", ending], error=error, artifacts=NODE_LOGS)
        world.faults.update(job=[None, *job], details=list(details), storage=list(storage))
        out = run_module(capsys, module_args(tmp_path, backend="azure_ai_ml"))
    if not out.get("failed"):
        assert out["status"] == "Completed" and out["run_id"] == "cf-4x8", out
        return
    msg = out["msg"]
    assert "cf-4x8" in msg and "Exception :" not in msg and "Traceback" not in msg.split("Last lines of")[0], msg
    assert "running the task again" in msg, msg
    assert LINK in msg or "nothing was submitted" in msg, msg


def test_v1_a_connection_reset_while_watching_names_the_run_and_a_rerun_resumes(v1, capsys, tmp_path, monkeypatch):
    """azureml-core's HTTP session raises requests' ConnectionError on a reset: the task fails
    naming the run, its last known status and link; the rerun watches the same run."""
    import requests
    monkeypatch.chdir(tmp_path)
    resets = []

    def reset(self):
        resets.append(self.id)
        raise requests.exceptions.ConnectionError("('Connection aborted.', ConnectionResetError(104, "
                                                  "'Connection reset by peer'))")

    monkeypatch.setattr(FakeRun, "get_details", reset)
    out = run_module(capsys, module_args(tmp_path))
    assert out["failed"] is True and resets, out
    run_id = resets[0]
    assert out["msg"].startswith(f"run {run_id} (https://ml.azure.com/runs/{run_id}) could not be watched "
                                 "(ConnectionError: "), out["msg"]
    assert "connection to Azure failed" in out["msg"], out["msg"]
    assert out["msg"].endswith("running the task again resumes watching this same run (nothing new is submitted)."), out
    monkeypatch.undo()
    install_v1(monkeypatch, v1.world)
    import azureml.core
    monkeypatch.setattr(azureml.core, "Experiment", v1.experiment)
    monkeypatch.chdir(tmp_path)
    again = run_module(capsys, module_args(tmp_path))
    assert not again.get("failed") and again["run_id"] == run_id and again["changed"] is False, again
    assert len(v1.submitted) == 1


# A SAS the module was never given (the checkpoint store's, which the job reads from a file on the
# node) in the training's last lines: the task's failure shows the lines, never the signature.
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.binary(min_size=32, max_size=32),
       line=st.sampled_from([
           "[cosmoflow] stopped: the checkpoint store refused the upload of {url} (403): give a SAS with write",
           "urllib.error.HTTPError: HTTP Error 403: Forbidden for url: {url}",
           "  File \"ckpt_store.py\", line 9, in put\n    raise OSError(\"PUT {url} failed\")",
           "OSError: PUT {quoted} failed",
       ]))
def test_a_sas_in_the_training_s_last_lines_never_reaches_the_failure(capsys, tmp_path, monkeypatch, key, line):
    import base64
    import tempfile
    from urllib.parse import quote
    sig = base64.b64encode(key).decode()
    url = f"https://acct.blob.core.windows.net/checkpoints/runs/r1/epoch_1.pt?sv=2024-11-04&sp=racwdl&sig={quote(sig, safe='')}"
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        monkeypatch.chdir(d)
        said = Path(d) / "said.txt"
        said.write_text("epoch 1 done\n" + line.format(url=url, quoted=quote(url, safe="")) + "\n")
        python = Path(d) / "python"
        python.write_text(f"#!/bin/sh\ncat {said}\nexit 1\n")
        python.chmod(0o755)
        out = run_module(capsys, {"backend": "local", "name": "leak", "source_dir": str(ROOT / "workload"),
                                  "python": str(python), "data_dir": d, "output_dir": str(Path(d) / "out")})
    assert out.get("failed") and "un leak ended Failed" in out["msg"], out  # "Run ..." after a stopped sentence
    shown = json.dumps(out)
    for form in (sig, quote(sig, safe=""), quote(quote(sig, safe=""), safe="")):
        assert form not in shown, line
    assert "REDACTED" in out["msg"], out["msg"]


def test_a_signature_in_the_service_s_error_reaches_neither_the_message_nor_the_result(v1, capsys, tmp_path, monkeypatch):
    """The service's error can quote what the job printed (a URL with its SAS): the failure and the
    result's ``error`` show it redacted."""
    monkeypatch.chdir(tmp_path)
    sig = "QmFkU2lnbmF0dXJlTm90UmVhbDAxMjM0NTY3ODk%3D"
    error = f"User program failed: PUT https://acct.blob.core.windows.net/checkpoints/r1?sv=2024-11-04&sig={sig} 403"
    v1.runs.append(FakeRun(None, {"amlhpc_run": "cf-4x8"}, status="Failed", error=error, logs=V1_LOGS, before="Running"))
    out = run_module(capsys, module_args(tmp_path))
    assert out["failed"] is True and "User program failed" in out["msg"], out
    assert sig not in json.dumps(out) and "sig=REDACTED" in out["error"], out.get("error")
