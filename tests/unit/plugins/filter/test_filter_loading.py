"""What a task pays to look up an amlhpc filter.

Ansible finds a collection's filter by loading every filter file of the collection, in the
worker process of each host-task (the forks share nothing they load). So the filter files
import their logic (plugins/module_utils/amlhpc) when a filter is called, and only that
filter's: a lookup through Ansible's own loader imports none of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
LOGIC = "ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc."

PROBE = r"""
import json, sys
from ansible.plugins.loader import filter_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
logic = lambda: sorted(m.rsplit(".", 1)[-1] for m in sys.modules if m.startswith(sys.argv[2]))
found = filter_loader.get(sys.argv[3])
looked_up = logic()
result = found.j2_function(*json.loads(sys.argv[4]))
print(json.dumps({"found": found is not None, "looked_up": looked_up, "called": logic(), "result": result}))
"""


def probe(name: str, args: list) -> dict:
    res = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / ".cache" / "collections"), LOGIC,
                          f"amlhpc.azureml.{name}", json.dumps(args)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.splitlines()[-1])


@pytest.mark.parametrize(("name", "args", "module", "result"), [
    ("amlhpc_nodefile_lines", [[{"aml_private_ip": "10.0.0.5", "aml_node_rank": 1},
                                {"aml_private_ip": "10.0.0.4", "aml_node_rank": 0}]], "ssh_trust",
     ["10.0.0.4", "10.0.0.5"]),
    ("amlhpc_beeond_autoscale_refusal", ["gpu", 2, 2], "autoscale", ""),
    ("amlhpc_data_scope", [False], "job_spec", None),
    ("amlhpc_gpu_pinning", [None], "nccl", None),  # vm_size is optional
])
def test_a_lookup_imports_no_logic_and_a_call_imports_its_own(name, args, module, result):
    got = probe(name, args)
    assert got["found"]
    assert got["looked_up"] == [], got["looked_up"]
    assert module in got["called"]
    assert not {"health", "report", "report_html", "nccl", "inventory_checks"} & set(got["called"]) - {module}
    if result is not None:
        assert got["result"] == result
