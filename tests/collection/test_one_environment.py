"""One Python environment holds this collection and azure.azcollection: pip's resolver (the real
one, reading PyPI) finds versions for requirements.txt's ranges and azure.azcollection's
published requirements.txt together, as ansible-builder asks of it for an execution
environment with both collections, and as a user asks of it with one `pip install`. Nothing is
installed (`pip install --dry-run --ignore-installed --report`). SDK v1 (azureml-core,
requirements-sdk-v1.txt) cannot join them, and a test says so, so that the day it can, we know."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
AZCOLLECTION_VERSION = "3.21.0"
VENDORED = ROOT / "tests" / "collection" / "data" / f"azure.azcollection-{AZCOLLECTION_VERSION}-requirements.txt"

pytestmark = pytest.mark.pypi


def requirements(path: Path) -> dict[str, Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {canonicalize_name(r.name): r for r in map(Requirement, filter(None, lines))}


def resolve(tmp_path: Path, *files: Path) -> subprocess.CompletedProcess:
    """pip's resolver on the files, with the package index, installing nothing."""
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
            "--disable-pip-version-check", "--report", str(tmp_path / "report.json")]
    for f in files:
        argv += ["-r", str(f)]
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)


def resolved(tmp_path: Path) -> dict[str, str]:
    report = json.loads((tmp_path / "report.json").read_text())
    return {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}


def errors(res: subprocess.CompletedProcess) -> str:
    """pip's own lines, less its notes about the absent local index folders of this machine."""
    return "\n".join(line for line in res.stderr.splitlines() if not line.startswith("WARNING: Location"))


def test_the_vendored_file_is_what_the_bundle_ships():
    """The test data is azure.azcollection's requirements.txt of the `ansible` bundle in .venv
    (requirements-test.txt): a new bundle with another azure.azcollection needs it vendored again."""
    from ansible_collections.azure import azcollection

    installed = Path(azcollection.__path__[0])
    manifest = json.loads((installed / "MANIFEST.json").read_text())
    version = manifest["collection_info"]["version"]
    assert version == AZCOLLECTION_VERSION, (
        f"the ansible bundle now ships azure.azcollection {version}: vendor its requirements.txt as "
        f"tests/collection/data/azure.azcollection-{version}-requirements.txt and set AZCOLLECTION_VERSION")
    published = (installed / "requirements.txt").read_text()
    vendored = re.sub(r"\A(#[^\n]*\n)+", "", VENDORED.read_text())
    assert vendored == published


def test_one_environment_holds_the_collection_and_azure_azcollection(tmp_path):
    res = resolve(tmp_path, ROOT / "requirements.txt", VENDORED)
    assert res.returncode == 0, "pip cannot put requirements.txt beside azure.azcollection's:\n" + errors(res)
    versions = resolved(tmp_path)
    ours = requirements(ROOT / "requirements.txt")
    for name, req in ours.items():
        assert name in versions, name
        assert req.specifier.contains(versions[name], prereleases=True), (name, versions[name], str(req))
    # Each of azure.azcollection's exact pins is what the environment gets.
    for name, req in requirements(VENDORED).items():
        pins = [s.version for s in req.specifier if s.operator == "=="]
        if pins and (req.marker is None or req.marker.evaluate()):
            assert versions[name] == pins[0], (name, versions[name], pins[0])


def test_sdk_v1_cannot_share_an_environment_with_azure_azcollection(tmp_path):
    """azureml-core caps azure-mgmt-storage at 24.0.0 (1.61) or lower and msal-extensions at 1.0.0
    (1.54 and older); azure.azcollection 3.21.0 pins azure-mgmt-storage 25.0.0 and msal-extensions
    1.2.0 (through azure-cli-core). Hence requirements-sdk-v1.txt apart; when this test fails,
    azureml-core can join requirements.txt again (docs/operations.md, "Python requirements")."""
    res = resolve(tmp_path, ROOT / "requirements.txt", ROOT / "requirements-sdk-v1.txt", VENDORED)
    assert res.returncode != 0, "azureml-core now resolves beside azure.azcollection: move it back to requirements.txt"
    assert "ResolutionImpossible" in res.stderr and "azure-mgmt-storage" in res.stderr, errors(res)
