"""The saved-list example (inventory/examples/saved.azureml_compute.yml) as an installed user runs
it: copied into a project of their own beside the saved nodes.json. Its caches (the nodes'
known_hosts) go to the project, next to its ansible.cfg, never into the collection; run in place
from the collection (no ansible.cfg anywhere), it writes nothing there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "inventory" / "examples" / "saved.azureml_compute.yml"
FIXTURE = ROOT / "tests" / "fixtures" / "azureml" / "list_nodes_gpu4.json"
FAKE_KEYSCAN = r"""#!/bin/sh
# ssh-keyscan -T <s> -p <port> <address> for the fixture's made-up addresses (as the inventory tests' one).
port=$4 address=$5
echo "# $address:$port SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u6"
echo "[$address]:$port ssh-ed25519 AAAAC3key$port"
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    (bindir / "ssh-keyscan").write_text(FAKE_KEYSCAN)
    (bindir / "ssh-keyscan").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "AMLHPC_"))}
    collections = ROOT / ".cache" / "collections"
    return {**env, "HOME": str(tmp_path / "home"), "PATH": f"{bindir}{os.pathsep}{env['PATH']}",
            "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
            "ANSIBLE_INVENTORY_ENABLED": "amlhpc.azureml.azureml_compute", **extra}


def _collection_cache() -> set[Path]:
    return {p for p in (ROOT / "inventory" / "examples").rglob("*") if ".cache" in p.parts or p.name.startswith("known")}


def test_a_copy_in_a_project_keeps_its_known_hosts_in_the_project(tmp_path):
    project = tmp_path / "project"
    (project / "inventory").mkdir(parents=True)
    # The ansible.cfg the README tells installed users to copy into their project.
    shutil.copy(ROOT / "docs" / "ansible.cfg.example", project / "ansible.cfg")
    shutil.copy(EXAMPLE, project / "inventory" / "gpu.azureml_compute.yml")
    shutil.copy(FIXTURE, project / "inventory" / "nodes.json")
    before = _collection_cache()
    res = subprocess.run([ansible_cli("ansible-inventory"), "-i", "inventory/gpu.azureml_compute.yml", "--list"],
                         cwd=project, env=_env(tmp_path, ANSIBLE_CONFIG=str(project / "ansible.cfg")),
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert sorted(json.loads(res.stdout)["cluster_gpu"]["hosts"]) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert (project / "state" / "known_hosts").is_file()
    assert _collection_cache() == before


def test_run_in_place_from_the_collection_it_writes_nothing_there(tmp_path):
    (tmp_path / "home").mkdir()
    before = _collection_cache()
    res = subprocess.run([ansible_cli("ansible-inventory"), "-i", str(EXAMPLE), "--list"], cwd=tmp_path,
                         env=_env(tmp_path), capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0 and "nodes.json does not exist" in " ".join(res.stderr.split()), res.stderr
    assert _collection_cache() == before, "the example wrote into the collection"
