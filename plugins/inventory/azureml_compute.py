# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Inventory plugin: the nodes of AzureML compute clusters (AmlCompute) as hosts."""

from __future__ import annotations

DOCUMENTATION = r"""
name: azureml_compute
short_description: AzureML compute cluster (AmlCompute) nodes as hosts
description:
  - Turns the nodes of one or more AzureML compute clusters into hosts, from
    C(AmlCompute.list_nodes()) (azureml-core, SDK v1), C(MLClient.compute.list_nodes())
    (azure-ai-ml, SDK v2) or a JSON file holding such a payload.
  - Reads configuration files whose names end in C(.azureml_compute.yml) or
    C(.azureml_compute.yaml); any other file is left to other plugins.
  - "Every node goes in group C(aml_nodes) and in C(cluster_<name>) (characters other than
    letters, digits and C(_) become C(_)); rank 0 of each cluster goes in C(head), the other
    nodes in C(workers)."
  - "Ranks follow the public SSH port (then private IP, then nodeId), so they do not depend
    on the order the API lists nodes in; host names are C(<cluster>-<rank>) by default,
    stable while the node set is unchanged."
  - Nodes in state unusable, leaving or preempted are left out by default, with a warning
    that names them.
  - "Host vars: C(ansible_host) (public IP), C(ansible_port) (the node's public SSH port),
    C(ansible_user) (the cluster's admin user), C(aml_cluster), C(aml_node_rank),
    C(aml_private_ip), C(aml_public_ip), C(aml_public_port), C(aml_node_id),
    C(aml_node_state), C(aml_run_id), and when the cluster's properties are known
    C(aml_cluster_min_nodes), C(aml_cluster_max_nodes), C(aml_vm_size)."
  - azure-ai-ml 1.35.x returns node objects whose snake_case attributes are empty; the
    plugin reads the camelCase payload they carry instead.
  - The workspace and credential options (O(subscription_id), O(resource_group),
    O(workspace_name), O(auth_source), O(client_id), O(secret), O(tenant)) are templated, so a
    lookup (C(ansible.builtin.env), for instance) or a vault-encrypted value works.
author:
  - amlhpc contributors (@amlhpc)
requirements:
  - jmespath (for O(node_filter))
  - azureml-core (source azureml-core)
  - azure-ai-ml and azure-identity (source azure-ai-ml)
extends_documentation_fragment:
  - amlhpc.azureml.azure_auth
  - constructed
  - inventory_cache
options:
  plugin:
    description: The name of this plugin; the file is not ours without it.
    required: true
    choices: [amlhpc.azureml.azureml_compute]
  source:
    description:
      - Where the nodes come from.
      - C(azureml-core) uses C(Workspace) and C(AmlCompute(ws, name).list_nodes()).
      - C(azure-ai-ml) uses C(MLClient.compute.list_nodes(name)). Microsoft ended support for
        SDK v1 on 2026-06-30.
      - C(nodes_file) reads O(clusters[].nodes_file) (or O(nodes_file)) and calls no SDK.
    type: str
    default: azureml-core
    choices: [azureml-core, azure-ai-ml, nodes_file]
  subscription_id:
    env:
      - name: AZURE_SUBSCRIPTION_ID
  auth_source:
    env:
      - name: ANSIBLE_AZURE_AUTH_SOURCE
  clusters:
    description:
      - The clusters to read. Each item is a cluster name or a mapping with O(clusters[].name)
        and optional overrides.
    type: list
    elements: raw
    default: []
    suboptions:
      name:
        description: Cluster name.
        type: str
        required: true
      nodes_file:
        description:
          - For O(source=nodes_file), JSON holding this cluster's C(list_nodes()) payload.
          - A relative path is relative to the folder of this configuration file.
        type: str
      admin_user:
        description: Admin user; taken from the cluster's properties when the SDK knows it.
        type: str
      min_nodes:
        description: Minimum node count; from the cluster's properties when known.
        type: int
      max_nodes:
        description: Maximum node count; from the cluster's properties when known.
        type: int
      vm_size:
        description: VM size; from the cluster's properties when known.
        type: str
  cluster:
    description: Shorthand for a single cluster (with O(nodes_file), O(admin_user), ...).
    type: str
  nodes_file:
    description: Shorthand for the O(clusters[].nodes_file) of the single O(cluster).
    type: str
  admin_user:
    description: Default admin user for clusters whose properties do not say.
    type: str
  min_nodes:
    description: Default min node count for clusters whose properties do not say.
    type: int
  max_nodes:
    description: Default max node count for clusters whose properties do not say.
    type: int
  vm_size:
    description: Default VM size for clusters whose properties do not say.
    type: str
  ansible_user:
    description: Log in as this user instead of the cluster's admin user.
    type: str
  node_filter:
    description:
      - A JMESPath expression evaluated on each node's record; the node is kept when the
        result is truthy. The record has C(cluster), C(nodeId), C(privateIpAddress),
        C(publicIpAddress), C(port), C(nodeState) and C(runId).
      - Applied after O(exclude_states), before ranks are given.
    type: str
  exclude_states:
    description: Node states left out (with a warning naming the nodes). C([]) keeps all.
    type: list
    elements: str
    default: [unusable, leaving, preempted]
  hostnames:
    description: C(rank) names hosts C(<cluster>-<rank>); C(node_id) names them C(<cluster>-<nodeId>).
    type: str
    default: rank
    choices: [rank, node_id]
  use_private_ip:
    description:
      - Connect to the private IP on port O(ssh_port) instead of the public IP and NAT port
        (for a controller inside the cluster's VNet, or clusters without node public IPs).
    type: bool
    default: false
  ssh_port:
    description: The SSH port used with O(use_private_ip).
    type: int
    default: 22
  allow_empty:
    description: A cluster without (usable) nodes is a warning instead of an error.
    type: bool
    default: false
"""

EXAMPLES = r"""
---
# inventory/prod.azureml_compute.yml: azureml-core, service principal from AZURE_* variables
plugin: amlhpc.azureml.azureml_compute
source: azureml-core
subscription_id: 00000000-0000-0000-0000-000000000000
resource_group: rg-hpc
workspace_name: ws-hpc
auth_source: env
clusters: [gpu-a100]

---
# azure-ai-ml (SDK v2), a service principal whose secret comes from a lookup, only idle nodes
plugin: amlhpc.azureml.azureml_compute
source: azure-ai-ml
resource_group: rg-hpc
workspace_name: ws-hpc
auth_source: service_principal
client_id: 11111111-1111-1111-1111-111111111111
tenant: 22222222-2222-2222-2222-222222222222
secret: "{{ lookup('ansible.builtin.env', 'HPC_SP_SECRET') }}"
clusters:
  - name: gpu-a100
  - name: cpu-prep
node_filter: "nodeState == 'idle'"
keyed_groups:
  - key: aml_vm_size
    prefix: vm
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: .cache/inventory
cache_timeout: 300

---
# A saved list_nodes() payload (air-gapped, tests, local clusters)
plugin: amlhpc.azureml.azureml_compute
source: nodes_file
cluster: gpu
nodes_file: nodes.json
admin_user: azureuser
min_nodes: 4
max_nodes: 4
vm_size: Standard_ND96asr_v4
"""

import json
import os
import sys
from typing import Any

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.aml_nodes import (
    AmlNodesError,
    ClusterInfo,
    apply_filter,
    left_out_warning,
    load_nodes_file,
    no_nodes,
    nodes_from_records,
    none_left,
    plan_hosts,
    resolve_auth,
    split_by_state,
    subscription_from,
)

_TEMPLATED = ("subscription_id", "resource_group", "workspace_name", "client_id", "secret", "tenant")
_PROPERTY_KEYS = ("admin_user", "min_nodes", "max_nodes", "vm_size")


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """azureml_compute inventory plugin."""

    NAME = "amlhpc.azureml.azureml_compute"

    def verify_file(self, path: str) -> bool:
        return super().verify_file(path) and path.endswith((".azureml_compute.yml", ".azureml_compute.yaml"))

    # Options ---------------------------------------------------------------------------
    def _templated(self, name: str) -> str | None:
        value = self.get_option(name)
        if value is None or value == "":
            return None
        value = self.templar.template(value)
        return None if value is None or value == "" else str(value)

    def _cluster_configs(self) -> list[dict[str, Any]]:
        items = list(self.get_option("clusters") or [])
        if self.get_option("cluster"):
            items.append({"name": self.get_option("cluster"), "nodes_file": self.get_option("nodes_file")})
        if not items:
            raise AmlNodesError("no cluster to read: set clusters: [<name>, ...] (or cluster: <name>)")
        configs, seen = [], set()
        for item in items:
            config = {"name": item} if isinstance(item, str) else dict(item)
            name = config.get("name")
            if not isinstance(name, str) or not name:
                raise AmlNodesError(f"every item of clusters needs a name, got {item!r}")
            if name in seen:
                raise AmlNodesError(f"cluster '{name}' is listed twice")
            seen.add(name)
            for key in _PROPERTY_KEYS:
                if config.get(key) is None and self.get_option(key) is not None:
                    config[key] = self.get_option(key)
            configs.append(config)
        return configs

    def _node_predicate(self):
        expression = self.get_option("node_filter")
        if not expression:
            return None
        try:
            import jmespath
        except ImportError:
            raise AmlNodesError(f"node_filter needs the Python package jmespath, which {sys.executable} cannot "
                                f"import: run `{sys.executable} -m pip install jmespath`") from None
        try:
            compiled = jmespath.compile(expression)
        except jmespath.exceptions.JMESPathError as exc:
            raise AmlNodesError(f"node_filter {expression!r} is not a valid JMESPath expression: {exc}") from None

        def predicate(record: dict[str, Any]) -> bool:
            try:
                return bool(compiled.search(record))
            except jmespath.exceptions.JMESPathError as exc:
                raise AmlNodesError(f"node_filter {expression!r} failed on node {record['nodeId']}: {exc}") from None
        return predicate

    # Fetch -----------------------------------------------------------------------------
    def _fetch(self, configs: list[dict[str, Any]]) -> dict[str, Any]:
        """What the source says, as JSON-able data (this is what the cache holds)."""
        source = self.get_option("source")
        out: dict[str, Any] = {"source": source, "clusters": {}}
        if source == "nodes_file":
            for config in configs:
                path = config.get("nodes_file")
                if not path:
                    raise AmlNodesError(f"source nodes_file needs a nodes_file for cluster '{config['name']}'")
                path = os.path.expanduser(str(path))
                if not os.path.isabs(path):
                    path = os.path.join(self._basedir, path)
                out["clusters"][config["name"]] = {"records": load_nodes_file(path), "properties": {},
                                                   "where": f"nodes file {path}"}
            return out
        from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.aml_sdk import connect
        options = {k: self._templated(k) for k in _TEMPLATED}
        auth = resolve_auth(self.get_option("auth_source"), options, os.environ)
        client = connect(source, subscription_from(options, os.environ), options["resource_group"],
                         options["workspace_name"], auth)
        for config in configs:
            name = config["name"]
            info = client.cluster(name)
            if info is None:
                from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.aml_nodes import cluster_not_found
                raise AmlNodesError(cluster_not_found(name, options["workspace_name"]))
            props = {k: getattr(info, k) for k in _PROPERTY_KEYS if getattr(info, k) is not None}
            out["clusters"][name] = {"records": client.list_nodes(name), "properties": props,
                                     "where": f"cluster '{name}' ({source})"}
        return out

    # Populate --------------------------------------------------------------------------
    def _populate(self, configs: list[dict[str, Any]], data: dict[str, Any]) -> None:
        predicate = self._node_predicate()
        excluded = self.get_option("exclude_states") or []
        strict = self.get_option("strict")
        for config in configs:
            name = config["name"]
            fetched = data["clusters"].get(name)
            if fetched is None:
                raise AmlNodesError(f"cluster '{name}' is not in the cached inventory: run with --flush-cache")
            props = dict(fetched["properties"])
            for key in _PROPERTY_KEYS:  # the file's values override what the SDK said
                if config.get(key) is not None:
                    props[key] = config[key]
            info = ClusterInfo(name=name, **props)
            nodes = nodes_from_records(fetched["records"], name, fetched["where"])
            if not nodes:
                self._empty(no_nodes(name))
                continue
            kept, dropped = split_by_state(nodes, excluded)
            if dropped:
                self.display.warning(left_out_warning(name, dropped))
            kept = apply_filter(kept, predicate)
            if not kept:
                self._empty(none_left(name, len(nodes)))
                continue
            planned = plan_hosts(kept, info, hostnames=self.get_option("hostnames"),
                                 use_private_ip=self.get_option("use_private_ip"),
                                 ansible_user=self.get_option("ansible_user"),
                                 ssh_port=self.get_option("ssh_port"))
            for host in planned:
                for group in host.groups:
                    self.inventory.add_group(group)
                self.inventory.add_host(host.name, group=host.groups[0])
                for group in host.groups[1:]:
                    self.inventory.add_child(group, host.name)
                for key, value in host.vars.items():
                    self.inventory.set_variable(host.name, key, value)
                hostvars = self.inventory.get_host(host.name).get_vars()
                self._set_composite_vars(self.get_option("compose"), hostvars, host.name, strict=strict)
                self._add_host_to_composed_groups(self.get_option("groups"), hostvars, host.name, strict=strict)
                self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, host.name, strict=strict)

    def _empty(self, sentence: str) -> None:
        if not self.get_option("allow_empty"):
            raise AmlNodesError(sentence)
        self.display.warning(sentence)

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        self._basedir = os.path.dirname(os.path.abspath(path))
        try:
            configs = self._cluster_configs()
            cache_key = self.get_cache_key(path)
            use_cache = bool(self.get_option("cache"))
            data = None
            if use_cache and cache:
                try:
                    data = self._cache[cache_key]
                except KeyError:
                    data = None
                if data is not None and set(data.get("clusters", {})) != {c["name"] for c in configs}:
                    data = None
            if data is None:
                data = self._fetch(configs)
                if use_cache:
                    # Round-trip through JSON so the cached and the fresh runs see the same types.
                    self._cache[cache_key] = json.loads(json.dumps(data))
            self._populate(configs, data)
        except AmlNodesError as exc:
            raise AnsibleParserError(f"{path}: {exc}") from None
        except AnsibleError:
            raise
