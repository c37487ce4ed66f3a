"""Every role variable checked before anything changes (amlhpc.validate.variable_checks): the roles a run
reaches, the argument specs through Ansible's validator, the rules between variables."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from amlhpc.validate.variable_checks import (
    UNSET,
    cluster_name_problem,
    path_problem,
    roles_to_check,
    spec_problems,
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
