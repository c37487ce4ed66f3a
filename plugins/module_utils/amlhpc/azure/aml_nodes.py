# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""AmlCompute nodes as inventory hosts: the pure part of the azureml_compute plugin.

Three sources give the same facts in three shapes:

* azureml-core (SDK v1): ``AmlCompute(ws, name).list_nodes()`` returns camelCase dicts
  (``nodeId``, ``privateIpAddress``, ``publicIpAddress``, ``port``, ``nodeState``, ``runId``),
  already joined across the REST pages;
* azure-ai-ml (SDK v2): ``MLClient.compute.list_nodes(name)`` returns ``AmlComputeNodeInfo``
  objects. In azure-ai-ml 1.35.x their snake_case attributes stay ``None`` (only ``port``
  survives): ``_from_rest_object`` copies the REST model's ``as_dict()``, whose keys are the
  camelCase wire names, into ``__dict__``. :func:`record_from_object` reads both spellings;
* a JSON file holding either of the first two payloads (a list, or a REST page
  ``{"nodes": [...]}``), for air-gapped use, tests and local clusters.

Everything here is standard library only: the SDK calls live in ``aml_sdk``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import azure_auth
from .autoscale import autoscale_refusal
from ..validate.azure_ids import SUBNET, USER_IDENTITY, resource_id_problem
# The auth plan's names, as before, for the plugins that import them from here.
from .azure_auth import (  # noqa: F401  pylint: disable=unused-import
    AUTH_SOURCES,
    ENV_NAMES,
    AuthError,
    AuthPlan,
    auth_argument_spec,
    auth_failed,
    subscription_from,
)

# AmlCompute nodeState values (REST NodeState), and the ones a job can use.
NODE_STATES = ("idle", "running", "preparing", "unusable", "leaving", "preempted")
USABLE_STATES = frozenset({"idle", "running", "preparing"})
# Left out of the inventory unless the user asks for them: they cannot take part in a job,
# and "leaving"/"preempted" nodes are about to disappear.
DEFAULT_EXCLUDED_STATES = ("unusable", "leaving", "preempted")

SOURCES = ("azureml-core", "azure-ai-ml", "nodes_file")
HOSTNAME_STYLES = ("rank", "node_id")

# (snake_case attribute of the v2 entity, camelCase REST / v1 key)
FIELDS = (
    ("node_id", "nodeId"),
    ("private_ip_address", "privateIpAddress"),
    ("public_ip_address", "publicIpAddress"),
    ("port", "port"),
    ("node_state", "nodeState"),
    ("run_id", "runId"),
)

# Python package to install for each SDK source, pinned like requirements.txt.
SDK_PACKAGES = {
    "azureml-core": "azureml-core==1.61.0.post4",
    "azure-ai-ml": "azure-ai-ml==1.35.2 azure-identity==1.27.0",
}


class AmlNodesError(Exception):
    """A problem with the inventory source, told in one sentence that names the fix."""


@dataclass(frozen=True)
class AmlNode:
    """One AmlCompute node, whatever source it came from."""

    cluster: str
    node_id: str
    private_ip: str
    public_ip: str | None
    port: int | None  # the public NAT port; None on a cluster without node public IPs
    state: str
    run_id: str = ""

    def record(self) -> dict[str, Any]:
        """The node as a list_nodes() record (what node_filter expressions see)."""
        return {"cluster": self.cluster, "nodeId": self.node_id, "privateIpAddress": self.private_ip,
                "publicIpAddress": self.public_ip, "port": self.port, "nodeState": self.state,
                "runId": self.run_id or None}


@dataclass(frozen=True)
class ClusterInfo:
    """What is known of a cluster's properties (None: not known)."""

    name: str
    vm_size: str | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None
    admin_user: str | None = None
    ssh_public_key: str | None = None
    remote_login_port_public_access: str | None = None
    provisioning_state: str | None = None
    current_node_count: int | None = None
    idle_seconds: int | None = None  # scaleSettings.nodeIdleTimeBeforeScaleDown, in seconds
    vm_priority: str | None = None  # Dedicated / LowPriority (v2: dedicated / low_priority)
    identity_type: str | None = None  # e.g. UserAssigned, SystemAssigned,UserAssigned (None: no identity)
    identity_ids: tuple[str, ...] = ()  # ARM ids of its user-assigned identities, as Azure spells them
    subnet: str | None = None  # ARM id of the subnet its nodes are in ("": none; None: not known)
    node_public_ip: bool | None = None  # enableNodePublicIp (None: not known)
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# Records


def record_from_object(obj: Any) -> dict[str, Any]:
    """A camelCase record from an SDK v2 ``AmlComputeNodeInfo`` (or any object or mapping).

    Reads the snake_case attribute first and falls back to the camelCase key that
    azure-ai-ml 1.35.x leaves in ``__dict__`` when the attribute is empty.
    """
    if isinstance(obj, Mapping):
        raw: Mapping[str, Any] = obj
    else:
        raw = getattr(obj, "__dict__", {}) or {}
    out: dict[str, Any] = {}
    for snake, camel in FIELDS:
        value = raw.get(snake) if isinstance(obj, Mapping) else getattr(obj, snake, None)
        if value is None or value == "":
            value = raw.get(camel)
        if value is None or value == "":
            value = raw.get(snake)
        out[camel] = value
    return out


def records_from_payload(data: Any, where: str) -> list[Mapping[str, Any]]:
    """The node records of a nodes file: a list_nodes() list or a REST page ``{"nodes": [...]}``."""
    if isinstance(data, Mapping):
        if "nodes" not in data:
            raise AmlNodesError(f"{where} holds an object without a 'nodes' list: write the list that "
                                "list_nodes() returns, or a REST page {\"nodes\": [...]}")
        data = data["nodes"]
    if not isinstance(data, list):
        raise AmlNodesError(f"{where} must hold a JSON list of nodes (what list_nodes() returns), "
                            f"not a {type(data).__name__}")
    for index, item in enumerate(data):
        if not isinstance(item, Mapping):
            raise AmlNodesError(f"{where}: node {index} is a {type(item).__name__}, not an object with "
                                "nodeId, privateIpAddress, publicIpAddress, port and nodeState")
    return data


def load_nodes_file(path: str) -> list[Mapping[str, Any]]:
    """Read a nodes file (JSON) and return its node records."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise AmlNodesError(f"nodes file {path} does not exist: write the JSON that list_nodes() "
                            "returns there, or fix nodes_file") from None
    except json.JSONDecodeError as exc:
        raise AmlNodesError(f"nodes file {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                            f"{exc.msg})") from None
    return records_from_payload(data, f"nodes file {path}")


def _text(record: Mapping[str, Any], key: str, where: str, required: bool = True) -> str | None:
    value = record.get(key)
    if value is None or value == "":
        if required:
            raise AmlNodesError(f"{where} has no '{key}'")
        return None
    if not isinstance(value, str):
        # NodeState is a str enum in SDK v2; anything else is malformed.
        if hasattr(value, "value") and isinstance(value.value, str):
            return value.value
        raise AmlNodesError(f"{where}: '{key}' must be a string, not {type(value).__name__} {value!r}")
    return value


def node_from_record(record: Mapping[str, Any], cluster: str, where: str) -> AmlNode:
    """Check one camelCase record and turn it into an :class:`AmlNode`.

    ``where`` names the record in error sentences ("nodes file x.json: node 3").
    """
    node_id = _text(record, "nodeId", where)
    private_ip = _text(record, "privateIpAddress", where)
    public_ip = _text(record, "publicIpAddress", where, required=False)
    state = (_text(record, "nodeState", where) or "").lower()
    run_id = _text(record, "runId", where, required=False) or ""
    port = record.get("port")
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if isinstance(port, float) and port.is_integer():
        port = int(port)  # azureml-core's REST model types the port as a float (50001.0)
    if port is None and public_ip is None:
        pass  # a node without a public IP (enableNodePublicIp false) has no NAT port either
    elif isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise AmlNodesError(f"{where}: 'port' must be an integer 1-65535, not {port!r}")
    if state not in NODE_STATES:
        raise AmlNodesError(f"{where}: 'nodeState' {state!r} is not one of {', '.join(NODE_STATES)}")
    return AmlNode(cluster=cluster, node_id=str(node_id), private_ip=str(private_ip), public_ip=public_ip,
                   port=port, state=state, run_id=run_id)


def nodes_from_records(records: Iterable[Any], cluster: str, where: str) -> list[AmlNode]:
    """Normalise v1 dicts, v2 objects or file records of one cluster into :class:`AmlNode`s."""
    nodes = [node_from_record(record_from_object(r), cluster, f"{where}: node {i}")
             for i, r in enumerate(records)]
    seen: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if node.node_id in seen:
            raise AmlNodesError(f"{where}: node {i} repeats nodeId {node.node_id!r} of node {seen[node.node_id]}")
        seen[node.node_id] = i
    return nodes


# ---------------------------------------------------------------------------------------
# Selection and order


def split_by_state(nodes: Iterable[AmlNode], excluded_states: Iterable[str]) -> tuple[list[AmlNode], list[AmlNode]]:
    """(kept, left out) by node state."""
    excluded = {s.lower() for s in excluded_states}
    kept, dropped = [], []
    for node in nodes:
        (dropped if node.state in excluded else kept).append(node)
    return kept, dropped


def left_out_warning(cluster: str, dropped: list[AmlNode]) -> str:
    """The warning that names the nodes left out for their state."""
    named = ", ".join(f"{n.node_id} ({n.state})" for n in sorted(dropped, key=lambda n: n.node_id))
    return (f"cluster '{cluster}': left out {len(dropped)} node(s) that cannot take part in a job: {named} "
            "(set exclude_states: [] to keep them)")


def apply_filter(nodes: Iterable[AmlNode], predicate: Callable[[dict[str, Any]], Any] | None) -> list[AmlNode]:
    """Keep the nodes whose record makes ``predicate`` truthy (all of them without one)."""
    if predicate is None:
        return list(nodes)
    return [n for n in nodes if predicate(n.record())]


def _ip_key(ip: str) -> tuple:
    parts = ip.split(".")
    if len(parts) == 4 and all(p.isdigit() for p in parts):
        return (0, tuple(int(p) for p in parts))
    return (1, ip)


def rank_order(nodes: Iterable[AmlNode]) -> list[AmlNode]:
    """Nodes in rank order: by public port, then private IP, then nodeId.

    The ports of one cluster are distinct (the load balancer's NAT rules: 50000, 50001, ...),
    so the order does not depend on the order the API lists the nodes in, and the host
    names, the MPI nodefile and the shard plan agree on it. Nodes without a public port (a
    cluster without node public IPs) come by private IP.
    """
    return sorted(nodes, key=lambda n: (n.port is None, n.port or 0, _ip_key(n.private_ip), n.node_id))


_GROUP_BAD = re.compile(r"[^A-Za-z0-9_]")
_HOST_BAD = re.compile(r"[^A-Za-z0-9_.-]")


def group_name(cluster: str) -> str:
    """The ``cluster_<name>`` group (hyphens and other characters become underscores)."""
    return "cluster_" + _GROUP_BAD.sub("_", cluster)


def host_name(node: AmlNode, rank: int, style: str = "rank") -> str:
    """A stable, readable host name: ``<cluster>-<rank>`` or ``<cluster>-<nodeId>``."""
    if style == "node_id":
        return f"{node.cluster}-{_HOST_BAD.sub('_', node.node_id)}"
    if style != "rank":
        raise AmlNodesError(f"hostnames must be one of {', '.join(HOSTNAME_STYLES)}, not {style!r}")
    return f"{node.cluster}-{rank}"


def host_vars(node: AmlNode, rank: int, info: ClusterInfo, use_private_ip: bool = False,
              ansible_user: str | None = None, ssh_port: int = 22) -> dict[str, Any]:
    """The host vars of the inventory contract for one node."""
    if use_private_ip:
        address, port = node.private_ip, ssh_port
    else:
        if not node.public_ip or node.port is None:
            raise AmlNodesError(f"cluster '{node.cluster}': node {node.node_id} has no publicIpAddress (a cluster "
                                "without node public IPs): set use_private_ip: true and run from inside the VNet")
        address, port = node.public_ip, node.port
    out: dict[str, Any] = {
        "ansible_host": address,
        "ansible_port": int(port),
        "aml_cluster": node.cluster,
        "aml_node_rank": rank,
        "aml_node_id": node.node_id,
        "aml_node_state": node.state,
        "aml_private_ip": node.private_ip,
        "aml_public_ip": node.public_ip or "",
        "aml_public_port": node.port if node.port is not None else "",
        "aml_run_id": node.run_id,
    }
    user = ansible_user or info.admin_user
    if user:
        out["ansible_user"] = user
    if info.min_nodes is not None:
        out["aml_cluster_min_nodes"] = int(info.min_nodes)
    if info.max_nodes is not None:
        out["aml_cluster_max_nodes"] = int(info.max_nodes)
    if info.vm_size:
        out["aml_vm_size"] = info.vm_size
    return out


@dataclass
class PlannedHost:
    name: str
    groups: list[str]
    vars: dict[str, Any]


def plan_hosts(nodes: Iterable[AmlNode], info: ClusterInfo, hostnames: str = "rank",
               use_private_ip: bool = False, ansible_user: str | None = None,
               ssh_port: int = 22) -> list[PlannedHost]:
    """The hosts of one cluster, in rank order, with their groups and vars."""
    planned = []
    cgroup = group_name(info.name)
    for rank, node in enumerate(rank_order(nodes)):
        groups = ["aml_nodes", cgroup, "head" if rank == 0 else "workers"]
        planned.append(PlannedHost(host_name(node, rank, hostnames), groups,
                                   host_vars(node, rank, info, use_private_ip, ansible_user, ssh_port)))
    names = [p.name for p in planned]
    if len(set(names)) != len(names):
        raise AmlNodesError(f"cluster '{info.name}': host names collide ({', '.join(sorted(names))}): "
                            "use hostnames: rank")
    return planned


# ---------------------------------------------------------------------------------------
# Errors, one sentence each


def sdk_missing(source: str, python: str, who: str = "", alternative: str = "use source: nodes_file") -> str:
    """``who`` (default: ``source 'SDK'``) cannot import the SDK ``source``; ``alternative`` is
    the way round it (the inventory's nodes_file, aml_job's local backend)."""
    package = SDK_PACKAGES.get(source, source)
    return (f"{who or f'source {source!r}'} needs the Python package {package.split('==')[0]}, which {python} "
            f"cannot import: run `{python} -m pip install {package}` (or make setup), or {alternative}")


def workspace_not_found(workspace: str, resource_group: str, subscription_id: str) -> str:
    return (f"workspace '{workspace}' was not found in resource group '{resource_group}' of subscription "
            f"{subscription_id}: check workspace_name, resource_group and subscription_id")


def cluster_not_found(cluster: str, workspace: str) -> str:
    return (f"cluster '{cluster}' was not found in workspace '{workspace}': create it with "
            "playbooks/cluster.yml or fix the cluster name")


def not_amlcompute(cluster: str, workspace: str, kind: str) -> str:
    return f"compute '{cluster}' in workspace '{workspace}' is a {kind}, not an AmlCompute cluster"


def cluster_not_created(cluster: str, workspace: str) -> str:
    """The warning for a cluster that does not exist yet (the inventory reads as empty)."""
    return (f"cluster '{cluster}' was not found in workspace '{workspace}': playbooks/cluster.yml creates it "
            "(site.yml runs it first), or fix the cluster name")


def no_nodes(cluster: str) -> str:
    """The warning for a cluster without nodes (scaled to 0; the inventory reads as empty)."""
    return (f"cluster '{cluster}' has no nodes: with aml_cluster_manage true, playbooks/cluster.yml scales it up "
            "(site.yml runs it first) and waits until its nodes are idle; otherwise scale it up in AzureML")


def none_left(cluster: str, total: int) -> str:
    return (f"cluster '{cluster}': none of its {total} node(s) is left after exclude_states and node_filter: "
            "loosen them, or set allow_empty: true")


# ---------------------------------------------------------------------------------------
# Authentication (module_utils/amlhpc/azure/azure_auth.py: the names of azure.azcollection and azure-identity)


def resolve_auth(requested: str, options: Mapping[str, Any], environ: Mapping[str, str],
                 home: str | None = None) -> AuthPlan:
    """azure_auth.resolve_auth, its refusals as AmlNodesError (what the plugins and modules catch)."""
    try:
        return azure_auth.resolve_auth(requested, options, environ, home)
    except AuthError as exc:
        raise AmlNodesError(str(exc)) from None


# ---------------------------------------------------------------------------------------
# Cluster lifecycle


# The idle time a cluster is created with when none is given (AmlCompute's own default).
DEFAULT_IDLE_SECONDS = 1800


@dataclass(frozen=True)
class ClusterSpec:
    """The cluster the lifecycle module makes sure of."""

    name: str
    vm_size: str
    min_nodes: int
    max_nodes: int
    admin_user: str
    ssh_public_key: str
    remote_login_port_public_access: str = "Enabled"
    vm_priority: str = "dedicated"
    # None: 1800 s when the cluster is created, and an existing cluster's is kept.
    idle_seconds_before_scaledown: int | None = None
    beeond_enabled: bool = False
    # ARM id of a user-assigned managed identity given to the nodes (at creation, or added to an
    # existing cluster that lacks it), e.g. for staging with no SAS:
    # /subscriptions/<s>/resourceGroups/<rg>/providers/Microsoft.ManagedIdentity/userAssignedIdentities/<name>
    identity_resource_id: str = ""
    # ARM id of the subnet the nodes are in ("": AmlCompute's own network), and whether they get
    # public IPs (False: reachable on their private IPs only, from inside the VNet).
    subnet: str = ""
    node_public_ip: bool = True

    @property
    def idle_at_creation(self) -> int:
        return DEFAULT_IDLE_SECONDS if self.idle_seconds_before_scaledown is None else self.idle_seconds_before_scaledown


@dataclass
class ClusterPlan:
    action: str  # "create", "update", "none"
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def spec_problems(spec: ClusterSpec) -> list[str]:
    """What is wrong with a wanted cluster before anything is asked of Azure."""
    problems = []
    if spec.min_nodes < 0 or spec.max_nodes < 1 or spec.min_nodes > spec.max_nodes:
        problems.append(f"cluster '{spec.name}': need 0 <= min_nodes <= max_nodes and max_nodes >= 1, "
                        f"got min {spec.min_nodes}, max {spec.max_nodes}")
    refusal = autoscale_refusal(spec.name, spec.min_nodes, spec.max_nodes)
    if spec.beeond_enabled and refusal:
        problems.append(refusal)
    if not spec.ssh_public_key.strip().startswith(("ssh-", "ecdsa-", "sk-")):
        problems.append(f"cluster '{spec.name}': ssh_public_key does not look like an OpenSSH public key "
                        "(it should start with ssh-ed25519, ssh-rsa or ecdsa-)")
    if spec.remote_login_port_public_access not in ("Enabled", "Disabled", "NotSpecified"):
        problems.append("remote_login_port_public_access must be Enabled, Disabled or NotSpecified")
    # Ids Azure would refuse (azureml-core would rebuild a subnet id from its names, mangled).
    ids = (("subnet", spec.subnet, SUBNET), ("identity_resource_id", spec.identity_resource_id, USER_IDENTITY))
    for option, value, kind in ids:
        problem = resource_id_problem(option, value, kind) if value else None
        if problem:
            problems.append(f"cluster '{spec.name}': {problem}")
    if not spec.node_public_ip and not spec.subnet:
        problems.append(f"a cluster without node public IPs lives in a VNet: set the subnet of cluster '{spec.name}' "
                        "(subnet: its resource id), or keep node_public_ip true")
    if not spec.node_public_ip and spec.remote_login_port_public_access == "Enabled":
        problems.append(f"cluster '{spec.name}' has no node public IPs, so no public SSH port: set "
                        "remote_login_port_public_access: Disabled and reach the nodes on their private IPs "
                        "(use_private_ip)")
    return problems


def subnet_parts(subnet: str) -> tuple[str, str, str, str]:
    """(subscription, resource group, virtual network, subnet) of a subnet's resource id."""
    parts = subnet.strip("/").split("/")
    return parts[1], parts[3], parts[7], parts[9]


def _key_body(key: str | None) -> str | None:
    parts = (key or "").split()
    return " ".join(parts[:2]) if len(parts) >= 2 else None


def _priority(value: str) -> str:
    return value.lower().replace("_", "")  # LowPriority (v1, REST), low_priority (v2), lowpriority (ours)


def has_identity(current: ClusterInfo, resource_id: str) -> bool:
    """Whether the cluster has that user-assigned identity (ARM ids compare case-insensitively:
    Azure answers ``resourcegroups`` where the id was given with ``resourceGroups``)."""
    return resource_id.lower() in {i.lower() for i in current.identity_ids}


def identity_refusal(name: str, current: ClusterInfo, resource_id: str, sdk: str) -> str | None:
    """Why the identity cannot be added with this SDK, or None. azureml-core's
    ``AmlCompute.add_identity`` PATCHes type ``UserAssigned``: it would take the nodes'
    system-assigned identity (and what was granted to it) away."""
    if sdk != "azureml-core" or "systemassigned" not in (current.identity_type or "").lower().replace("_", ""):
        return None
    return (f"cluster '{name}' has a system-assigned identity, which azureml-core cannot keep while it adds "
            f"{resource_id}: run with sdk azure-ai-ml (aml_cluster_sdk), or add it yourself with "
            f"az ml compute update --name {name} --identity-type system_assigned,user_assigned "
            f"--user-assigned-identities {resource_id}")


def plan_cluster(spec: ClusterSpec, current: ClusterInfo | None, sdk: str = "azure-ai-ml") -> ClusterPlan:
    """What to do to get from ``current`` (None: no such cluster) to ``spec``.

    AmlCompute can change only its scale settings and identities once created; a cluster that
    differs in VM size, VM priority, admin user, SSH key or remote login access must be deleted
    and created again, which this refuses to do behind the user's back. The wanted identity is
    added to those the cluster has (none is removed); ``sdk`` is the client that would add it.
    """
    if current is None:
        return ClusterPlan("create", {"cluster": (None, spec.name)})
    fixed = []
    if current.vm_size and current.vm_size.lower() != spec.vm_size.lower():
        fixed.append(f"vm_size {current.vm_size} (wanted {spec.vm_size})")
    if current.vm_priority and _priority(current.vm_priority) != _priority(spec.vm_priority):
        fixed.append(f"vm_priority {_priority(current.vm_priority)} (wanted {_priority(spec.vm_priority)})")
    if current.admin_user and current.admin_user != spec.admin_user:
        fixed.append(f"admin user {current.admin_user} (wanted {spec.admin_user})")
    have_key, want_key = _key_body(current.ssh_public_key), _key_body(spec.ssh_public_key)
    if have_key and have_key != want_key:
        fixed.append("another admin SSH public key")
    access = current.remote_login_port_public_access
    if access and spec.remote_login_port_public_access != "NotSpecified" and access != spec.remote_login_port_public_access:
        fixed.append(f"remote login port public access {access} (wanted {spec.remote_login_port_public_access})")
    if current.subnet is not None and (current.subnet or "").lower() != spec.subnet.lower():
        fixed.append(f"subnet {current.subnet or 'none'} (wanted {spec.subnet or 'none'})")
    if current.node_public_ip is not None and current.node_public_ip != spec.node_public_ip:
        fixed.append(f"node_public_ip {current.node_public_ip} (wanted {spec.node_public_ip})")
    if fixed:
        raise AmlNodesError(f"cluster '{spec.name}' exists with {'; '.join(fixed)}, which AmlCompute cannot change "
                            "in place: delete the cluster (az ml compute delete) or change the wanted settings")
    changes = {}
    if current.min_nodes != spec.min_nodes:
        changes["min_nodes"] = (current.min_nodes, spec.min_nodes)
    if current.max_nodes != spec.max_nodes:
        changes["max_nodes"] = (current.max_nodes, spec.max_nodes)
    idle = spec.idle_seconds_before_scaledown
    if idle is not None and current.idle_seconds is not None and int(current.idle_seconds) != idle:
        changes["idle_seconds"] = (int(current.idle_seconds), idle)
    rid = spec.identity_resource_id
    if rid and not has_identity(current, rid):
        refusal = identity_refusal(spec.name, current, rid, sdk)
        if refusal:
            raise AmlNodesError(refusal)
        changes["identity"] = (list(current.identity_ids), [*current.identity_ids, rid])
    return ClusterPlan("update" if changes else "none", changes)


def plan_summary(plan: ClusterPlan) -> str:
    """The plan in a few words, e.g. ``update (min_nodes 0 -> 4, identity [] -> ['/subscriptions/...'])``."""
    changed = [f"{key} {before} -> {after}" for key, (before, after) in plan.changes.items() if key != "cluster"]
    return f"{plan.action} ({', '.join(changed)})" if changed else plan.action


# Idle time a teardown sets: AmlCompute releases each node this long after it went idle
# (the cluster's own default, 1800 s, keeps paid GPU nodes for half an hour).
TEARDOWN_IDLE_SECONDS = 120


def plan_scale_to_zero(current: ClusterInfo | None, idle_seconds: int | None = None) -> ClusterPlan:
    """Teardown: min_nodes 0 so AmlCompute releases the nodes (max_nodes stays, the API needs
    >= 1), and a short idle time (``idle_seconds``) so it does so soon after they are idle."""
    if current is None:
        return ClusterPlan("none")
    changes: dict[str, tuple[Any, Any]] = {}
    if current.min_nodes != 0:
        changes["min_nodes"] = (current.min_nodes, 0)
    if idle_seconds is not None and current.idle_seconds != idle_seconds:
        changes["idle_seconds"] = (current.idle_seconds, idle_seconds)
    return ClusterPlan("update", changes) if changes else ClusterPlan("none")


def teardown_eta(nodes: Iterable[AmlNode], cluster: str, idle_seconds: int | None) -> str:
    """One sentence: how many nodes are left after a scale to 0, and when they will be gone."""
    nodes = list(nodes)
    if not nodes:
        return f"no node left on cluster '{cluster}'"
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.state] = counts.get(n.state, 0) + 1
    idle = counts.pop("idle", 0)
    after = f"{idle_seconds} s" if idle_seconds is not None else "the cluster's idle time"
    text = f"{len(nodes)} node(s) left on cluster '{cluster}': AmlCompute releases each after {after} idle"
    if idle:
        soon = f"about {-(-idle_seconds // 60)} min" if idle_seconds is not None else "that time"
        text += f" ({idle} idle now: gone in {soon})"
    others = []
    for state, count in sorted(counts.items()):
        if state == "running":
            others.append(f"{count} running a job go {after} after it ends")
        else:
            others.append(f"{count} {state}")
    return "; ".join([text] + others)


def nodes_ready(nodes: Iterable[AmlNode], want: int) -> tuple[bool, str]:
    """Whether ``want`` nodes are all idle, and a sentence saying what is missing."""
    nodes = list(nodes)
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.state] = counts.get(n.state, 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
    idle = counts.get("idle", 0)
    if idle >= want and len(nodes) == idle:
        return True, f"{idle} node(s) idle"
    return False, f"want {want} idle node(s), have {len(nodes)} ({summary})"
