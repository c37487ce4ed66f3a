"""The collection as a user gets it: `ansible-galaxy collection build`, the tarball installed
into an empty collections path, and the local default run from the installed collection
(`ansible-playbook -i <collection>/inventory/local amlhpc.azureml.site`) in a project
folder that is not this checkout. And the execution environment's build context, generated
by `ansible-builder create` and checked."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
TARBALL = f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user who never cloned the repository: no ANSIBLE_* from make."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(extra)
    return env


def run(argv: list[str], cwd: Path, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=clean_env(**env), check=False)
    assert res.returncode == 0, f"{argv}\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return res


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(ROOT)], cwd=out)
    path = out / TARBALL
    assert path.is_file()
    return path


def test_the_tarball_holds_the_collection_and_nothing_local(tarball):
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))
        links = [m.name for m in tar.getmembers() if m.issym() or m.islnk()]
    assert manifest["collection_info"]["license"] == ["MIT"]
    for path in ("MANIFEST.json", "meta/runtime.yml", "LICENSE", "README.md", "playbooks/site.yml",
                 "plugins/modules/aml_job.py", "plugins/inventory/azureml_compute.py",
                 "plugins/module_utils/amlhpc/staging/shards.py", "roles/stage/tasks/main.yml",
                 "inventory/local/hosts.yml", "inventory/local/group_vars/all.yml", "workload/train.py",
                 "workload/cosmoflow/model.py", "CHANGELOG.md", "changelogs/changelog.yaml", "changelogs/config.yaml"):
        assert path in names, path
    assert links == []
    for top in (".venv", ".venv-workload", ".tools", ".cache", ".scratch", "outputs", ".git", "bench", ".ci", "molecule",
                "changelogs/fragments"):
        assert not any(n == top or n.startswith(top + "/") for n in names), top


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def installed_collection(tarball: Path, where: Path) -> Path:
    """The tarball installed into where/collections, as a user installs it. With a home of its
    own (where/home): a copy of the collection elsewhere on this machine (~/.ansible) would
    make the install say "already installed" and a run use that copy."""
    home = where / "home"
    home.mkdir(exist_ok=True)
    run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "--no-deps", "-p", str(where / "collections"),
         str(tarball)], cwd=where, HOME=str(home))
    return where / "collections" / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]


def test_the_local_default_runs_from_the_installed_collection(tarball, tmp_path):
    """A project folder with its own ansible.cfg (collections_path), the tools the local
    default needs (azurite, azcopy, a Python with torch) and nothing of the checkout."""
    collections = tmp_path / "collections"
    home = tmp_path / "home"
    installed = installed_collection(tarball, tmp_path)
    assert (installed / "MANIFEST.json").is_file()
    project = tmp_path / "project"
    (project / ".tools").mkdir(parents=True)
    (project / ".tools" / "bin").symlink_to(ROOT / ".tools" / "bin")
    (project / ".venv-workload").symlink_to(ROOT / ".venv-workload")
    (project / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {collections}\n"
                                         "home = .cache/ansible-home\nlocal_tmp = .cache/ansible-local\n")
    env = {"ANSIBLE_CONFIG": str(project / "ansible.cfg"), "HOME": str(home),
           "PATH": f"{BIN}{os.pathsep}{ROOT / '.tools' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    res = run([str(BIN / "ansible-playbook"), "-i", str(installed / "inventory" / "local"), "amlhpc.azureml.site",
               "-e", f"local_blob_port={free_port()}"], cwd=project, timeout=1200, **env)
    out = res.stdout
    assert "failed=0" in out and "unreachable=0" in out, out[-3000:]
    assert "submit: run cosmoflow-local Completed" in out, out[-3000:]
    # What the run wrote is in the project folder, not in the installed collection.
    assert (project / "outputs" / "cosmoflow-local" / "summary.json").is_file()
    assert list((project / ".scratch" / "cosmoflow").rglob("*.tfrecord"))
    assert not (installed / "outputs").exists() and not (installed / ".scratch").exists()


def test_ansible_builder_creates_the_execution_environment_context(tarball, tmp_path):
    for name in ("execution-environment.yml", "bindep.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "context-src").mkdir()
    shutil.copy(tarball, tmp_path / "context-src" / tarball.name)
    # `python -m`: the venv's console script may carry another checkout's path in its shebang.
    run([sys.executable, "-m", "ansible_builder", "create", "-f", "execution-environment.yml", "--context", "context",
         "--output-filename", "Containerfile"], cwd=tmp_path)
    ctx = tmp_path / "context"
    containerfile = (ctx / "Containerfile").read_text()
    build = ctx / "_build"
    assert (build / "collection" / tarball.name).is_file()
    assert "ansible-galaxy collection install --offline --no-deps" in containerfile
    assert "/usr/local/bin/azcopy" in containerfile and "ansible-core==2.21.5" in containerfile
    # The Python requirements: the `ansible` bundle the project runs (requirements-test.txt), then
    # the ranges of requirements.txt and requirements-sdk-v1.txt, which pip resolves to their newest.
    ee = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    bundle = next(line for line in (ROOT / "requirements-test.txt").read_text().splitlines() if line.startswith("ansible=="))
    ranges = [line for name in ("requirements.txt", "requirements-sdk-v1.txt")
              for line in (ROOT / name).read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert ee["dependencies"]["python"] == [bundle, *ranges]
    assert (build / "requirements.txt").read_text().split() == [bundle, *ranges]
    # The system packages go into the context unchanged.
    bindep = (build / "bindep.txt").read_text()
    for pkg in ("libsecret-1-0 [platform:dpkg]", "libsecret [platform:rpm]", "mdadm"):
        assert pkg in bindep, pkg
    assert ee["version"] == 3


def test_the_execution_environment_pins_azcopy_to_the_tools_release_with_its_checksum():
    """The image's azcopy is the release the project's own tools install (.ci/node-packages.txt),
    downloaded by version and checked against the sha512 npm verified when it installed them."""
    ee = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    steps = "\n".join(ee["additional_build_steps"]["append_final"])
    args = dict(re.findall(r"^ARG (AZCOPY_\w+)=(\S+)$", steps, re.M))
    node_packages = (ROOT / ".ci" / "node-packages.txt").read_text()
    tools_version = re.search(r"^@azure-tools/azcopy-linux@(\S+)$", node_packages, re.M).group(1)
    assert args["AZCOPY_VERSION"] == tools_version
    assert re.fullmatch(r"[0-9a-f]{128}", args["AZCOPY_SHA512"])
    assert "aka.ms" not in steps
    # The download is checked before it is unpacked, in the same RUN.
    run_step = next(s for s in ee["additional_build_steps"]["append_final"] if "azcopy-linux-${AZCOPY_VERSION}.tgz" in s)
    assert run_step.index("sha512sum --check --strict") < run_step.index("tar -xzf")
    lock = ROOT / ".tools" / "node" / "package-lock.json"
    if not lock.is_file():
        pytest.skip(f"{lock} is missing: `make setup` installs the node tools")
    entry = json.loads(lock.read_text())["packages"]["node_modules/@azure-tools/azcopy-linux"]
    assert entry["version"] == tools_version
    algo, b64 = entry["integrity"].split("-", 1)
    assert algo == "sha512" and base64.b64decode(b64).hex() == args["AZCOPY_SHA512"]


LINT_BIN = ROOT / ".venv-lint" / "bin"


def test_galaxy_importer_accepts_the_tarball(tarball, tmp_path):
    """Galaxy and Automation Hub run galaxy-importer on an uploaded tarball and refuse what it
    refuses (a role without a README, say). ansible-test sanity runs in its own tier
    (make test-sanity), so it is off here; ansible-lint is on, as on Galaxy."""
    config = tmp_path / "galaxy-importer.cfg"
    config.write_text("[galaxy-importer]\nRUN_ANSIBLE_TEST = False\nRUN_ANSIBLE_LINT = True\n")
    res = subprocess.run([str(LINT_BIN / "python"), "-m", "galaxy_importer.main", str(tarball)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=900, check=False,
                         env=clean_env(GALAXY_IMPORTER_CONFIG=str(config), HOME=str(tmp_path),
                                       PATH=f"{LINT_BIN}{os.pathsep}{os.environ.get('PATH', '')}"))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    problems = [line for line in out.splitlines() if line.startswith(("ERROR", "WARNING"))]
    # The warnings Galaxy shows are the notices of tests/sanity/ignore-<core>.txt, one per
    # supported core tested (the MIT licence headers that validate-modules takes for missing
    # GPLv3 ones, each with its reason).
    notices = set()
    for path in sorted((ROOT / "tests" / "sanity").glob("ignore-*.txt")):
        ignores = [line for line in path.read_text().splitlines() if line.strip()]
        notices.add(f"WARNING: Ignore files skip ansible-test sanity tests, found {path.name} with {len(ignores)} "
                    "statement(s)")
    assert len(notices) == 2 and set(problems) == notices, "\n".join(problems)
    # It found every role, each with its README.
    for role in sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir()):
        assert f"Loading role {role}" in out, role


def test_antsibull_docs_lints_the_installed_collection(tarball, tmp_path):
    """The checks docs.ansible.com and a collection's docsite build make: every plugin's, module's
    and role's documentation as antsibull-docs reads it (roles' entry points need a description,
    O()/C() references must name real options)."""
    installed = installed_collection(tarball, tmp_path)
    res = subprocess.run([str(LINT_BIN / "antsibull-docs"), "lint-collection-docs", "--plugin-docs", str(installed)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False,
                         env=clean_env(HOME=str(tmp_path), ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"),
                                       PATH=f"{LINT_BIN}{os.pathsep}{os.environ.get('PATH', '')}"))
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
