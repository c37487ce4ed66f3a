"""How long a 512-node azureml_compute inventory takes, cold and cached, and how many SDK
calls it makes (both SDKs faked at the SDK boundary, see tests/azureml_fakes.py; no Azure
latency is in these numbers: they are the plugin's and the SDK's own cost)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The made-up node addresses answer no ssh-keyscan: these numbers are the plugin's and the
# SDK's, without the controller's known_hosts upkeep (scanned once per new node, for real, in
# tests/integration/test_known_hosts.py and the container benches).
os.environ["AMLHPC_KNOWN_HOSTS"] = "false"
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "plugins" / "module_utils")]

import yaml  # noqa: E402
from ansible.inventory.manager import InventoryManager  # noqa: E402
from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.plugins.loader import init_plugin_loader  # noqa: E402

from azureml_fakes import RG, SUB, WS, World, install_v1, install_v2, make_nodes  # noqa: E402

NODES = 512


class Patch:
    """The bit of pytest's monkeypatch the fakes use."""

    def __init__(self):
        self.undo = []

    def setattr(self, obj, name, value):
        self.undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def restore(self):
        for obj, name, value in reversed(self.undo):
            setattr(obj, name, value)


def run(source: str, tmp: Path) -> None:
    world = World()
    world.add("gpu", make_nodes(NODES))
    patch = Patch()
    start = time.perf_counter()
    (install_v1 if source == "azureml-core" else install_v2)(patch, world)
    print(f"{source:13s} importing the SDK (paid once by every fresh ansible-inventory): "
          f"{(time.perf_counter() - start) * 1000:.0f} ms")
    path = tmp / f"{source}.azureml_compute.yml"
    path.write_text(yaml.safe_dump({
        "plugin": "amlhpc.azureml.azureml_compute", "source": source, "subscription_id": SUB, "resource_group": RG,
        "workspace_name": WS, "auth_source": "cli", "clusters": ["gpu"], "cache": True,
        "cache_plugin": "ansible.builtin.jsonfile", "cache_connection": str(tmp / f"cache-{source}"),
        "cache_timeout": 600}))
    try:
        for label, cache in (("cold", False), ("cached", True)):
            before = sum(world.calls.values())
            start = time.perf_counter()
            inv = InventoryManager(loader=DataLoader(), sources=[str(path)], cache=cache)
            took = time.perf_counter() - start
            hosts = len(inv.groups["aml_nodes"].get_hosts())
            assert hosts == NODES, hosts
            calls = sum(world.calls.values()) - before
            print(f"{source:13s} {label:6s} {hosts} hosts  {took * 1000:8.1f} ms  {calls:3d} SDK/HTTP calls")
        print(f"{source:13s} calls by kind (cold): {dict(sorted(world.calls.items()))}")
    finally:
        patch.restore()
    fresh_cached(source, path)


FRESH = """
import os, sys, time
sys.path.insert(0, {mu!r})
os.environ["ANSIBLE_CONFIG"] = {cfg!r}
start = time.perf_counter()
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader()
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
inv = InventoryManager(loader=DataLoader(), sources=[{path!r}])
took = time.perf_counter() - start
sdk = any(m in sys.modules for m in ("azureml.core", "azure.ai.ml"))
print(len(inv.groups["aml_nodes"].get_hosts()), round(took * 1000), sdk)
"""


def fresh_cached(source: str, path: Path) -> None:
    """A new process (what `ansible-inventory` is) served from the cache: no SDK import at all."""
    code = FRESH.format(mu=str(ROOT / "plugins" / "module_utils"), cfg=str(ROOT / "ansible.cfg"), path=str(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    hosts, ms, sdk = out.stdout.split()[-3:]
    print(f"{source:13s} cached, fresh process: {hosts} hosts {int(ms):6d} ms (Ansible start-up included), "
          f"SDK imported: {sdk}")


def main() -> None:
    init_plugin_loader()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        nodes = t / "nodes.json"
        import json
        # Warm-up: load the plugin once (a 1-node file), so the numbers below are the runs'.
        nodes.write_text(json.dumps(make_nodes(1)))
        warm = t / "warm.azureml_compute.yml"
        warm.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file", "cluster": "gpu",
                                        "nodes_file": str(nodes)}))
        InventoryManager(loader=DataLoader(), sources=[str(warm)])
        print(f"{NODES}-node cluster; cold = Azure asked (faked, no network latency), cached = jsonfile cache")
        nodes.write_text(json.dumps(make_nodes(NODES)))
        cfg = t / "file.azureml_compute.yml"
        cfg.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file", "cluster": "gpu",
                                       "nodes_file": str(nodes)}))
        start = time.perf_counter()
        inv = InventoryManager(loader=DataLoader(), sources=[str(cfg)])
        took = time.perf_counter() - start
        print(f"{'nodes_file':13s} {'cold':6s} {len(inv.groups['aml_nodes'].get_hosts())} hosts  "
              f"{took * 1000:8.1f} ms    0 SDK/HTTP calls")
        for source in ("azureml-core", "azure-ai-ml"):
            run(source, t)


if __name__ == "__main__":
    main()
