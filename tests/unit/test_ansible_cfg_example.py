"""docs/ansible.cfg.example, the settings an installed user's project needs, as ansible-core reads
it (ansible-config): a broken inventory fails the run, only the collection's inventory plugins try
a source, modules are pipelined on every connection, host keys are checked, caches stay in the
project; and the project's own ansible.cfg agrees with it on each of these."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]

EXPECTED = {
    "INVENTORY_UNPARSED_IS_FAILED": "True",
    "INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
    "INVENTORY_ENABLED": "['amlhpc.azureml.azureml_compute', 'amlhpc.azureml.amlhpc_yaml', 'host_list']",
    "ANSIBLE_PIPELINING": "True",
    "HOST_KEY_CHECKING": "True",
}


def dump(cfg: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    res = subprocess.run([ansible_cli("ansible-config"), "dump", "--only-changed", "-t", "all"], cwd=cfg.parent,
                         env={**env, "ANSIBLE_CONFIG": str(cfg)}, capture_output=True, text=True, timeout=120,
                         check=True)
    out = {}
    for line in res.stdout.splitlines():
        if "(" in line and "=" in line:
            key, rest = line.split("(", 1)
            out.setdefault(key.strip(), rest.split("=", 1)[1].strip())
    return out


def test_the_example_sets_what_the_collection_expects(tmp_path):
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text((ROOT / "docs" / "ansible.cfg.example").read_text())
    got = dump(cfg)
    assert {k: got.get(k) for k in EXPECTED} == EXPECTED
    # Its caches are in the project folder.
    for key in ("DEFAULT_LOCAL_TMP",):
        assert got[key].startswith(str(tmp_path)), (key, got[key])


def test_the_projects_own_ansible_cfg_agrees():
    got = dump(ROOT / "ansible.cfg")
    assert {k: got.get(k) for k in EXPECTED} == EXPECTED
