"""Security state is state, not cache: the nodes' host key pins survive every clean-up of
caches (``make clean``, a deleted .cache), pins kept in the old place are moved, never
trusted anew, and forgetting them is its own command, which backs them up first.

The Makefile's recipes run for real in a copy of the project's Makefile and ansible.cfg."""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
from pathlib import Path

import yaml
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader

ROOT = Path(__file__).resolve().parents[2]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOjW9Zk3s7wGd1Xy2b6mXyq0dHnCq0m0m1f1rJtS2cWm"
init_plugin_loader()


def project_copy(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Makefile", "ansible.cfg"):
        shutil.copy(ROOT / name, project / name)
    return project


def pin_file(project: Path) -> Path:
    """Where the project's ansible.cfg keeps the nodes' known_hosts (the pins beside it)."""
    config = configparser.ConfigParser()
    config.read(project / "ansible.cfg")
    return project / config["inventory_plugin_azureml_compute"]["known_hosts_file"]


def write_pins(path: Path) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"version": 2, "hosts": {"kh-0": "tvmps_0"},
              "endpoints": {"[127.0.0.1]:9": {"node_id": "tvmps_0", "cluster": "kh", "host": "kh-0"}},
              "pins": {"kh": {"tvmps_0": {"keys": [KEY], "first": "[127.0.0.1]:9"}}}}
    path.write_text(f"[127.0.0.1]:9 {KEY}\n")
    Path(str(path) + ".nodes.json").write_text(json.dumps(record))
    return record


def make(project: Path, target: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", target], cwd=project, capture_output=True, text=True,
                          timeout=60, check=False)


def test_make_clean_leaves_the_pins(tmp_path):
    project = project_copy(tmp_path)
    pins = pin_file(project)
    record = write_pins(pins)
    (project / ".cache" / "facts").mkdir(parents=True)
    done = make(project, "clean")
    assert done.returncode == 0, done.stderr
    assert not (project / ".cache").exists()  # the caches went
    assert json.loads(Path(str(pins) + ".nodes.json").read_text()) == record
    assert ".cache" not in pins.relative_to(project).parts


def test_the_pins_state_folder_is_git_ignored():
    ignored = subprocess.run(["git", "check-ignore", "-q", str(pin_file(ROOT)) + ".nodes.json"], cwd=ROOT,
                             check=False)
    assert ignored.returncode == 0


def test_forget_pins_backs_them_up_first(tmp_path):
    project = project_copy(tmp_path)
    pins = pin_file(project)
    write_pins(pins)
    before = {p.name: p.read_bytes() for p in pins.parent.glob("known_hosts*") if not p.name.endswith(".lock")}
    done = make(project, "forget-pins")
    assert done.returncode == 0, done.stderr
    assert not Path(str(pins) + ".nodes.json").exists() and not pins.exists()
    backups = list((pins.parent / "backup").glob("*/"))
    assert len(backups) == 1, backups
    assert {p.name: p.read_bytes() for p in backups[0].iterdir()} == before
    assert str(backups[0].relative_to(project)) in done.stdout
    again = make(project, "forget-pins")  # nothing left: says so, backs up nothing
    assert again.returncode == 0 and "nothing to forget" in again.stdout
    assert len(list((pins.parent / "backup").glob("*/"))) == 1
    shutil.rmtree(pins.parent)  # no state folder at all: the same
    assert "nothing to forget" in make(project, "forget-pins").stdout


def test_pins_in_the_old_place_are_moved_not_trusted_anew(tmp_path, monkeypatch):
    """2.2.0 kept them in .cache/known_hosts: the first read moves them (a warning says so), and
    the node keeps its pinned key: nothing is scanned and trusted on first use."""
    for name in ("AMLHPC_KNOWN_HOSTS_FILE", "AMLHPC_KNOWN_HOSTS_MIGRATE_FROM"):
        monkeypatch.delenv(name, raising=False)
    old, new = tmp_path / ".cache" / "known_hosts", tmp_path / "state" / "known_hosts"
    record = write_pins(old)
    (tmp_path / "nodes.json").write_text(json.dumps([{"nodeId": "tvmps_0", "privateIpAddress": "10.0.0.4",
                                                      "publicIpAddress": "127.0.0.1", "port": 9,
                                                      "nodeState": "idle"}]))
    config = tmp_path / "kh.azureml_compute.yml"
    config.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file",
                                      "cluster": "kh", "nodes_file": "nodes.json", "admin_user": "azureuser",
                                      "known_hosts_file": "state/known_hosts",
                                      "known_hosts_migrate_from": ".cache/known_hosts",
                                      "known_hosts_scan_timeout": 1}))
    host = InventoryManager(DataLoader(), [str(config)]).get_host("kh-0").get_vars()
    assert host["aml_host_keys"] == [KEY]
    assert json.loads(Path(str(new) + ".nodes.json").read_text())["pins"] == record["pins"]
    assert f"[127.0.0.1]:9 {KEY}" in new.read_text()
    # The old place is read once: a pin forgotten in the new place is not brought back from it.
    shutil.rmtree(tmp_path / "state")
    (tmp_path / "state").mkdir()
    Path(str(new) + ".nodes.json").write_text(json.dumps({"version": 2, "endpoints": {}, "hosts": {}, "pins": {}}))
    host = InventoryManager(DataLoader(), [str(config)]).get_host("kh-0").get_vars()
    assert host["aml_host_keys"] == []  # the scan of the closed port failed: not pinned, not the old key
