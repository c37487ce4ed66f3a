# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Azure resource ids and workspace names checked against Azure's own grammar before any call.

An id Azure would refuse (or, worse, that an SDK would mangle: azureml-core splits a subnet id
into names and rebuilds it in the workspace's subscription) is refused here, with one sentence
that names the option, the segment that is wrong and the fix. The grammar is ARM's:

    /subscriptions/<GUID>/resourceGroups/<group>/providers/<Namespace>/<type>/<name>[/<type>/<name>]...

* a subscription is a GUID (8-4-4-4-12 hex digits);
* a resource group name is 1 to 90 characters: letters, digits, ``_ ( ) - .``, not ending in ``.``;
* a provider namespace is dotted words (``Microsoft.Network``), each a letter then letters or digits;
* a type is a letter then letters or digits; a name is not empty, holds none of ARM's refused
  characters ``< > * % & : \\ ? # /`` nor a control character, and does not end in ``.`` or a space.

Pure functions: no SDK, no Ansible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# Letters are any Unicode letter (\w less digits and _ is close enough, with the explicit ASCII set).
RESOURCE_GROUP = re.compile(r"[\w().-]{1,90}")
NAMESPACE = re.compile(r"[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*)+")
TYPE = re.compile(r"[A-Za-z][A-Za-z0-9]*")
REFUSED_IN_NAME = set('<>*%&:\\?#/')
# An AzureML workspace name: 3 to 33 characters, letters, digits, - and _, starting with a letter or digit.
WORKSPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{2,32}")


@dataclass(frozen=True)
class IdKind:
    """A kind of resource id an option takes: its provider, its types in order, and the command
    that prints a good one."""

    what: str
    namespace: str
    types: tuple[str, ...]
    fix: str


SUBNET = IdKind("a subnet", "Microsoft.Network", ("virtualNetworks", "subnets"),
                "az network vnet subnet show -g <group> --vnet-name <vnet> -n <subnet> --query id -o tsv")
USER_IDENTITY = IdKind("a user-assigned managed identity", "Microsoft.ManagedIdentity", ("userAssignedIdentities",),
                       "az identity show -g <group> -n <name> --query id -o tsv")
GALLERY_IMAGE = IdKind("a compute gallery image version", "Microsoft.Compute",
                       ("galleries", "images", "versions"),
                       "az sig image-version show -g <group> -r <gallery> -i <image> -e <version> --query id -o tsv")
WORKSPACE_ID = IdKind("an AzureML workspace", "Microsoft.MachineLearningServices", ("workspaces",),
                      "az ml workspace show -g <group> -n <workspace> --query id -o tsv")


def name_problem(name: str) -> str | None:
    """Why ARM would refuse ``name`` as a resource name, or None."""
    if not name:
        return "is empty"
    bad = sorted({c for c in name if c in REFUSED_IN_NAME or ord(c) < 32 or ord(c) == 127})
    if bad:
        return f"holds {', '.join(repr(c) for c in bad)}, which Azure refuses in a name"
    if name.endswith((".", " ")):
        return "ends in a period or a space, which Azure refuses"
    return None


def subscription_problem(value: str) -> str | None:
    """Why ``value`` is not a subscription id (a GUID), or None."""
    return None if GUID.fullmatch(value or "") else "is not a GUID (8-4-4-4-12 hexadecimal digits)"


def resource_group_problem(value: str) -> str | None:
    """Why ``value`` is not a resource group name, or None."""
    if not value or not RESOURCE_GROUP.fullmatch(value):
        return "is not a resource group name (1 to 90 letters, digits, '_', '(', ')', '-' or '.')"
    if value.endswith("."):
        return "ends in a period, which a resource group name may not"
    return None


def resource_id_problem(option: str, value: str, kind: IdKind) -> str | None:
    """One sentence naming the option, the segment Azure would refuse and the fix; None when
    ``value`` is a well-formed resource id of ``kind``."""
    fix = f"give {option} the full resource id of {kind.what} ({kind.fix})"
    shape = (f"/subscriptions/<GUID>/resourceGroups/<group>/providers/{kind.namespace}/"
             + "/".join(f"{t}/<name>" for t in kind.types))

    def refuse(segment: str) -> str:
        return f"{option} {value!r}: {segment}: {fix}"

    if not value.startswith("/"):
        return refuse(f"an id starts with '/', as in {shape}")
    parts = value[1:].split("/")
    want = 6 + 2 * len(kind.types)
    if len(parts) != want:
        return refuse(f"it has {len(parts)} segments where {shape} has {want}")
    if parts[0].lower() != "subscriptions":
        return refuse(f"segment 1 {parts[0]!r} should be 'subscriptions'")
    problem = subscription_problem(parts[1])
    if problem:
        return refuse(f"the subscription {parts[1]!r} {problem}")
    if parts[2].lower() != "resourcegroups":
        return refuse(f"segment 3 {parts[2]!r} should be 'resourceGroups'")
    problem = resource_group_problem(parts[3])
    if problem:
        return refuse(f"the resource group {parts[3]!r} {problem}")
    if parts[4].lower() != "providers":
        return refuse(f"segment 5 {parts[4]!r} should be 'providers'")
    if not NAMESPACE.fullmatch(parts[5]) or parts[5].lower() != kind.namespace.lower():
        return refuse(f"the provider {parts[5]!r} should be {kind.namespace}")
    for i, expected in enumerate(kind.types):
        got, name = parts[6 + 2 * i], parts[7 + 2 * i]
        if not TYPE.fullmatch(got) or got.lower() != expected.lower():
            return refuse(f"segment {7 + 2 * i} {got!r} should be {expected!r}")
        problem = name_problem(name)
        if problem:
            return refuse(f"the {expected} name {name!r} {problem}")
    return None


def workspace_problems(who: str, subscription_id: str | None, resource_group: str | None,
                       workspace_name: str | None) -> list[str]:
    """One sentence for each of the workspace's names Azure would refuse (given ones only)."""
    out = []
    if subscription_id and subscription_problem(subscription_id):
        out.append(f"{who}: subscription_id {subscription_id!r} {subscription_problem(subscription_id)}: give "
                   "the subscription's id as az account show --query id -o tsv prints it")
    if resource_group and resource_group_problem(resource_group):
        out.append(f"{who}: resource_group {resource_group!r} {resource_group_problem(resource_group)}: give the "
                   "workspace's resource group as az group list --query [].name -o tsv lists it")
    if workspace_name and not WORKSPACE.fullmatch(workspace_name):
        out.append(f"{who}: workspace_name {workspace_name!r} is not an AzureML workspace name (3 to 33 letters, "
                   "digits, '-' or '_', starting with a letter or digit): give the name az ml workspace list "
                   "--query [].name -o tsv lists")
    return out
