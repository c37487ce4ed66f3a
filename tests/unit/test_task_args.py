"""A task argument that is exactly ``{{ name }}`` is resolved as the variable's own value,
templated, without compiling a Jinja template per node (plugins/plugin_utils/task_args.py);
the role check templates each role variable once, with the ones already templated in place
(plugins/plugin_utils/role_args.py). Both give Ansible's values, with fewer templates."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROOT = Path(__file__).resolve().parents[2]
task_args = sys.modules["ansible_collections.amlhpc.azureml.plugins.plugin_utils.task_args"]  # tests/conftest.py
_spec = importlib.util.spec_from_file_location("role_args", ROOT / "plugins" / "plugin_utils" / "role_args.py")
role_args = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_args)

T = trust_as_template


@pytest.mark.parametrize(("value", "name"), [
    (T("{{ nccl_env }}"), "nccl_env"),
    (T("{{nccl_env}}"), "nccl_env"),
    ("{{ nccl_env }}", None),                 # not trusted: Ansible does not template it either
    (T("{{ nccl_env | default({}) }}"), None),  # a filter
    (T("{{ a }}{{ b }}"), None),
    (T("{{ nccl_env }} "), None),            # a space after it: Jinja gives a string
    (T(" {{ nccl_env }}"), None),
    (T("{{ omit }}"), None),
    (T("{{ hostvars['n0'] }}"), None),
    (T("{{- nccl_env -}}"), None),
    ("nccl_env", None),
    (5, None),
])
def test_only_exactly_one_trusted_name_is_handed_on(value, name):
    assert task_args.passed_variable(value) == name


def test_the_variable_s_own_value_takes_its_place_inside_dicts_and_lists():
    variables = {"smi": "nvidia-smi", "dirs": ["/opt"], "n": 3, "tmpl": T("{{ n + 1 }}")}
    assert task_args.passed_on(T("{{ smi }}"), variables) == (True, "nvidia-smi")
    done, value = task_args.passed_on({"a": T("{{ smi }}"), "b": T("{{ n | string }}"), "c": [T("{{ dirs }}"), 1]},
                                      variables)
    assert done and value == {"a": "nvidia-smi", "b": T("{{ n | string }}"), "c": [["/opt"], 1]}
    assert task_args.passed_on(T("{{ tmpl }}"), variables) == (True, variables["tmpl"])  # templated after
    assert task_args.passed_on(T("{{ missing }}"), variables) == (False, T("{{ missing }}"))  # Ansible fails it
    assert task_args.passed_on({"a": T("{{ n | string }}")}, variables)[0] is False
    assert task_args.passed_on(T("{{ h }}"), {"h": object()})[0] is False  # not a plain value: Jinja's way


def test_every_node_role_s_task_gets_ansible_s_arguments_from_fewer_templates():
    """The real Task.post_validate (what each node's worker runs) of each role's real task, both
    ways in one process (bench/task_args_bench.py)."""
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "task_args_bench.py"), "--repeat", "1", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout)
    assert {r["role"] for r in rows} == {"ssh_trust", "nvme_raid", "gpu_clocks", "nccl", "healthcheck", "stage"}
    for row in rows:
        assert row["equal"], (row["role"], row["ansible"]["args"], row["passed_on"]["args"])
        assert row["passed_on"]["compiles"] < row["ansible"]["compiles"], row
    health = next(r for r in rows if r["role"] == "healthcheck")
    args = json.loads(health["passed_on"]["args"])
    assert args["nccl_node_args"] == "-b 8G -e 8G -f 2 -c 1 -n 20"  # a chain of role variables (an A100 VM)
    assert args["tools"]["nvidia_smi"] == "nvidia-smi" and args["node_name"] == "n0"


def test_the_role_check_templates_a_chain_of_role_variables_once_with_ansible_s_values():
    from ansible._internal._templating import _engine  # the count of what Jinja compiles
    loader = DataLoader()
    options = role_args.role_argspecs(type("R", (), {"_role_path": str(ROOT / "roles" / "healthcheck")})())["main"]["options"]
    task_vars = {**loader.load_from_file(str(ROOT / "roles" / "healthcheck" / "defaults" / "main.yml"),
                                         trusted_as_template=True),
                 "aml_vm_size": "Standard_ND96isr_H100_v5", "healthcheck_fs_files": T("{{ 8 * 2 }}")}
    compiled: list = []
    original = _engine.TemplateEngine._compile_template

    def counting(engine, source, opts):
        compiled.append(source)
        return original(engine, source, opts)

    _engine.TemplateEngine._compile_template = counting
    try:
        ansible_way = {k: Templar(loader=loader, variables=task_vars).template(task_vars[k]) for k in options
                       if k in task_vars and k != "healthcheck_thresholds"}
        ansible_compiles, compiled[:] = len(compiled), []
        checked = role_args.checked_values(Templar(loader=loader, variables=task_vars), task_vars, options)
    finally:
        _engine.TemplateEngine._compile_template = original
    assert {k: v for k, v in checked.items() if k in ansible_way} == ansible_way
    assert checked["healthcheck_nccl_cluster_args"] == "-b 16G -e 16G -f 2 -g 1 -c 1 -n 20"
    assert checked["healthcheck_fs_files"] == 16
    # Each template among the role's variables compiled once (aml_vm_size's default once, not
    # once for each variable built on it).
    assert len(compiled) == len(set(compiled)) and len(compiled) < ansible_compiles, (len(compiled), ansible_compiles)


def test_a_vaulted_value_comes_out_as_ansible_gives_it(monkeypatch):
    from ansible.parsing.vault import EncryptedString, VaultLib, VaultSecret, VaultSecretsContext
    secrets = [("default", VaultSecret(b"pw"))]
    # What the CLIs do with --vault-password-file (VaultSecretsContext.initialize, once per process).
    monkeypatch.setattr(VaultSecretsContext, "_current", VaultSecretsContext(secrets))
    vaulted = EncryptedString(ciphertext=VaultLib(secrets).encrypt("s3cr3t").decode())
    loader = DataLoader()
    loader.set_vault_secrets(secrets)
    variables = {"env": {"TOKEN": vaulted, "PLAIN": "x"}, "token": vaulted}
    templar = Templar(loader=loader, variables=variables)
    assert task_args.passed_on(T("{{ token }}"), variables)[0] is False  # not a plain value: Jinja's way
    done, resolved = task_args.passed_on(T("{{ env }}"), variables)
    assert done and templar.template(resolved) == templar.template(T("{{ env }}")) == {"TOKEN": "s3cr3t", "PLAIN": "x"}
