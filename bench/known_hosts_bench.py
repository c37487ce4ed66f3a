"""What the controller's known_hosts upkeep costs a 512-node azureml_compute inventory read.

Reads of a nodes_file inventory through Ansible's InventoryManager, with host key management
off, on at the first read (512 endpoints scanned and pinned), on at a steady read (nothing
scanned; and with known_hosts_verify: always, every pinned node's live keys compared with its
pin), after known_hosts was emptied (512 nodes put back from their pins, and compared) and
after one node was replaced (one scanned). ssh-keyscan is a stand-in shell script that answers at once,
so the numbers are the controller's own cost (one process per scanned endpoint, the plan, the
locked read and write of known_hosts and its record), not the network's. Wall time and CPU
seconds (this process and its children: user + sys).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "plugins" / "module_utils")]
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))

import yaml  # noqa: E402
from ansible.inventory.manager import InventoryManager  # noqa: E402
from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.plugins.loader import init_plugin_loader  # noqa: E402

from azureml_fakes import make_nodes  # noqa: E402

NODES = 512
FAKE_KEYSCAN = """#!/bin/sh
echo "[$5]:$4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIbench$4"
"""


def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    init_plugin_loader()
    with tempfile.TemporaryDirectory(prefix="amlhpc-khbench-") as tmp:
        t = Path(tmp)
        (t / "bin").mkdir()
        (t / "bin" / "ssh-keyscan").write_text(FAKE_KEYSCAN)
        (t / "bin" / "ssh-keyscan").chmod(0o755)
        os.environ["PATH"] = f"{t / 'bin'}{os.pathsep}{os.environ['PATH']}"
        os.environ["AMLHPC_KNOWN_HOSTS_FILE"] = str(t / "known_hosts")
        nodes = make_nodes(NODES)
        (t / "nodes.json").write_text(json.dumps(nodes))
        cfg = t / "bench.azureml_compute.yml"
        cfg.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file", "cluster": "gpu",
                                       "nodes_file": "nodes.json"}))
        os.environ["AMLHPC_KNOWN_HOSTS"] = "false"
        InventoryManager(loader=DataLoader(), sources=[str(cfg)])  # warm-up: plugin and config loaded

        def read(label: str) -> None:
            wall, used = time.perf_counter(), cpu()
            inv = InventoryManager(loader=DataLoader(), sources=[str(cfg)])
            wall, used = time.perf_counter() - wall, cpu() - used
            print(f"{label:34s} {len(inv.groups['aml_nodes'].get_hosts())} hosts  {wall * 1000:7.0f} ms wall  "
                  f"{used:6.2f} CPU s")

        print(f"{NODES}-node nodes_file inventory, ssh-keyscan answering at once "
              f"({os.cpu_count()} CPUs seen; CPU s = user+sys incl. children)")
        read("known_hosts off")
        os.environ["AMLHPC_KNOWN_HOSTS"] = "true"
        read(f"first read ({NODES} scanned)")
        read("steady read (0 scanned)")
        os.environ["AMLHPC_KNOWN_HOSTS_VERIFY"] = "always"
        read(f"steady read, verify always ({NODES} compared)")
        os.environ["AMLHPC_KNOWN_HOSTS_VERIFY"] = "edited"
        (t / "known_hosts").write_text("")
        read(f"emptied file ({NODES} put back, compared)")
        nodes[7]["nodeId"] = "tvmps_replacement_d"
        (t / "nodes.json").write_text(json.dumps(nodes))
        read("one node replaced (1 scanned)")


if __name__ == "__main__":
    main()
