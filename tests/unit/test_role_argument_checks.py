"""The node playbooks import nvme_raid, gpu_clocks and nccl without Ansible's own per-host
argument check (rolespec_validate: false, one host-task per node less); the role's first
task makes the same check instead. A variable of the wrong type still stops the role
before it does anything, with Ansible's message naming the variable."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")
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


# --- The check looks into a variable only as deep as the role's spec does -------------------
# stage_plan (the azcopy_shards result every node of the play holds) lists every blob of the
# data set. Templating it whole in every node's check cost O(files of the whole data set) of
# controller CPU per node (2.3 s per node for 65,536 files, bench/role_check_bench.py), for a
# spec that only asks "is it a dict".

STAGE = ROOT / "roles" / "stage"


class _StageRole:
    """What role_argument_errors reads of a Role imported with rolespec_validate: false."""
    _should_validate = False
    _from_files: dict = {}
    _role_path = str(STAGE)

    @staticmethod
    def get_name() -> str:
        return "amlhpc.azureml.stage"


class _RecordingTemplar:
    """Ansible's own Templar, keeping what it was asked to template."""

    def __init__(self, variables: dict) -> None:
        from ansible.template import Templar
        self.real = Templar(loader=DataLoader(), variables=variables)
        self.asked: list = []

    def template(self, value, **kwargs):
        self.asked.append(value)
        return self.real.template(value, **kwargs)

    def copy_with_new_env(self, **kwargs) -> "_RecordingTemplar":
        copy = _RecordingTemplar.__new__(_RecordingTemplar)
        copy.real, copy.asked = self.real.copy_with_new_env(**kwargs), self.asked
        return copy


def _stage_vars(**extra) -> dict:
    """The stage role's defaults as Ansible loads them (their templates trusted), then ``extra``."""
    return {**DataLoader().load_from_file(str(STAGE / "defaults" / "main.yml"), trusted_as_template=True), **extra}


def _plan(files: int) -> dict:
    sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
    from amlhpc.shards import Blob, plan_shards, plan_summary
    blobs = [Blob(name=f"train/univ_{i:06d}_{i % 64:03d}.tfrecord.gz", size=1000 + i, raw_size=4000 + i,
                  content_encoding="gzip") for i in range(files)]
    return plan_summary(plan_shards([f"n{i}" for i in range(4)], "suffix", blobs), "suffix")


def _check(task_vars: dict) -> tuple[dict | None, _RecordingTemplar]:
    templar = _RecordingTemplar(task_vars)
    action = type("Action", (), {"_task": type("Task", (), {"_role": _StageRole()})(), "_templar": templar})()
    return role_args.role_argument_errors(action, task_vars), templar


def _holds(value, target) -> bool:
    if value is target:
        return True
    if isinstance(value, dict):
        return any(_holds(v, target) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds(v, target) for v in value)
    return False


def test_a_node_s_check_does_not_walk_the_whole_plan():
    plan = _plan(2048)
    result, templar = _check(_stage_vars(stage_plan=plan, stage_account_url="http://127.0.0.1:10000/a"))
    assert result is None
    assert not any(_holds(v, plan) or _holds(v, plan["shards"]) for v in templar.asked), \
        "the plan went through the templar; the spec only checks that it is a dict"
    # What the check does template: the values that are templates (stage_dir is one).
    assert any(isinstance(v, str) and "beeond_mount_point" in v for v in templar.asked)


def _full_check(task_vars: dict) -> list[str]:
    """Ansible's way: every value of the role's options templated whole, then validated."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    from ansible.template import Templar
    options = role_args.role_argspecs(_StageRole())["main"]["options"]
    provided = Templar(loader=DataLoader(), variables=task_vars).template(
        {k: task_vars[k] for k in options if k in task_vars})
    return ArgumentSpecValidator(options).validate(provided, validate_role_argument_spec=True).error_messages


def _trusted(text: str):
    from ansible.template import trust_as_template
    return trust_as_template(text)


@pytest.mark.parametrize(("case", "extra"), [
    ("a plan", {"stage_plan": "PLAN"}),
    ("no plan", {}),
    ("a plan that is a string", {"stage_plan": "notadict"}),
    ("a plan that is a list", {"stage_plan": ["n0"]}),
    ("a plan from a template", {"stage_plan": "TEMPLATE", "my_plan": "PLAN"}),
    ("a model with a template inside", {"stage_model": {"nic_gbps": "TEMPLATE-INT"}, "gbps": 40}),
    ("a model that is a list", {"stage_model": [1, 2]}),
    ("a package list of dicts", {"stage_azcopy_packages": [{"name": "x"}]}),
    ("a wrong int", {"stage_cap_mbps": "fast"}),
    ("a wrong bool beside a plan", {"stage_prune": "maybe", "stage_plan": "PLAN"}),
])
def test_the_check_gives_ansible_s_verdict(case, extra):
    plan = _plan(64)
    swap = {"PLAN": plan, "TEMPLATE": _trusted("{{ my_plan }}"), "TEMPLATE-INT": _trusted("{{ gbps }}")}
    task_vars = _stage_vars(**{k: swap.get(v, v) if isinstance(v, str) else v for k, v in extra.items()})
    result = _check(task_vars)[0]
    expected = _full_check(task_vars)
    assert (result or {}).get("argument_errors", []) == expected, case
    assert (result is None) == (not expected), case


# --- The spec is read once, in the main process, before the workers fork ---------------------
# The template_cache callback reads a role's spec when the role's first task starts
# (role_args.read_before_fork); every node's worker, forked after it, finds it read. Before,
# each worker parsed meta/argument_specs.yml again (1-3 ms of CPU per node and role task).

def _role_copy(tmp_path: Path, role: str, validate: bool):
    (tmp_path / role / "meta").mkdir(parents=True)
    spec = tmp_path / role / "meta" / "argument_specs.yml"
    spec.write_text((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())

    class Role:
        _role_path = str(tmp_path / role)
        _should_validate = validate

        def _get_role_argspecs(self):
            raise AssertionError("the spec file was read again")

    return Role(), spec


def _in_a_forked_worker(work) -> str:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            try:
                answer = json.dumps(work())
            except Exception as exc:  # pylint: disable=broad-exception-caught
                answer = json.dumps(f"{type(exc).__name__}: {exc}")
            os.write(write, answer.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as out:
        result = json.loads(out.read())
    os.waitpid(pid, 0)
    return result


def test_a_spec_read_before_the_fork_is_not_read_again_in_the_worker(tmp_path):
    role, spec = _role_copy(tmp_path, "nccl", validate=False)
    expected = DataLoader().load_from_file(str(spec))["argument_specs"]
    role_args.read_before_fork(role)
    spec.unlink()  # a worker that reads the file again finds none and asks Ansible's loader
    assert _in_a_forked_worker(lambda: role_args.role_argspecs(role)) == json.loads(json.dumps(expected))


def test_a_role_that_ansible_checks_itself_is_not_read_before_the_fork(tmp_path):
    role, spec = _role_copy(tmp_path, "nccl", validate=True)
    role_args.read_before_fork(role)
    spec.unlink()
    assert _in_a_forked_worker(lambda: role_args.role_argspecs(role)) == "AssertionError: the spec file was read again"


def test_a_spec_that_does_not_parse_fails_in_the_task_not_in_the_callback(tmp_path):
    role, spec = _role_copy(tmp_path, "nccl", validate=False)
    spec.write_text("argument_specs: [unclosed\n")
    role_args.read_before_fork(role)  # says nothing: the worker's read fails, in the task
    assert _in_a_forked_worker(lambda: role_args.role_argspecs(role)).startswith(("ParserError", "ScannerError"))


_PLUGIN_UTILS = "ansible_collections.amlhpc.azureml.plugins.plugin_utils"


def _callback():
    """(the template_cache callback module, the role_args and template_cache it calls), imported
    by their collection names, as Ansible imports them."""
    import warnings

    from ansible.plugins.loader import init_plugin_loader
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "already configured" where another test did it
        init_plugin_loader([str(ROOT / ".cache" / "collections")])
    sys.modules.setdefault(f"{_PLUGIN_UTILS}.role_args", role_args)
    callback = importlib.import_module("ansible_collections.amlhpc.azureml.plugins.callback.template_cache")
    return callback, sys.modules[f"{_PLUGIN_UTILS}.role_args"], sys.modules[f"{_PLUGIN_UTILS}.template_cache"]


def test_the_template_cache_callback_reads_the_spec_at_the_role_s_first_task(tmp_path):
    callback, args, cache = _callback()
    role, argspec = _role_copy(tmp_path, "gpu_clocks", validate=False)
    role.get_default_vars = role.get_vars = dict
    task = type("Task", (), {"args": {}, "_role": role, "get_vars": dict})()
    plugin = callback.CallbackModule()
    try:
        plugin.v2_playbook_on_task_start(task, False)
    finally:
        cache.uninstall()
        gc.unfreeze()
    argspec.unlink()
    assert "main" in args.role_argspecs(role)


def test_the_workers_of_a_task_inherit_the_main_process_objects_frozen():
    """At each task start the callback freezes what the main process holds (gc.freeze): a
    worker's collection then does not walk, and copy, the inherited heap."""
    callback, _args, cache = _callback()
    held = [["held by the main process", i] for i in range(1000)]  # lists: always tracked
    ids = {id(d) for d in held}
    task = type("Task", (), {"args": {}, "_role": None, "get_vars": dict})()
    plugin = callback.CallbackModule()
    try:
        plugin.v2_playbook_on_task_start(task, False)
        walked = _in_a_forked_worker(lambda: sum(1 for o in gc.get_objects() if id(o) in ids))
        # The next play's start hands them back to the main process's collector.
        plugin.v2_playbook_on_play_start(type("Play", (), {"get_variable_manager": lambda self: None,
                                                           "get_vars": lambda self: {}})())
        back = sum(1 for o in gc.get_objects() if id(o) in ids)
    finally:
        cache.uninstall()
        gc.unfreeze()
    assert walked == 0
    assert back == len(held)
