"""The checkout is the collection amlhpc.azureml: every call of our content is fully
qualified, plugins import module_utils by the collection's name, nothing in plugins/ touches
sys.path, and Ansible resolves the names from the checkout as ansible.cfg configures it."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fqcn_sweep", ROOT / "tests" / "sanity" / "fqcn_sweep.py")
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)


def test_nothing_left_for_the_sweep():
    """Short names, ansible.module_utils.amlhpc imports, sys.path in plugins/: none."""
    findings: list[str] = []
    for path in sweep.files():
        text = path.read_text(encoding="utf-8")
        if sweep.rewrite(path, text) != text:
            findings.append(str(path.relative_to(ROOT)))
        findings.extend(sweep.problems(path, text))
    assert findings == [], "run tests/sanity/fqcn_sweep.py: " + ", ".join(findings)
    # The sanity ignores are exactly the checks that do not apply to our plugins.
    assert sweep.IGNORE_FILE.read_text() == sweep.ignores()


def test_the_sweep_rewrites_short_names(tmp_path, monkeypatch):
    """The rules themselves, on text as another branch would bring it."""
    play = ("- name: Job\n  aml_job:\n    backend: local\n"
            "- name: Roles\n  ansible.builtin.include_role:\n    name: beeond\n"
            "- name: Facts\n  nvme_raid_facts:\n"
            "  vars:\n    x: \"{{ hostvars | amlhpc_cluster_nodes(groups['all']) }}\"\n"
            "    sas: \"{{ lookup('blob_sas', url) }}\"\n")
    out = sweep.rewrite(ROOT / "roles" / "x" / "tasks" / "main.yml", play)
    assert "amlhpc.azureml.aml_job:" in out and "name: amlhpc.azureml.beeond" in out
    assert "amlhpc.azureml.nvme_raid_info:" in out
    assert "| amlhpc.azureml.amlhpc_cluster_nodes(" in out and "lookup('amlhpc.azureml.blob_sas'" in out
    assert sweep.rewrite(ROOT / "roles" / "x" / "tasks" / "main.yml", out) == out  # idempotent
    inv = sweep.rewrite(ROOT / "inventory" / "a.azureml_compute.yml", "plugin: azureml_compute\n")
    assert inv == "plugin: amlhpc.azureml.azureml_compute\n"
    plugin = ("import os\nimport sys\n\n_MODULE_UTILS = os.path.join(os.path.dirname(__file__), 'module_utils')\n"
              "if _MODULE_UTILS not in sys.path:\n    sys.path.insert(0, _MODULE_UTILS)\n\n"
              "from amlhpc.staging.shards import plan_shards  # noqa: E402\n")
    out = sweep.rewrite(ROOT / "plugins" / "filter" / "x.py", plugin)
    assert out.startswith(sweep.HEADER)
    assert out[len(sweep.HEADER):].strip() == ("from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.shards import plan_shards")
    mod = "from ansible.module_utils.amlhpc.nodes.nvme import x\n"
    assert sweep.rewrite(ROOT / "plugins" / "modules" / "m.py", mod) == sweep.HEADER + (
        "from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nvme import x\n")
    assert sweep.problems(ROOT / "plugins" / "filter" / "x.py", plugin)
    cfg = sweep.rewrite(ROOT / "ansible.cfg", "[inventory]\nenable_plugins = azureml_compute, host_list\n")
    assert cfg == "[inventory]\nenable_plugins = amlhpc.azureml.azureml_compute, host_list\n"
    inv_plugin = sweep.rewrite(ROOT / "plugins" / "inventory" / "azureml_compute.py",
                               'DOCUMENTATION = """\n    choices: [azureml_compute]\n"""\n    NAME = "azureml_compute"\n')
    assert "choices: [amlhpc.azureml.azureml_compute]" in inv_plugin and 'NAME = "amlhpc.azureml.azureml_compute"' in inv_plugin


def test_collection_metadata():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == ("amlhpc", "azureml")
    assert galaxy["license"] == ["MIT"] and (ROOT / "LICENSE").read_text().startswith("MIT License")
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == ">=2.18.0,<2.22.0"  # tests/unit/test_core_range.py keeps the rest in step
    assert not any(p.is_symlink() for p in ROOT.glob("workload/**/*")), "the workload keeps no link to module_utils"


def test_every_filter_is_documented():
    """ansible-doc -t filter amlhpc.azureml.<name> renders from plugins/filter/<name>.yml."""
    missing = [n for n in sweep.names("filter") if not (ROOT / "plugins" / "filter" / f"{n}.yml").is_file()]
    assert missing == []
    doc = ansible_cli("ansible-doc")
    names = [f"amlhpc.azureml.{n}" for n in sweep.names("filter")]
    res = subprocess.run([doc, "-t", "filter", "--json", *names], cwd="/", capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")), check=False)
    assert res.returncode == 0, res.stderr
    import json
    docs = json.loads(res.stdout)
    for name in names:
        assert docs[name]["doc"]["short_description"] and docs[name]["examples"], name


def test_ansible_resolves_our_names_from_the_checkout():
    """What site.yml needs: the modules, the filters, the lookup, the inventory plugin and
    the roles by FQCN, with nothing but the project's ansible.cfg."""
    doc = ansible_cli("ansible-doc")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    res = subprocess.run([doc, "-t", "module", "-l", "amlhpc.azureml"], cwd="/", capture_output=True,
                         text=True, timeout=120, env=env, check=False)
    assert res.returncode == 0, res.stderr
    listed = {line.split()[0] for line in res.stdout.splitlines() if line.strip()}
    assert {f"amlhpc.azureml.{m}" for m in sweep.names("modules")} <= listed
    for kind, names in (("filter", sweep.names("filter")), ("lookup", sweep.names("lookup")),
                        ("inventory", sweep.names("inventory")), ("role", sweep.names("roles"))):
        res = subprocess.run([doc, "-t", kind, "-l", "amlhpc.azureml"], cwd="/", capture_output=True,
                             text=True, timeout=120, env=env, check=False)
        assert res.returncode == 0, (kind, res.stderr)
        for name in names:
            assert f"amlhpc.azureml.{name}" in res.stdout, (kind, name, res.stdout)


class _Spec(Exception):
    pass


def _argument_spec(module_name: str, monkeypatch) -> dict:
    """The argument spec a module hands to AnsibleModule (the module stops right there)."""
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "plugins" / "modules" / f"{module_name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def capture(**kwargs):
        raise _Spec(kwargs["argument_spec"])

    monkeypatch.setattr(mod, "AnsibleModule", capture)
    try:
        mod.main()
    except _Spec as spec:
        return spec.args[0]
    raise AssertionError(f"{module_name}.main() built no AnsibleModule")


def test_the_azure_auth_options_are_written_once(monkeypatch):
    """aml_job and aml_compute_cluster take the workspace and credential options from
    aml_nodes.auth_argument_spec (the doc fragment azure_auth documents them), not from a copy."""
    from amlhpc.azure.aml_nodes import auth_argument_spec
    shared = auth_argument_spec()
    job = _argument_spec("aml_job", monkeypatch)
    cluster = _argument_spec("aml_compute_cluster", monkeypatch)
    assert {k: job[k] for k in shared} == shared
    assert {k: cluster[k] for k in shared} == auth_argument_spec(workspace_required=True)
    assert cluster["resource_group"]["required"] and cluster["workspace_name"]["required"]
    # One dict per call: a module that changes its copy changes nobody else's.
    assert auth_argument_spec()["resource_group"] is not auth_argument_spec()["resource_group"]


def test_the_pure_logic_imports_no_ansible_at_load_time():
    """module_utils/amlhpc is imported by the workload, whose venv has no Ansible: a module-level
    `import ansible...` there breaks training (and the workload tier) on import."""
    import ast
    found = []
    for path in sorted((ROOT / "plugins" / "module_utils" / "amlhpc").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "ansible" or n.startswith("ansible.")]
    assert found == []


LONGEST = 650  # lines: issue 47's "no file over about 600 lines", with room for a few lines of change


def test_no_plugin_file_is_longer_than_a_reader_can_hold():
    """Every Python file under plugins/ is at most LONGEST lines: a file that grows past it is
    split by concern (pair_gate.py's reporting into pair_gate_report.py), and an inventory or
    module's DOCUMENTATION says what each option does while docs/ tells the engineering story."""
    long = {str(path.relative_to(ROOT)): n for path in sorted((ROOT / "plugins").rglob("*.py"))
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > LONGEST}
    assert long == {}, f"split these by concern (at most {LONGEST} lines each): {long}"


def _pins(path: Path) -> dict[str, str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {canonicalize_name(name): version for name, version
            in (line.split("==", 1) for line in lines if line and not line.startswith("-"))}


def _requirement_lines(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def _ranges(*paths: Path) -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for path in paths for r in map(Requirement, _requirement_lines(path))}


RANGES = (ROOT / "requirements.txt", ROOT / "requirements-sdk-v1.txt")
NEWEST = ROOT / "constraints.txt"
OLDEST = ROOT / "tests" / "unit" / "constraints.txt"


def test_what_users_install_is_ranges_each_with_its_reason():
    """requirements.txt (and requirements-sdk-v1.txt, SDK v1 apart: it cannot share an environment
    with azure.azcollection) say the versions the collection supports: `name>=oldest,<next major`,
    never a pin, and the comment above each line says why that oldest. The `ansible` bundle is the
    project's own (requirements-test.txt), not a requirement of the collection."""
    for path in RANGES:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if not line.strip() or line.startswith("#"):
                continue
            req = Requirement(line)
            specs = sorted((s.operator, s.version) for s in req.specifier)
            assert [spec[0] for spec in specs] == ["<", ">="], f"{path.name}: {line} is not a range >=oldest,<next major"
            oldest, upper = specs[1][1], specs[0][1]
            assert upper == str(Version(oldest).major + 1), f"{path.name}: {line}: the upper bound is the next major"
            assert lines[i - 1].startswith("#"), f"{path.name}: {line} has no comment above it saying why {oldest}"
        assert "ansible" not in _ranges(path) and "ansible-core" not in _ranges(path), path.name
    assert re.fullmatch(r"14\.\d+\.\d+", _pins(ROOT / "requirements-test.txt")["ansible"])


def test_every_range_is_pinned_at_its_newest_and_its_oldest():
    """constraints.txt pins what .venv has (make setup: the newest tested), tests/unit/constraints.txt
    the lower bounds (ansible-test units on ansible-core 2.18: the oldest tested); each pin inside its
    range, one pin for each package of the ranges and nothing else."""
    ranges = _ranges(*RANGES)
    for path in (NEWEST, OLDEST):
        pins = _pins(path)
        assert sorted(pins) == sorted(ranges), f"{path.relative_to(ROOT)} pins exactly the packages of the ranges"
        for name, version in pins.items():
            assert ranges[name].specifier.contains(version, prereleases=True), (str(path.relative_to(ROOT)), name, version)
    lower = {name: next(s.version for s in req.specifier if s.operator == ">=") for name, req in ranges.items()}
    assert _pins(OLDEST) == lower


def test_this_environment_holds_one_of_the_two_pin_sets():
    """.venv has constraints.txt's versions; another environment running the unit tests
    (ansible-test units' venv, .venv-core218) has the one or the other, never a mix."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    have = {name: installed(name) for name in _ranges(*RANGES)}
    if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
        assert have == _pins(NEWEST), "run make setup: .venv is not at constraints.txt's pins"
    else:
        assert have in (_pins(NEWEST), _pins(OLDEST)), have


def test_ansible_test_units_installs_the_ranges_at_their_oldest():
    """tests/unit/requirements.txt (ansible-test units reads it alone: no -r includes) repeats the
    ranges of requirements.txt and requirements-sdk-v1.txt, and ansible-test installs them under
    tests/unit/constraints.txt, the lower bounds; besides them the test-only packages the unit
    tests import, at requirements-test.txt's versions."""
    units = _requirement_lines(ROOT / "tests" / "unit" / "requirements.txt")
    ranges = [line for path in RANGES for line in _requirement_lines(path)]
    assert units[:len(ranges)] == ranges
    test = _pins(ROOT / "requirements-test.txt")
    assert units[len(ranges):] == [f"{name}=={test[name]}" for name in ("hypothesis", "mitogen")]


def test_the_oldest_core_venv_has_the_oldest_supported_core_and_the_oldest_sdks():
    """requirements-core218.txt (.venv-core218, make test-oldest-core): an exact `ansible` 11
    bundle (ansible-core 2.18, the floor of meta/runtime.yml's requires_ansible), and besides it
    tests/unit/requirements.txt under tests/unit/constraints.txt (the ranges at their oldest) and
    requirements-test.txt's pytest, so the unit tests and the local default run there as
    ansible-test units runs them."""
    lines = [line.split("#", 1)[0].strip() for line in (ROOT / "requirements-core218.txt").read_text().splitlines()]
    lines = [line for line in lines if line]
    assert "-r tests/unit/requirements.txt" in lines and "-c tests/unit/constraints.txt" in lines
    pins = dict(line.split("==", 1) for line in lines if "==" in line)
    assert re.fullmatch(r"11\.\d+\.\d+", pins.pop("ansible"))
    assert pins == {"pytest": _pins(ROOT / "requirements-test.txt")["pytest"]}
