"""The execution environment built for real (`make test-ee`): tests/ee/build.sh runs
ansible-builder on execution-environment.yml (with a Debian trixie base: no UBI here), then
the image is used the way ansible-navigator and AAP use it, as its own default user: the
collection, its documentation, the Azure SDKs, the pinned azcopy, the inventory plugin, and a
real run of the local default's blob phases (prepare the data set, stage it with azcopy)
against Azurite on the host's loopback."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
EE = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
INSTALLED = "/usr/share/ansible/collections/ansible_collections/amlhpc/azureml"


def azcopy_pin() -> tuple[str, str]:
    """(version, sha512) of the execution environment's azcopy build args."""
    args = dict(re.findall(r"^ARG (AZCOPY_\w+)=(\S+)$", "\n".join(EE["additional_build_steps"]["append_final"]), re.M))
    return args["AZCOPY_VERSION"], args["AZCOPY_SHA512"]


@pytest.fixture(scope="module")
def image() -> str:
    res = subprocess.run([str(ROOT / "tests" / "ee" / "build.sh")], capture_output=True, text=True, timeout=3600, check=False)
    assert res.returncode == 0, res.stderr[-4000:]
    return res.stdout.strip().splitlines()[-1]


def ee(image: str, *argv: str, volumes: dict[Path, str] | None = None, workdir: str | None = None,
       network: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run a command in a throw-away container of the image, as navigator does (its entrypoint,
    its default user), and require it to succeed."""
    cmd = ["docker", "run", "--rm", "--name", f"ee-test-{uuid.uuid4().hex[:10]}"]
    for src, dest in (volumes or {}).items():
        cmd += ["-v", f"{src}:{dest}"]
    if workdir:
        cmd += ["-w", workdir]
    if network:
        cmd += ["--network", network]
    res = subprocess.run([*cmd, image, *argv], capture_output=True, text=True, timeout=timeout, check=False)
    assert res.returncode == 0, f"{argv}\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return res


def test_the_image_runs_ansible_core_with_the_collection_and_the_azure_sdks(image):
    version = ee(image, "ansible", "--version").stdout
    core = EE["dependencies"]["ansible_core"]["package_pip"].split("==")[1]
    assert f"[core {core}]" in version, version
    listed = ee(image, "ansible-galaxy", "collection", "list", "amlhpc.azureml", "--format", "json").stdout
    assert json.loads(listed) == {"/usr/share/ansible/collections/ansible_collections": {
        "amlhpc.azureml": {"version": GALAXY["version"]}}}
    # The collection's dependencies come with the `ansible` bundle execution-environment.yml lists.
    for dep in GALAXY["dependencies"]:
        assert dep in ee(image, "ansible-galaxy", "collection", "list", dep).stdout, dep
    ee(image, "python3", "-c", "import azureml.core, azure.ai.ml, azure.identity, azure.storage.blob, ansible_runner")
    assert ee(image, "id", "-u").stdout.strip() != "0"


def test_ansible_doc_renders_the_modules_in_the_image(image):
    text = re.sub(r"\x1b\[[0-9;]*m", "", ee(image, "ansible-doc", "amlhpc.azureml.aml_job").stdout)
    words = " ".join(text.split())
    assert f"MODULE amlhpc.azureml.aml_job ({INSTALLED}/plugins/modules/aml_job.py)" in words
    assert "Builds the job from `plugins/module_utils/amlhpc/azure/job_spec.py' and submits it." in words
    # The options of the shared auth doc fragment are rendered into the module's page.
    assert "auth_source" in words
    doc = json.loads(ee(image, "ansible-doc", "--json", "amlhpc.azureml.aml_job").stdout)["amlhpc.azureml.aml_job"]["doc"]
    assert doc["short_description"] == "Run the CosmoFlow training job on AzureML or on this machine"
    assert doc["version_added"] == GALAXY["version"]


def test_the_site_playbook_parses_in_the_image(image):
    out = ee(image, "ansible-playbook", "-i", f"{INSTALLED}/inventory/local", "amlhpc.azureml.site",
             "--syntax-check").stdout
    assert f"playbook: {INSTALLED}/playbooks/site.yml" in out


def test_azcopy_is_the_pinned_release_of_the_project_tools(image):
    version = azcopy_pin()[0]
    assert ee(image, "azcopy", "--version").stdout.strip() == f"azcopy version {version}"
    assert ee(image, "sh", "-c", "command -v azcopy").stdout.strip() == "/usr/local/bin/azcopy"


@pytest.fixture
def project(tmp_path) -> Path:
    """A project folder of the user's own (ansible.cfg, inventory), mounted into the container as
    navigator mounts it, owned by the image's user (uid 1000), who writes there."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "ansible.cfg").write_text("[defaults]\nlocal_tmp = .cache/ansible-local\n")
    return project


def in_project(project: Path) -> dict:
    """ee() arguments that run in the project folder, handed to the image's user."""
    os.chown(project, 1000, 1000)
    for path in project.rglob("*"):
        os.chown(path, 1000, 1000)
    return {"volumes": {project: "/runner/project"}, "workdir": "/runner/project"}


def test_the_inventory_plugin_reads_a_saved_node_list_in_the_image(image, project):
    saved = yaml.safe_load((ROOT / "inventory" / "examples" / "saved.azureml_compute.yml").read_text())
    saved["nodes_file"] = "list_nodes_gpu4.json"
    (project / "gpu.azureml_compute.yml").write_text(yaml.safe_dump(saved))
    (project / "list_nodes_gpu4.json").write_text((ROOT / "tests" / "fixtures" / "azureml" / "list_nodes_gpu4.json").read_text())
    inv = json.loads(ee(image, "ansible-inventory", "-i", "gpu.azureml_compute.yml", "--list", **in_project(project)).stdout)
    assert sorted(inv["cluster_gpu"]["hosts"]) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert inv["head"]["hosts"] == ["gpu-0"]


@pytest.fixture
def azurite(tmp_path):
    """Azurite from the project's .tools on the host's loopback (the image has no node)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = ROOT / ".tools" / "bin" / "azurite-blob"
    assert exe.exists(), f"{exe} is missing: run `make setup`"
    data = tmp_path / "azurite"
    data.mkdir()
    with open(data / "azurite.log", "ab") as log:
        proc = subprocess.Popen([str(exe), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data),
                                 "--silent", "--skipApiVersionCheck", "--loose", "--disableTelemetry"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "Azurite did not start"
            time.sleep(0.2)
    yield port
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(10)


def test_the_local_default_prepares_and_stages_the_data_set_in_the_image(image, azurite, project):
    """The image's ansible-playbook and azcopy run the local default's blob phases against
    Azurite on the host's loopback (--network host). Its training phase needs a Python with
    torch, which the execution environment leaves out (jobs train on AzureML)."""
    res = ee(image, "ansible-playbook", "-i", f"{INSTALLED}/inventory/local", "amlhpc.azureml.site",
             "--tags", "prepare_dataset,stage", "-e", f"local_blob_port={azurite}",
             "-e", "stage_azcopy_path=/usr/local/bin/azcopy", network="host", timeout=900, **in_project(project))
    out = res.stdout
    assert re.search(r"local-0\s+: ok=\d+ +changed=\d+ +unreachable=0 +failed=0", out), out[-3000:]
    staged = list((project / ".scratch" / "cosmoflow").rglob("*.tfrecord*"))
    assert staged, out[-3000:]
    assert re.search(r"stage: \d+ files, .* on 1 node\(s\)", out), out[-3000:]
    # The run's report lands in the project folder, not in the (read-only) installed collection.
    assert (project / "outputs" / "cosmoflow-local" / "report.html").is_file()


def test_a_wrong_azcopy_checksum_fails_the_build(image):
    """The sha512 check is live: the same context with another checksum does not build."""
    sha512 = azcopy_pin()[1]
    wrong = ("0" if sha512[0] != "0" else "1") + sha512[1:]
    context = ROOT / ".cache" / "ee" / "context"
    res = subprocess.run(["docker", "build", "--force-rm", "-f", str(context / "Dockerfile"), "--build-arg", f"AZCOPY_SHA512={wrong}",
                          "-t", "ee-amlhpc:wrong-checksum", str(context)],
                         capture_output=True, text=True, timeout=1800, check=False)
    subprocess.run(["docker", "image", "rm", "ee-amlhpc:wrong-checksum"], capture_output=True, check=False)
    assert res.returncode != 0
    assert "/tmp/azcopy.tgz: FAILED" in res.stdout + res.stderr
