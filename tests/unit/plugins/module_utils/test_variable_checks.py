"""Every role variable checked before anything changes (amlhpc.validate.variable_checks): the roles a run
reaches, the argument specs through Ansible's validator, the rules between variables."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from amlhpc.validate.variable_checks import (
    UNSET,
    INVENTORY_HOST_VARS,
    cluster_name_problem,
    consequential,
    names_set_in,
    path_problem,
    roles_to_check,
    spec_problems,
    unknown_variable_findings,
    variable_problems,
    vm_size_problem,
)

ROOT = Path(__file__).resolve().parents[4]
ROLES = yaml.safe_load((ROOT / "roles" / "validate" / "defaults" / "main.yml").read_text())["validate_roles"]
SPECS = {r["role"]: yaml.safe_load((ROOT / "roles" / r["role"] / "meta" / "argument_specs.yml").read_text())[
    "argument_specs"]["main"]["options"] for r in ROLES}


def test_every_role_with_an_argument_spec_is_checked():
    with_spec = {p.parent.parent.name for p in (ROOT / "roles").glob("*/meta/argument_specs.yml")}
    assert {r["role"] for r in ROLES} == with_spec


def test_the_roles_a_run_reaches_follow_its_tags_and_the_switches():
    assert roles_to_check(ROLES, ["all"], [], {}) == [
        "aml_cluster", "ssh_trust", "nvme_raid", "gpu_clocks", "nccl", "healthcheck", "prepare_dataset", "stage",
        "submit", "node_loss", "validate"]
    assert roles_to_check(ROLES, ["stage"], [], {"local_blob_enabled": True}) == ["local_blob", "stage", "node_loss", "validate"]
    assert roles_to_check(ROLES, ["all"], ["nodes", "submit"], {"aml_cluster_manage": "false"}) == [
        "healthcheck", "prepare_dataset", "stage", "validate"]
    assert "beeond" in roles_to_check(ROLES, ["all"], [], {"beeond_enabled": True})
    assert "beeond" not in roles_to_check(ROLES, ["all"], [], {"beeond_enabled": UNSET})


def test_the_specs_refuse_with_ansible_s_own_words_and_name_the_role():
    (sentence,) = spec_problems("healthcheck", SPECS["healthcheck"], {"healthcheck_on_failure": "exlcude"})
    assert sentence.startswith("healthcheck: value of healthcheck_on_failure must be one of: stop, exclude, got: exlcude")
    assert "roles/healthcheck/meta/argument_specs.yml" in sentence
    (sentence,) = spec_problems("submit", SPECS["submit"], {"submit_process_count_per_node": "eight"})
    assert "submit_process_count_per_node" in sentence and "int" in sentence
    # Required options are the roles' defaults' business (stage_account_url comes from them).
    assert spec_problems("stage", SPECS["stage"], {"stage_mode": "suffix"}) == []
    assert spec_problems("stage", SPECS["stage"], {}) == []


def test_a_no_log_value_is_never_shown():
    spec = {"secret_choice": {"type": "str", "choices": ["a", "b"], "no_log": True}}
    (sentence,) = spec_problems("r", spec, {"secret_choice": "hunter2-SECRET"})
    assert "hunter2-SECRET" not in sentence


def test_the_issue_s_bad_inputs_each_get_one_sentence():
    values = {"healthcheck_spare_nodes": 4, "stage_cap_mbps": -5, "submit_process_count_per_node": -1,
              "stage_dir": "relative/x", "aml_cluster_name": "my cluster", "aml_cluster_vm_size": "Standard ND96",
              "stage_timeout": UNSET}
    got = variable_problems(values, SPECS, node_count=4)
    assert len(got["problems"]) == 6, got
    assert got["problems"][0].startswith("healthcheck_spare_nodes is 4 but the run has 4 node(s)")
    assert variable_problems({"healthcheck_spare_nodes": 3}, SPECS, node_count=4)["problems"] == []
    assert variable_problems({"healthcheck_spare_nodes": 3}, SPECS, node_count=None)["problems"] == []


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=string.ascii_letters + string.digits + "-_ .é", max_size=20))
def test_compute_names_follow_azureml_s_rule(name):
    allowed = set(string.ascii_letters + string.digits + "-")
    ok = (2 <= len(name) <= 16 and set(name) <= allowed and name[0] in string.ascii_letters
          and name[-1] in string.ascii_letters + string.digits)
    assert (cluster_name_problem(name) is None) == (ok or name == "")


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_no_number_of_any_spec_may_be_negative(data):
    numeric = sorted(n for options in SPECS.values() for n, o in options.items() if o.get("type") in ("int", "float"))
    name = data.draw(st.sampled_from(numeric))
    value = data.draw(st.integers(-10**6, -1) | st.floats(-1e6, -1e-3))
    problems = variable_problems({name: value}, SPECS)["problems"]
    assert len(problems) == 1 and problems[0].startswith(f"{name} is ")


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_path_variable_must_be_absolute(data):
    paths = sorted(n for options in SPECS.values() for n, o in options.items()
                   if o.get("type") == "path" or n.endswith(("_dir", "_file", "_path", "_mount_point")))
    name = data.draw(st.sampled_from(paths))
    rel = data.draw(st.lists(st.text(alphabet=string.ascii_letters + "._-", min_size=1, max_size=8), min_size=2,
                             max_size=4).map("/".join))
    assert path_problem(name, rel) and f"{name} '{rel.strip()}' is a relative path" in path_problem(name, rel)
    assert path_problem(name, "/" + rel) is None and path_problem(name, "~/" + rel) is None


@pytest.mark.parametrize(("size", "problem", "warning"), [
    ("Standard_ND96asr_v4", False, False), ("STANDARD_ND96ASR_V4", False, False), ("standard_nd96asr_v4", False, False),
    ("Standard_ND192isr_H300_v9", False, True), ("Standard ND96", True, False), ("ND96asr_v4", True, False), ("", False, False)])
def test_vm_size_names(size, problem, warning):
    got = vm_size_problem(size)
    assert (got[0] is not None, got[1] is not None) == (problem, warning)


# --- Every variable name checked (issue 49 item 3) ---------------------------------------------

KNOWN = sorted({n for options in SPECS.values() for n in options})
TYPES = {n: o.get("type", "str") for options in SPECS.values() for n, o in options.items()}


def _one_edit(name: str, data) -> str:
    """``name`` with one edit a hand makes: a letter dropped, doubled, swapped with the next, or
    replaced, or one added."""
    i = data.draw(st.integers(0, len(name) - 1))
    kind = data.draw(st.sampled_from(["drop", "double", "swap", "replace", "insert"]))
    letter = data.draw(st.sampled_from(string.ascii_lowercase + "_"))
    if kind == "drop":
        return name[:i] + name[i + 1:]
    if kind == "double":
        return name[:i] + name[i] + name[i:]
    if kind == "swap" and i + 1 < len(name):
        return name[:i] + name[i + 1] + name[i] + name[i + 2:]
    if kind == "replace":
        return name[:i] + letter + name[i + 1:]
    return name[:i] + letter + name[i:]


def _within_one_edit(a: str, b: str) -> bool:
    """The oracle, apart from difflib: a and b differ by at most one drop, insert, replace or swap."""
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def _findings(names, where=None):
    return unknown_variable_findings(names, SPECS, INVENTORY_HOST_VARS, where=where)


def test_the_issue_s_typos_are_named_with_the_fix():
    out = _findings(["stage_dri", "submit_proces_count_per_node"],
                    where={"stage_dri": ["inventory/mine/group_vars/all.yml"]})
    assert out["problems"] == [
        "stage_dri is no variable of any role (set in inventory/mine/group_vars/all.yml), so the role would use its "
        "default stage_dir, which decides where data is written or what is trusted: did you mean stage_dir? Rename it"]
    assert len(out["warnings"]) == 1
    assert "submit_proces_count_per_node is no variable of any role" in out["warnings"][0]
    assert "did you mean submit_process_count_per_node?" in out["warnings"][0]
    assert "look in the extra vars (-e)" in out["warnings"][0]


def test_a_role_prefix_without_a_close_name_is_a_warning_naming_the_spec():
    out = _findings(["stage_something_else_entirely"])
    assert out["problems"] == []
    assert out["warnings"] == [
        "stage_something_else_entirely has role stage's prefix but is no variable of it (set where no group_vars or "
        "host_vars file beside the inventory or the playbooks says: look in the extra vars (-e), the inventory file "
        "and the play's vars) and is ignored: roles/stage/meta/argument_specs.yml lists what the role reads; rename "
        "or remove it"]


def test_ansible_s_names_and_the_inventory_plugin_s_host_vars_are_no_typo():
    names = ["inventory_hostname", "groups", "group_names", "hostvars", "playbook_dir", "omit", "ansible_host",
             "ansible_ssh_common_args", "_validate_switches", *INVENTORY_HOST_VARS]
    assert _findings(names) == {"problems": [], "warnings": []}


def test_the_inventory_plugin_s_host_vars_are_those_its_documentation_lists():
    doc = (ROOT / "plugins" / "inventory" / "azureml_compute.py").read_text()
    start = doc.index("Host vars:")
    block = doc[start:doc.index("\n  - ", start)]  # that description item, to the next one
    import re
    assert set(re.findall(r"C\((aml_[a-z_]+)\)", block)) == INVENTORY_HOST_VARS


def test_the_shipped_inventories_and_plays_set_no_unknown_name():
    names = set()
    inventory = ROOT / "inventory"
    for path in list(inventory.rglob("group_vars/**/*.yml")) + list(inventory.rglob("host_vars/**/*.yml")):
        names |= set(yaml.safe_load(path.read_text()) or {})
    known = set(INVENTORY_HOST_VARS)
    for path in list((ROOT / "roles").glob("*/tasks/*.yml")) + list((ROOT / "playbooks").rglob("*.yml")):
        known |= names_set_in(yaml.safe_load(path.read_text()))
    for path in list((ROOT / "roles").glob("*/defaults/*.yml")) + list((ROOT / "roles").glob("*/vars/*.yml")):
        known |= set(yaml.safe_load(path.read_text()) or {})
    assert unknown_variable_findings(names | known, SPECS, known) == {"problems": [], "warnings": []}


def test_the_names_a_play_sets_are_found_at_any_depth():
    play = [{"hosts": "x", "vars": {"a_var": 1}, "tasks": [
        {"block": [{"ansible.builtin.set_fact": {"b_fact": 1, "cacheable": True}, "register": "c_reg"}]},
        {"ansible.builtin.debug": None, "loop_control": {"loop_var": "d_item"}, "vars": {"e_var": 2}}]}]
    assert names_set_in(play) == {"a_var", "b_fact", "c_reg", "d_item", "e_var"}


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(KNOWN))
def test_a_known_name_never_warns(name):
    assert _findings([name]) == {"problems": [], "warnings": []}


@settings(max_examples=500, deadline=None)
@given(name=st.sampled_from(KNOWN), data=st.data())
def test_any_one_edit_typo_of_a_known_name_is_caught_and_the_name_suggested(name, data):
    typo = _one_edit(name, data)
    assume(typo not in KNOWN and typo not in INVENTORY_HOST_VARS and not typo.startswith(("_", "ansible_")))
    # Where two known names are one edit from the typo, either is a right guess.
    candidates = [k for k in KNOWN if _within_one_edit(typo, k)]
    out = _findings([typo])
    found = out["problems"] + out["warnings"]
    assert len(found) == 1, (typo, out)
    assert any(f"did you mean {k}?" in found[0] for k in candidates), (typo, candidates, found)
    suggested = next(k for k in candidates if f"did you mean {k}?" in found[0])
    assert bool(out["problems"]) == consequential(suggested, TYPES.get(suggested, "")), (typo, out)


def test_what_a_typo_stops_the_run_for():
    for name in ("stage_dir", "stage_azcopy_path", "submit_checkpoint_sas_file", "stage_sas", "stage_auth",
                 "ssh_trust_verify", "ssh_trust_known_hosts", "stage_prune", "prepare_dataset_account_key",
                 "beeond_mount_point"):
        assert consequential(name, TYPES.get(name, "")), name
    for name in ("submit_process_count_per_node", "healthcheck_spare_nodes", "stage_stall_seconds", "nccl_enabled"):
        assert not consequential(name, TYPES.get(name, "")), name
