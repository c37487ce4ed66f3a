"""The node playbooks import nvme_raid, gpu_clocks and nccl without Ansible's own per-host
argument check (rolespec_validate: false, one host-task per node less); the role's first
task makes the same check instead. A variable of the wrong type still stops the role
before it does anything, with Ansible's message naming the variable."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
_spec = importlib.util.spec_from_file_location("role_args", ROOT / "plugins" / "plugin_utils" / "role_args.py")
role_args = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_args)


@pytest.mark.parametrize(("playbook", "bad", "named"), [
    ("playbooks/nvme_raid.yml", "nvme_raid_force=maybe", "nvme_raid_force"),
    ("playbooks/gpu_clocks.yml", "gpu_clocks_graphics_mhz=fast", "gpu_clocks_graphics_mhz"),
    ("playbooks/nccl.yml", "nccl_conf_settings=notadict", "nccl_conf_settings"),
])
def test_a_wrong_type_fails_the_role_before_it_acts(tmp_path, playbook, bad, named):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  children:\n    aml_nodes:\n      hosts:\n        n0:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
        "          ansible_become: false\n          amlhpc_profile: azureml\n")
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), playbook, "--check", "-e", bad], cwd=ROOT,
                         capture_output=True, text=True, timeout=180, check=False)
    assert res.returncode != 0, res.stdout
    assert "Validation of arguments failed" in res.stdout, res.stdout[-3000:]
    assert named in res.stdout
    recap = re.search(r"^n0\s+: (.*)$", res.stdout.split("PLAY RECAP")[-1], re.M).group(1)
    assert "failed=1" in recap and "changed=0" in recap, recap


@pytest.mark.parametrize("role", sorted(p.parent.parent.name for p in ROOT.glob("roles/*/meta/argument_specs.yml")))
def test_the_spec_read_with_libyaml_is_ansibles(role):
    class Role:  # what role_argspecs reads of a Role
        _role_path = str(ROOT / "roles" / role)

        def _get_role_argspecs(self):
            raise AssertionError("the file is there: Ansible's loader is not needed")

    ansible_read = DataLoader().load_from_file(str(ROOT / "roles" / role / "meta" / "argument_specs.yml"))["argument_specs"]
    assert role_args.role_argspecs(Role()) == ansible_read
    assert set(ansible_read) >= {"main"}
