"""amlhpc_yaml: YAML inventories read through ansible-core's public inventory-plugin interface
(not a subclass of the builtin yaml plugin), declining ``*.azureml_compute.yml`` files so that a
broken one shows its own plugin's error alone.

Parity: generated YAML inventories read by amlhpc_yaml and by ansible.builtin.yaml give the
same groups, hosts, ports and variables."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import yaml
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, inventory_loader
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[4]

# What the ansible CLIs do first: collection and ansible.builtin.* names resolve.
init_plugin_loader()


def test_it_is_no_subclass_of_a_builtin_inventory_plugin():
    import ansible.plugins.inventory as builtin
    ours = type(inventory_loader.get("amlhpc.azureml.amlhpc_yaml"))
    assert not [c for c in ours.__mro__[1:] if c.__module__.startswith(builtin.__name__ + ".")
                and c.__module__ != builtin.__name__], ours.__mro__


def test_verify_file_leaves_plugin_configuration_files_to_their_plugin(tmp_path):
    plugin = inventory_loader.get("amlhpc.azureml.amlhpc_yaml")
    for name, ours in (("hosts.yml", True), ("hosts.yaml", True), ("hosts.json", True), ("hosts", True),
                       ("gpu.azureml_compute.yml", False), ("gpu.azureml_compute.yaml", False), ("hosts.ini", False)):
        (tmp_path / name).write_text("all: {}\n")
        assert plugin.verify_file(str(tmp_path / name)) is ours, name


def _cli_inventory(path: Path, cfg: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg), ANSIBLE_INVENTORY_UNPARSED_FAILED="true")
    return subprocess.run([ansible_cli("ansible-inventory"), "-i", str(path), "--list"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_broken_plugin_file_shows_its_plugins_error_alone(tmp_path):
    bad = tmp_path / "y.azureml_compute.yml"
    bad.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file",
                                   "cluster": "gpu", "nodes_file": "missing.json"}))
    res = _cli_inventory(bad, ROOT / "ansible.cfg")
    assert res.returncode != 0
    assert "missing.json does not exist" in " ".join(res.stderr.split())
    said = " ".join(res.stderr.split())
    assert "Plugin configuration YAML file" not in said, said
    # Only the azureml_compute plugin failed on it (2.18 and 2.21 word their warnings apart).
    assert set(re.findall(r"Failed to parse .*?(\w+)'? plugin", said)) == {"azureml_compute"}, said


def test_the_local_default_reads_as_it_did(tmp_path):
    res = _cli_inventory(ROOT / "inventory" / "local", ROOT / "ansible.cfg")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["head"]["hosts"] == ["local-0"] and out["cluster_local"]["hosts"] == ["local-0"]
    local = out["_meta"]["hostvars"]["local-0"]
    assert local["ansible_connection"] == "local" and local["aml_node_rank"] == 0


# --- parity with ansible.builtin.yaml, on generated inventories ----------------------------

NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda n: n not in ("all", "ungrouped"))
VALUES = st.one_of(st.integers(-5, 5), st.booleans(), st.text("abc {}%", max_size=6), st.none(),
                   st.lists(st.integers(0, 3), max_size=2))
VARS = st.dictionaries(NAMES, VALUES, max_size=3)
HOSTS = st.dictionaries(st.one_of(NAMES, NAMES.map(lambda n: n + "[1:3]"), NAMES.map(lambda n: n + ":2222")),
                        st.one_of(st.none(), VARS), max_size=3)


@st.composite
def group(draw, depth=0):
    data = {}
    if draw(st.booleans()):
        data["hosts"] = draw(HOSTS)
    if draw(st.booleans()):
        data["vars"] = draw(VARS)
    if depth < 2 and draw(st.booleans()):
        data["children"] = draw(st.dictionaries(NAMES, st.one_of(st.none(), group(depth + 1)), max_size=2))
    return data or None


def _read(plugin_name: str, path: Path) -> dict:
    """What the plugin makes of the file: its groups and hosts, or the sentence it refuses it with
    (a group that is its own child, a loop of children: ansible-core's inventory refuses both)."""
    plugin = inventory_loader.get(plugin_name)
    data = InventoryData()
    try:
        plugin.parse(data, DataLoader(), str(path), cache=False)
        data.reconcile_inventory()
    except Exception as exc:  # noqa: BLE001 - the builtin plugin lets ansible-core's plain Exception through
        return {"refused": str(exc)}
    return {"groups": {n: (sorted(h.name for h in g.hosts), sorted(c.name for c in g.child_groups), g.vars)
                       for n, g in data.groups.items()},
            "hosts": {n: h.vars for n, h in data.hosts.items()}}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(NAMES, st.one_of(st.none(), group()), min_size=1, max_size=3), st.booleans())
@example({"a": {"children": {"a": None}}}, False)  # both refuse: "can't add group to itself"
@example({"a": {"children": {"b": {"children": {"a": None}}}}}, True)  # both refuse: a loop
def test_it_reads_what_the_builtin_yaml_plugin_reads(tmp_path, inventory, with_all):
    """Parity of outcomes: the same groups, hosts and variables, or both refuse the file with the
    same sentence. The generated inventory may make a group its own child, directly or through
    another; ansible.builtin.yaml refuses it, and so does this plugin (shrunk cases kept above)."""
    if with_all:
        inventory = {"all": {"children": inventory, "vars": {"x": 1}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    assert _read("amlhpc.azureml.amlhpc_yaml", path) == _read("ansible.builtin.yaml", path)
