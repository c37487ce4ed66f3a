# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Every role variable checked before anything changes (the validate role's variables tasks).

Two kinds of check, each answering one sentence per problem that names the fix:

* each role's own ``meta/argument_specs.yml`` (types, choices, required options), run by
  ``ansible.builtin.validate_argument_spec`` for the roles this run reaches (its tags, its
  switches); :func:`spec_problems` turns its results into sentences, without the spec dump;
* rules no argument spec can say (:func:`variable_problems`): spare nodes fewer than the
  nodes, absolute paths, AzureML's rule for compute names, VM size names (an unknown one is a
  warning), and signs (no negative count, time or rate; process and node counts from 1).

Plain functions over plain data, tested directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

UNSET = "__amlhpc_unset__"

# AzureML's rule for a compute name (what the service answers for a bad one): "It can include
# letters, digits and dashes. It must start with a letter, end with a letter or digit, and be
# between 2 and 16 characters in length."
COMPUTE_NAME = re.compile(r"[A-Za-z](?:[A-Za-z0-9-]{0,14}[A-Za-z0-9])")
VM_SIZE_NAME = re.compile(r"(?i)Standard_[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*")
# VM sizes the collection knows (the GPU and HPC sizes its roles have figures for, nvme.py's
# table among them); another well-formed name is a warning, not an error.
KNOWN_VM_SIZES = frozenset(s.lower() for s in (
    "Standard_ND96asr_v4", "Standard_ND96amsr_A100_v4", "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5",
    "Standard_ND96isr_MI300X_v5", "Standard_ND128isr_NDR_GB200_v6", "Standard_ND128isr_GB300_v6",
    "Standard_ND40rs_v2", "Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4", "Standard_NC96ads_A100_v4",
    "Standard_NC40ads_H100_v5", "Standard_NC80adis_H100_v5", "Standard_NC6s_v3",
    "Standard_NC12s_v3", "Standard_NC24s_v3", "Standard_NC24rs_v3", "Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3",
    "Standard_NC16as_T4_v3", "Standard_NC64as_T4_v3", "Standard_HB120rs_v3", "Standard_HB176rs_v4",
    "Standard_HC44rs", "Standard_D4s_v3", "Standard_D8s_v3", "Standard_DS3_v2", "Standard_F16s_v2"))

# Counts that must be 1 or more (0 would run nothing); every other number of a spec must not be
# negative (sizes, counts, seconds, rates: a negative one means nothing to the role).
POSITIVE = frozenset({"submit_process_count_per_node", "submit_node_count", "aml_cluster_node_count"})
# Names of variables that hold a path (besides the options an argument spec types as path).
_PATH_NAME = re.compile(r"(_dir|_path|_file|_mount_point|_nodefile|_keyring|_conf|_known_hosts|_python|_azurite)$")
# ... of which these may name a command found on PATH (no slash at all).
_COMMAND_NAME = re.compile(r"(_python|_azurite)$")


def roles_to_check(roles: Sequence[Mapping[str, Any]], run_tags: Iterable[str] = ("all",),
                   skip_tags: Iterable[str] = (), switches: Mapping[str, Any] | None = None) -> list[str]:
    """The roles this run reaches: a tag of theirs is asked for (or every tag is) and none is
    skipped, and their switch (``aml_cluster_manage``, ``<role>_enabled``) is on.

    ``roles``: ``{"role", "tags", "switch", "default"}`` (the validate role's ``validate_roles``);
    ``switches``: the switches' values where set (others take ``default``)."""
    run, skip, switches = set(run_tags or ("all",)), set(skip_tags or ()), switches or {}
    out = []
    for entry in roles:
        tags = set(entry.get("tags") or [])
        if "never" in skip or tags & skip:
            continue
        if "all" not in run and not tags & run and "validate" not in tags:
            continue
        switch = entry.get("switch")
        if switch:
            value = switches.get(switch, UNSET)
            value = entry.get("default", True) if value in (UNSET, None, "") else value
            if not _truthy(value):
                continue
        out.append(str(entry["role"]))
    return out


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on", "y", "t")


def checkable_spec(options: Mapping[str, Any]) -> dict[str, Any]:
    """A role's options as the check before the run holds the user's values to them: without
    ``required`` and ``default`` (the role's defaults and its playbook give those when it runs;
    here only what the inventory and the extra vars set is checked)."""
    out = {}
    for name, option in options.items():
        option = {k: v for k, v in dict(option).items() if k not in ("required", "default", "description")}
        if isinstance(option.get("options"), Mapping):
            option["options"] = checkable_spec(option["options"])
        out[name] = option
    return out


def spec_problems(role: str, options: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """One sentence per value of ``values`` that ``role``'s argument spec (its ``main`` options)
    refuses (a type, a choice, an element), through Ansible's own ArgumentSpecValidator, the
    validator of validate_argument_spec; values of no_log options never shown."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    from ..arg_secrets import no_log_values
    from ..staging.azcopy_sas import redact

    spec = checkable_spec(options)
    given = {k: v for k, v in values.items() if k in spec and v != UNSET}
    if not given:
        return []
    result = ArgumentSpecValidator(spec).validate(given)
    hidden = no_log_values(spec, given)
    out = []
    for error in result.error_messages:
        text = " ".join(redact(str(error), hidden).split()).rstrip(".")
        out.append(f"{role}: {text}: fix it where you set it (group_vars, extra vars), as "
                   f"roles/{role}/meta/argument_specs.yml describes it")
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _spec_type(specs: Mapping[str, Mapping[str, Any]], name: str) -> str:
    for options in specs.values():
        if name in options:
            return str(options[name].get("type") or "str")
    return ""


def path_problem(name: str, value: Any) -> str | None:
    """A path variable that is not absolute (a relative one lands under the playbook's folder)."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.startswith(("/", "~")):
        return None
    if _COMMAND_NAME.search(name) and "/" not in text:
        return None  # a command name, looked up on PATH
    return (f"{name} '{text}' is a relative path, which would resolve under the playbook's folder "
            f"(playbooks/{text}): give an absolute path, starting with / (or ~ for a home folder)")


def cluster_name_problem(name: Any, variable: str = "aml_cluster_name") -> str | None:
    if not name:
        return None
    if COMPUTE_NAME.fullmatch(str(name)):
        return None
    return (f"{variable} '{name}' is not a name AzureML takes for a compute cluster: use 2 to 16 letters, digits and "
            "hyphens, starting with a letter and ending with a letter or digit")


def vm_size_problem(size: Any) -> tuple[str | None, str | None]:
    """(problem, warning) for ``aml_cluster_vm_size``: a malformed name is a problem, a
    well-formed one this collection does not know a warning."""
    if not size:
        return None, None
    text = str(size)
    if not VM_SIZE_NAME.fullmatch(text):
        return (f"aml_cluster_vm_size '{text}' is not an Azure VM size name (Standard_<family><size>..., e.g. "
                "Standard_ND96asr_v4): copy it from `az vm list-sizes --location <region>`"), None
    if text.lower() not in KNOWN_VM_SIZES:
        return None, (f"aml_cluster_vm_size '{text}' is not one of the VM sizes this collection knows (its GPU and HPC "
                      "sizes, e.g. Standard_ND96asr_v4): check the spelling against `az vm list-sizes --location "
                      "<region>`; the run goes on")
    return None, None


def variable_problems(values: Mapping[str, Any], specs: Mapping[str, Mapping[str, Any]],
                      node_count: int | None = None) -> dict[str, list[str]]:
    """``{"problems": [...], "warnings": [...]}`` for the rules no argument spec can say.

    ``values``: the role variables as the run sees them (:data:`UNSET` or absent where not set);
    ``specs``: role -> its ``main`` options (for the numbers' and paths' types); ``node_count``:
    the nodes the run will have (the inventory's, or ``aml_cluster_node_count`` before the
    cluster exists), None when unknown."""
    values = {k: v for k, v in values.items() if v != UNSET}
    problems: list[str] = []
    warnings: list[str] = []
    spares = _number(values.get("healthcheck_spare_nodes"))
    if spares is not None and node_count is not None and node_count > 0 and spares >= node_count:
        problems.append(f"healthcheck_spare_nodes is {int(spares)} but the run has {node_count} node(s): leave at "
                        f"least one node to train, set healthcheck_spare_nodes below {node_count}")
    for name in sorted(values):
        value = values[name]
        kind = _spec_type(specs, name)
        number = _number(value) if kind in ("int", "float") else None
        if number is not None and name in POSITIVE and number < 1:
            problems.append(f"{name} is {value}: it must be 1 or more")
        elif number is not None and number < 0:
            problems.append(f"{name} is {value}: it cannot be negative; use 0 or more (0 where the role says it "
                            "turns the limit off)")
        if kind == "path" or (kind and _PATH_NAME.search(name)):
            problem = path_problem(name, value)
            if problem:
                problems.append(problem)
    problem = cluster_name_problem(values.get("aml_cluster_name"))
    if problem:
        problems.append(problem)
    problem, warning = vm_size_problem(values.get("aml_cluster_vm_size"))
    problems += [problem] if problem else []
    warnings += [warning] if warning else []
    return {"problems": problems, "warnings": warnings}


# --- Every variable name checked -------------------------------------------------------------
# A name the run sets that no role's argument spec holds is ignored by every role: a typo
# (``stage_dri``) leaves the role on its default. unknown_variable_findings() names each one with
# the known name it is closest to (difflib); where that name decides where data is written or
# what is trusted, the run stops, since the default would write elsewhere or trust otherwise.

# Host variables the azureml_compute inventory plugin sets (its DOCUMENTATION's "Host vars"), which
# share the aml_ prefix with the aml_cluster role's options and are no typo of them.
INVENTORY_HOST_VARS = frozenset({
    "aml_cluster", "aml_node_rank", "aml_private_ip", "aml_public_ip", "aml_public_port", "aml_node_id",
    "aml_node_state", "aml_run_id", "aml_cluster_min_nodes", "aml_cluster_max_nodes", "aml_vm_size",
    "aml_known_hosts_file", "aml_host_keys", "aml_host_key_refused"})

# Known names whose typo stops the run: where data is written or read (a path, a folder, a file,
# a mount point, a node file, a key ring), what is removed (``*_prune``), and what is trusted or
# authenticates (SAS, auth, keys, known_hosts, every ssh_trust option).
CONSEQUENTIAL = re.compile(r"(_dir|_path|_file|_mount_point|_nodefile|_keyring|_known_hosts|_prune)$"
                           r"|(^|_)(sas|auth|trust|known_hosts|host_keys?|account_key)(_|$)|^ssh_trust_")
# How close a name must be to a known one (difflib's ratio) to be taken for its typo; one edit in
# a name of six characters or more is at least this close.
CLOSE = 0.8


def consequential(name: str, spec_type: str = "") -> bool:
    """Whether a mistyped ``name`` would change where data is written or what is trusted."""
    return spec_type == "path" or bool(CONSEQUENTIAL.search(name))


def unknown_variable_findings(names: Iterable[str], specs: Mapping[str, Mapping[str, Any]],
                              also_known: Iterable[str] = (), ignored: Iterable[str] = (),
                              where: Mapping[str, Sequence[str]] | None = None) -> dict[str, list[str]]:
    """``{"problems": [...], "warnings": [...]}`` for the variable names no role reads.

    ``names``: every variable the run sets (the inventory's, the extra vars', the play's);
    ``specs``: role -> its ``main`` options, every role of the collection; ``also_known``: names
    the collection itself sets or the inventory plugin gives (facts, registered results,
    :data:`INVENTORY_HOST_VARS`); ``ignored``: Ansible's own names (magic and connection
    variables); ``where``: name -> the files that set it, where known.

    A name is looked at when it has a role's prefix (``<role>_``) or is close to a known one;
    names starting with ``_`` or ``ansible_`` are Ansible's or a role's own and are not. Each
    unknown one is a warning naming the closest known name; it is a problem (the run stops)
    when that name is :func:`consequential`."""
    import difflib

    types = {n: str(o.get("type") or "str") for options in specs.values() for n, o in options.items()
             if isinstance(o, Mapping)}
    known = set(types) | set(also_known)
    skip = set(ignored)
    prefixes = sorted((f"{role}_" for role in specs), key=len, reverse=True)
    spec_names = sorted(types)
    where = where or {}
    problems: list[str] = []
    warnings: list[str] = []
    for name in sorted({str(n) for n in names}):
        if name in known or name in skip or name.startswith(("_", "ansible_")):
            continue
        role = next((p[:-1] for p in prefixes if name.startswith(p)), None)
        close = difflib.get_close_matches(name, spec_names, n=1, cutoff=CLOSE)
        if role is None and not close:
            continue
        files = list(where.get(name) or [])
        place = (f"set in {', '.join(files)}" if files else
                 "set where no group_vars or host_vars file beside the inventory or the playbooks says: "
                 "look in the extra vars (-e), the inventory file and the play's vars")
        spec_file = f"roles/{role}/meta/argument_specs.yml" if role else "the roles' meta/argument_specs.yml"
        if close and consequential(close[0], types.get(close[0], "")):
            problems.append(f"{name} is no variable of any role ({place}), so the role would use its default "
                            f"{close[0]}, which decides where data is written or what is trusted: did you mean "
                            f"{close[0]}? Rename it")
        elif close:
            warnings.append(f"{name} is no variable of any role ({place}) and is ignored: did you mean {close[0]}? "
                            f"Rename it; the run goes on with {close[0]}'s value as set elsewhere or its default")
        else:
            warnings.append(f"{name} has role {role}'s prefix but is no variable of it ({place}) and is ignored: "
                            f"{spec_file} lists what the role reads; rename or remove it")
    return {"problems": problems, "warnings": warnings}


def names_set_in(data: Any) -> set[str]:
    """The variable names a task file, play or vars file of the collection sets: what it
    registers, its ``set_fact`` keys, its ``vars`` keys and loop variables, at any depth."""
    out: set[str] = set()
    if isinstance(data, Mapping):
        for key, value in data.items():
            if key == "register" and isinstance(value, str):
                out.add(value)
            elif key in ("set_fact", "ansible.builtin.set_fact", "vars") and isinstance(value, Mapping):
                out.update(str(k) for k in value if k != "cacheable")
            elif key == "loop_var" and isinstance(value, str):
                out.add(value)
            out |= names_set_in(value)
    elif isinstance(data, list):
        for item in data:
            out |= names_set_in(item)
    return out
