#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Module: make sure an AzureML compute cluster (AmlCompute) exists at a fixed size, or scale it to 0."""

from __future__ import annotations

DOCUMENTATION = r"""
module: aml_compute_cluster
short_description: An AzureML compute cluster (AmlCompute) at a fixed size, or scaled to 0
description:
  - "O(state=present): creates the cluster when it is missing (VM size, admin user with an
    SSH public key, public access to the remote login port), sets its scale settings
    (O(min_nodes), O(max_nodes)) when they differ, and with O(wait) waits until O(min_nodes)
    nodes are idle and each answers on its SSH port."
  - "O(state=scaled_to_zero): sets C(min_nodes) to 0 and a short idle time
    (O(idle_seconds_before_scaledown), 120 s by default here) so AmlCompute releases the nodes
    soon after they are idle (C(max_nodes) stays: the API needs it >= 1); with O(wait) waits
    until no node is left, otherwise RV(msg) says how many are left and when they go."
  - An autoscaling cluster (O(min_nodes) != O(max_nodes)) is refused while
    O(beeond_enabled) is true, because a scale-down destroys the BeeOND file system.
  - On an existing cluster it also sets the idle time when O(idle_seconds_before_scaledown)
    differs, and adds O(identity_resource_id) when the cluster lacks it.
  - A cluster that exists with another VM size, VM priority, admin user, SSH key, remote
    login setting, subnet or node public IP setting is refused (AmlCompute cannot change them
    in place); the module never deletes a cluster.
  - A cluster in a subnet without node public IPs (O(subnet), O(node_public_ip=false)) is reached on
    its nodes' private IPs (O(use_private_ip)), from a controller inside the VNet or peered with it.
  - Works through azure-ai-ml (SDK v2, the default) or azureml-core (SDK v1, out of support
    since 2026-06-30), with the same authentication options as the azureml_compute inventory
    plugin.
version_added: "1.0.0"
author:
  - amlhpc contributors (@amlhpc)
requirements:
  - azure-ai-ml and azure-identity (O(sdk=azure-ai-ml), the default) or azureml-core (O(sdk=azureml-core))
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
  diff_mode:
    support: full
extends_documentation_fragment:
  - amlhpc.azureml.azure_auth
  - ansible.builtin.action_common_attributes
options:
  name:
    description: Cluster name (2-16 characters, letters, digits and hyphens).
    type: str
    required: true
  state:
    description: C(present) at its size, or C(scaled_to_zero) (teardown).
    type: str
    default: present
    choices: [present, scaled_to_zero]
  sdk:
    description:
      - Which Azure ML SDK to use. C(azure-ai-ml) - SDK v2, the default.
      - C(azureml-core) - SDK v1, out of support since 2026-06-30 (Microsoft's end of support for
        SDK v1); kept for workspaces that still use it. It was the default before, so a task that
        names no sdk and is to keep working through azureml-core says so now.
    type: str
    default: azure-ai-ml
    choices: [azure-ai-ml, azureml-core]
  resource_group:
    required: true
  workspace_name:
    required: true
  vm_size:
    description: VM size, for example C(Standard_ND96asr_v4). Required with O(state=present).
    type: str
  min_nodes:
    description: Minimum node count. Defaults to O(max_nodes) (a fixed-size cluster).
    type: int
  max_nodes:
    description: Maximum node count. Required with O(state=present).
    type: int
  vm_priority:
    description: C(dedicated) or C(lowpriority) (low-priority nodes can be preempted).
    type: str
    default: dedicated
    choices: [dedicated, lowpriority]
  idle_seconds_before_scaledown:
    description:
      - Idle time before AmlCompute releases a node above O(min_nodes).
      - With O(state=present), set on an existing cluster when it differs; not set, a new cluster
        gets 1800 and an existing one keeps its own. 120 by default with O(state=scaled_to_zero).
    type: int
  admin_user:
    description: Admin user on the nodes. Required with O(state=present).
    type: str
  ssh_public_key:
    description: OpenSSH public key of the admin user. Required with O(state=present).
    type: str
  remote_login_port_public_access:
    description: Public access to the nodes' SSH port (NAT ports 50000 and up on the cluster's public IP).
    type: str
    default: Enabled
    choices: [Enabled, Disabled, NotSpecified]
  beeond_enabled:
    description: Refuse O(min_nodes) != O(max_nodes), since a scale-down destroys BeeOND.
    type: bool
    default: false
  identity_resource_id:
    description:
      - ARM resource id of a user-assigned managed identity to give the nodes, set when the cluster
        is created and added to an existing cluster that lacks it (ids compare case-insensitively;
        the identities the cluster has stay, none is removed). Grant it Storage Blob Data Reader on
        the data set's account or container and stage with C(stage_auth=managed_identity) and
        C(stage_msi_client_id) set to the identity's client id, and no SAS exists at all.
      - With O(sdk=azureml-core), adding it to a cluster that has a system-assigned identity is
        refused (in check mode too), because that SDK would drop the system-assigned one. The message
        names the two ways that keep both (O(sdk=azure-ai-ml), or C(az ml compute update)).
    type: str
    default: ""
  wait:
    description: Wait for the nodes (idle and answering on SSH; or gone, for C(scaled_to_zero)).
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait before failing.
    type: int
    default: 1800
  poll_interval:
    description: Seconds between two looks at the nodes.
    type: int
    default: 15
  check_reachable:
    description:
      - With O(wait), also require an SSH banner from each node - on its public IP and NAT port, or
        with O(use_private_ip) on its private IP and O(ssh_port).
    type: bool
    default: true
  subnet:
    description:
      - Resource id of the subnet the nodes are put in
        (C(/subscriptions/<s>/resourceGroups/<rg>/providers/Microsoft.Network/virtualNetworks/<vnet>/subnets/<name>));
        empty - AmlCompute's own network. Set when the cluster is created; a cluster in another subnet is refused.
      - With O(sdk=azureml-core) the subnet must be in the workspace's subscription (that SDK builds the id there).
    type: str
    default: ""
    version_added: 2.2.0
  node_public_ip:
    description:
      - Whether the nodes get public IPs (and NAT ports for SSH). C(false) needs O(subnet) and
        O(remote_login_port_public_access=Disabled); the nodes are then reachable on their private IPs only.
    type: bool
    default: true
    version_added: 2.2.0
  use_private_ip:
    description: Wait for SSH on each node's private IP and O(ssh_port), as the inventory plugin's C(use_private_ip) reaches them.
    type: bool
    default: false
    version_added: 2.2.0
  ssh_port:
    description: The SSH port on the private IPs, with O(use_private_ip).
    type: int
    default: 22
    version_added: 2.2.0
"""

EXAMPLES = r"""
- name: Cluster | A fixed-size cluster of 4 NDv4 nodes, ready for SSH
  amlhpc.azureml.aml_compute_cluster:
    name: gpu-a100
    sdk: azure-ai-ml
    resource_group: rg-hpc
    workspace_name: ws-hpc
    vm_size: Standard_ND96asr_v4
    max_nodes: 4
    admin_user: azureuser
    ssh_public_key: "{{ lookup('ansible.builtin.file', '~/.ssh/id_ed25519.pub') }}"
    beeond_enabled: true

- name: Teardown | Scale the cluster to 0
  amlhpc.azureml.aml_compute_cluster:
    name: gpu-a100
    state: scaled_to_zero
    resource_group: rg-hpc
    workspace_name: ws-hpc
"""

RETURN = r"""
msg:
  description: With O(state=scaled_to_zero), how many nodes are left and when AmlCompute releases them.
  returned: O(state=scaled_to_zero)
  type: str
  sample: "4 node(s) left on cluster 'gpu': AmlCompute releases each after 120 s idle (4 idle now: gone in about 2 min)"
action:
  description: What was (or, in check mode, would be) done.
  returned: always
  type: str
  sample: create
summary:
  description: RV(action) and what it changes (or, in check mode, would change), in a few words.
  returned: always
  type: str
  sample: "update (min_nodes 0 -> 4, identity [] -> ['/subscriptions/.../userAssignedIdentities/stage-reader'])"
changes:
  description:
    - Settings changed, as [before, after] - C(min_nodes), C(max_nodes), C(idle_seconds) (seconds),
      C(identity) (the cluster's user-assigned identity ids).
  returned: always
  type: dict
  sample: {"min_nodes": [0, 4], "identity": [[], ["/subscriptions/.../userAssignedIdentities/stage-reader"]]}
cluster:
  description:
    - The cluster's properties after the change (as far as the SDK reports them); C(identity) lists
      its user-assigned identities' ARM ids as Azure spells them.
  returned: when the cluster exists
  type: dict
  sample: {"name": "gpu-a100", "vm_size": "STANDARD_ND96ASR_V4", "min_nodes": 4, "max_nodes": 4,
           "admin_user": "azureuser", "remote_login_port_public_access": "Enabled", "identity": []}
nodes:
  description: The nodes after waiting, as list_nodes() records.
  returned: when O(wait) ran
  type: list
  elements: dict
wait_status:
  description: The last word on the nodes while waiting.
  returned: when O(wait) ran
  type: str
  sample: 4 node(s) idle
"""

import os
import socket
import time
from typing import Any

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.azure.aml_nodes import (
    AmlNodesError,
    ClusterInfo,
    ClusterSpec,
    TEARDOWN_IDLE_SECONDS,
    auth_argument_spec,
    nodes_from_records,
    nodes_ready,
    plan_cluster,
    plan_scale_to_zero,
    plan_summary,
    resolve_auth,
    spec_problems,
    subscription_from,
    teardown_eta,
)
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.sdk.aml_sdk import connect
from ansible.module_utils.basic import AnsibleModule


def ssh_banner(host: str, port: int, timeout: float = 5.0) -> bool:
    """Whether an SSH server answers on host:port (it speaks first: "SSH-2.0-...")."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            return conn.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def _info_dict(info: ClusterInfo | None) -> dict[str, Any]:
    if info is None:
        return {}
    out = {k: getattr(info, k) for k in ("name", "vm_size", "min_nodes", "max_nodes", "admin_user",
                                         "remote_login_port_public_access", "provisioning_state", "subnet",
                                         "node_public_ip")}
    out["identity"] = list(info.identity_ids)
    return out


def ssh_endpoint(node: Any, use_private_ip: bool, ssh_port: int) -> tuple[str | None, int | None]:
    """Where the controller reaches ``node``'s sshd: its private IP and ``ssh_port``, or its public IP and NAT port."""
    return (node.private_ip, ssh_port) if use_private_ip else (node.public_ip, node.port)


def wait_for_nodes(module: AnsibleModule, client, name: str, want: int, reachable: bool) -> tuple[list, str]:
    private, ssh_port = module.params["use_private_ip"], module.params["ssh_port"]
    deadline = time.monotonic() + module.params["wait_timeout"]
    status = "not looked yet"
    while True:
        records = client.list_nodes(name)
        nodes = nodes_from_records(records, name, f"cluster '{name}'")
        if want == 0:
            ok, status = (not nodes), f"{len(nodes)} node(s) left"
        else:
            ok, status = nodes_ready(nodes, want)
            if ok and reachable:
                endpoints = {n.node_id: ssh_endpoint(n, private, ssh_port) for n in nodes}
                unaddressed = [n.node_id for n in nodes if None in endpoints[n.node_id]]
                if unaddressed:
                    module.fail_json(msg=f"cluster '{name}': node(s) {', '.join(unaddressed[:5])} have no public IP "
                                         "(a cluster without node public IPs): set use_private_ip: true and run from "
                                         "inside the VNet, or check_reachable: false", wait_status=status)
                silent = [f"{n.node_id} ({endpoints[n.node_id][0]}:{endpoints[n.node_id][1]})" for n in nodes
                          if not ssh_banner(*endpoints[n.node_id])]
                if silent:
                    ok, status = False, f"{len(silent)} node(s) idle but not answering on SSH: {', '.join(silent[:5])}"
        if ok:
            return [n.record() for n in nodes], status
        if time.monotonic() >= deadline:
            if want == 0:
                idle = module.params["idle_seconds_before_scaledown"]
                module.fail_json(msg=f"cluster '{name}' scaled to 0, but after {module.params['wait_timeout']}s: "
                                     + teardown_eta(nodes, name, TEARDOWN_IDLE_SECONDS if idle is None else idle),
                                 wait_status=status)
            module.fail_json(msg=f"cluster '{name}' not ready after {module.params['wait_timeout']}s: {status}",
                             wait_status=status)
        time.sleep(module.params["poll_interval"])


def run(module: AnsibleModule) -> dict[str, Any]:
    p = module.params
    name = p["name"]
    auth = resolve_auth(p["auth_source"], p, os.environ)
    client = connect(p["sdk"], subscription_from(p, os.environ), p["resource_group"], p["workspace_name"], auth)
    result: dict[str, Any] = {"changed": False}

    if p["state"] == "scaled_to_zero":
        idle = p["idle_seconds_before_scaledown"]
        idle = TEARDOWN_IDLE_SECONDS if idle is None else idle
        current = client.cluster(name)
        plan = plan_scale_to_zero(current, idle)
        want = 0
    else:
        missing = [k for k in ("vm_size", "max_nodes", "admin_user", "ssh_public_key") if not p[k]]
        if missing:
            module.fail_json(msg=f"state present needs {', '.join(missing)}")
        spec = ClusterSpec(name=name, vm_size=p["vm_size"], max_nodes=p["max_nodes"],
                           min_nodes=p["max_nodes"] if p["min_nodes"] is None else p["min_nodes"],
                           admin_user=p["admin_user"], ssh_public_key=p["ssh_public_key"].strip(),
                           remote_login_port_public_access=p["remote_login_port_public_access"],
                           vm_priority=p["vm_priority"],
                           idle_seconds_before_scaledown=p["idle_seconds_before_scaledown"],
                           beeond_enabled=p["beeond_enabled"], identity_resource_id=p["identity_resource_id"],
                           subnet=p["subnet"], node_public_ip=p["node_public_ip"])
        problems = spec_problems(spec)
        if problems:
            module.fail_json(msg="; ".join(problems))  # before any call
        current = client.cluster(name)
        plan = plan_cluster(spec, current, sdk=p["sdk"])
        want = spec.min_nodes

    result.update(action=plan.action, changes={k: list(v) for k, v in plan.changes.items()},
                  summary=plan_summary(plan))
    result["changed"] = plan.action != "none"
    before = _info_dict(current)
    after = dict(before)
    for key, (_old, new) in plan.changes.items():
        if key in after or current is not None:
            after[key] = new
    if plan.action == "create":
        after = {"name": name, "vm_size": spec.vm_size, "min_nodes": spec.min_nodes, "max_nodes": spec.max_nodes,
                 "admin_user": spec.admin_user, "remote_login_port_public_access": spec.remote_login_port_public_access,
                 "identity": [spec.identity_resource_id] if spec.identity_resource_id else [],
                 "subnet": spec.subnet, "node_public_ip": spec.node_public_ip}
    if module._diff:
        result["diff"] = {"before": before, "after": after}
    if module.check_mode:
        result["cluster"] = after
        return result

    if plan.action == "create":
        client.create(spec, timeout_s=p["wait_timeout"])
    elif plan.action == "update":
        # The identity first: nodes a scale-up adds come with it.
        if "identity" in plan.changes:
            client.add_identity(name, spec.identity_resource_id, timeout_s=p["wait_timeout"])
        if plan.changes.keys() & {"min_nodes", "max_nodes", "idle_seconds"}:
            new_min = plan.changes.get("min_nodes", (None, current.min_nodes))[1]
            new_max = plan.changes.get("max_nodes", (None, current.max_nodes))[1]
            new_idle = plan.changes.get("idle_seconds", (None, current.idle_seconds))[1]
            client.scale(name, new_min, new_max, new_idle, timeout_s=p["wait_timeout"])
    if plan.action != "none":
        current = client.cluster(name)
    result["cluster"] = _info_dict(current)

    if p["wait"] and current is not None:
        result["nodes"], result["wait_status"] = wait_for_nodes(module, client, name, want, p["check_reachable"])
    if p["state"] == "scaled_to_zero" and current is not None:
        left = [] if p["wait"] else nodes_from_records(client.list_nodes(name), name, f"cluster '{name}'")
        result["msg"] = teardown_eta(left, name, idle)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", default="present", choices=["present", "scaled_to_zero"]),
            # azure-ai-ml (SDK v2) by default: azureml-core (SDK v1) is out of support since 2026-06-30.
            sdk=dict(type="str", default="azure-ai-ml", choices=["azure-ai-ml", "azureml-core"]),
            **auth_argument_spec(workspace_required=True),
            vm_size=dict(type="str"),
            min_nodes=dict(type="int"),
            max_nodes=dict(type="int"),
            vm_priority=dict(type="str", default="dedicated", choices=["dedicated", "lowpriority"]),
            idle_seconds_before_scaledown=dict(type="int"),
            admin_user=dict(type="str"),
            ssh_public_key=dict(type="str", no_log=False),
            remote_login_port_public_access=dict(type="str", default="Enabled",
                                                 choices=["Enabled", "Disabled", "NotSpecified"]),
            beeond_enabled=dict(type="bool", default=False),
            identity_resource_id=dict(type="str", default=""),
            wait=dict(type="bool", default=True),
            wait_timeout=dict(type="int", default=1800),
            poll_interval=dict(type="int", default=15),
            check_reachable=dict(type="bool", default=True),
            subnet=dict(type="str", default=""),
            node_public_ip=dict(type="bool", default=True),
            use_private_ip=dict(type="bool", default=False),
            ssh_port=dict(type="int", default=22),
        ),
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module))
    except AmlNodesError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
