# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Inventory plugin: the nodes of AzureML compute clusters (AmlCompute) as hosts."""

from __future__ import annotations

DOCUMENTATION = r"""
name: azureml_compute
short_description: AzureML compute cluster (AmlCompute) nodes as hosts
version_added: "1.0.0"
description:
  - Turns the nodes of one or more AzureML compute clusters into hosts, from
    C(MLClient.compute.list_nodes()) (azure-ai-ml, SDK v2, the default),
    C(AmlCompute.list_nodes()) (azureml-core, SDK v1, out of support since 2026-06-30) or a
    JSON file holding such a payload.
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
  - "Cached facts are tied to node ids: when the node behind a host name changed (a node
    replaced, ranks shifted), the host's cached facts are dropped and gathered again."
  - "Kept ssh connections follow node ids too: for an endpoint that now stands for another
    node, or for a node not seen before, the ssh ControlPersist master that ansible-core's
    ssh connection keeps for it (C(control_path_dir), C(control_path) as ansible.cfg and the
    environment set them) is stopped with C(ssh -O exit), so the run does not reach the new
    node through a connection made to the old one. Behind AmlCompute's load balancer such a
    connection is not closed when the VM goes: its packets are dropped, and ssh would wait
    for its keepalives to fail (about two minutes on the twin) before it tried the new node."
  - "Host vars: C(ansible_host) (public IP), C(ansible_port) (the node's public SSH port),
    C(ansible_user) (the cluster's admin user), C(aml_cluster), C(aml_node_rank),
    C(aml_private_ip), C(aml_public_ip), C(aml_public_port), C(aml_node_id),
    C(aml_node_state), C(aml_run_id), and when the cluster's properties are known
    C(aml_cluster_min_nodes), C(aml_cluster_max_nodes), C(aml_vm_size); with O(known_hosts)
    also C(ansible_ssh_common_args) and C(aml_known_hosts_file)."
  - "A port that arrives as an integral float (C(50001.0); azureml-core's REST model types
    the port as a float) is taken as an integer; any other non-integer port is refused."
  - azure-ai-ml 1.35.x returns node objects whose snake_case attributes are empty; the
    plugin reads the camelCase payload they carry instead.
  - The workspace and credential options (O(subscription_id), O(resource_group),
    O(workspace_name), O(auth_source), O(client_id), O(secret), O(tenant)) are templated, so a
    lookup (C(ansible.builtin.env), for instance) or a vault-encrypted value works.
author:
  - amlhpc contributors (@amlhpc)
requirements:
  - jmespath (for O(node_filter))
  - azure-ai-ml and azure-identity (source azure-ai-ml, the default)
  - azureml-core (source azureml-core)
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
      - C(azure-ai-ml) (SDK v2, the default) uses C(MLClient.compute.list_nodes(name)).
      - "C(azureml-core) (SDK v1) uses C(Workspace) and C(AmlCompute(ws, name).list_nodes()). It is
        out of support since 2026-06-30 (Microsoft's end of support for SDK v1); it stays here for
        workspaces that still use it. It was the default before: a file that names no source and
        is to keep reading through azureml-core says C(source: azureml-core) now."
      - C(nodes_file) reads O(clusters[].nodes_file) (or O(nodes_file)) and calls no SDK.
    type: str
    default: azure-ai-ml
    choices: [azure-ai-ml, azureml-core, nodes_file]
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
    description:
      - A cluster none of whose nodes is left after O(exclude_states) and O(node_filter) is a
        warning instead of an error.
      - "A cluster that does not exist yet, or has no nodes (scaled to 0), is always a warning
        and reads as empty, so that C(playbooks/cluster.yml) (first in C(site.yml)) can create
        or scale it and read the inventory again (C(meta: refresh_inventory)); the validate
        play then refuses a run left without nodes. Such a read is not cached."
    type: bool
    default: false
  known_hosts:
    description:
      - Manage the controller's known_hosts for the nodes, so that SSH host key checking stays
        on without a prompt. On every read, each node's endpoint (C([address]:port)) not known
        yet is scanned with C(ssh-keyscan) and recorded with the node's C(nodeId); when
        AmlCompute replaced a node (same endpoint, another C(nodeId)) its old keys are dropped,
        the new node's scanned, and a warning names the node. A key that changes while the
        C(nodeId) stays is refused by ssh. An endpoint missing from a read (an empty or partial
        node list, such as a cluster scaled to 0 or a transient answer) keeps its pinned keys,
        so the same C(nodeId) coming back with another key is refused as well.
      - Every host gets C(ansible_ssh_common_args) C(-o UserKnownHostsFile=<file>
        -o StrictHostKeyChecking=yes) (ssh never asks, it refuses an unknown key) and
        C(aml_known_hosts_file). Put ssh options of your own in O(ssh_common_args).
      - C(false) leaves host keys to you (an SSH certificate authority, your own known_hosts).
    type: bool
    default: true
    env:
      - name: AMLHPC_KNOWN_HOSTS
  known_hosts_file:
    description:
      - The controller's known_hosts file for the nodes; the record of which node id each
        entry belongs to lies beside it (C(<file>.nodes.json)).
      - Default C(.cache/known_hosts) next to the C(ansible.cfg) in use (the project's), or
        next to this configuration file when there is none. A relative path is relative to
        the folder of this configuration file.
    type: path
    env:
      - name: AMLHPC_KNOWN_HOSTS_FILE
  known_hosts_scan_timeout:
    description: Seconds C(ssh-keyscan) waits for a node.
    type: int
    default: 5
  ssh_common_args:
    description: Further ssh options, appended to the C(ansible_ssh_common_args) this plugin sets.
    type: str
    default: ""
"""

EXAMPLES = r"""
---
# inventory/prod.azureml_compute.yml: azure-ai-ml (SDK v2, the default source), the Azure CLI
# login (az login); the subscription comes from AZURE_SUBSCRIPTION_ID
plugin: amlhpc.azureml.azureml_compute
resource_group: rg-hpc
workspace_name: ws-hpc
auth_source: cli
clusters: [gpu-a100]

---
# azure-ai-ml, a service principal whose secret comes from a lookup, only idle nodes
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
# Legacy: azureml-core (SDK v1, out of support since 2026-06-30), for a workspace that still
# uses it; a service principal from the AZURE_* variables
plugin: amlhpc.azureml.azureml_compute
source: azureml-core
subscription_id: 00000000-0000-0000-0000-000000000000
resource_group: rg-hpc
workspace_name: ws-hpc
auth_source: env
clusters: [gpu-a100]

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

import contextlib
import functools
import json
import os
import sys
from typing import Any

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.module_utils.ansible_release import __version__ as ansible_core_version

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.core_range import core_floor_error
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.aml_nodes import (
    AmlNodesError,
    ClusterInfo,
    apply_filter,
    cluster_not_created,
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
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.known_hosts import (
    Endpoint,
    NodeRecord,
    close_masters,
    patterns_in,
    plan_known_hosts,
    replaced_warning,
    rewrite_known_hosts,
    scan_failed_warning,
    scan_keys,
    ssh_common_args,
    stale_fact_hosts,
)

_TEMPLATED = ("subscription_id", "resource_group", "workspace_name", "client_id", "secret", "tenant", "profile",
              "x509_certificate_path", "cloud_environment")
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
                # Not created yet: an empty cluster, so that cluster.yml can create it.
                out["clusters"][name] = {"records": [], "properties": {}, "where": f"cluster '{name}' ({source})",
                                         "missing": cluster_not_created(name, options["workspace_name"] or "")}
                continue
            props = {k: getattr(info, k) for k in _PROPERTY_KEYS if getattr(info, k) is not None}
            out["clusters"][name] = {"records": client.list_nodes(name), "properties": props,
                                     "where": f"cluster '{name}' ({source})"}
        return out

    # Populate --------------------------------------------------------------------------
    def _populate(self, configs: list[dict[str, Any]], data: dict[str, Any]) -> None:
        predicate = self._node_predicate()
        excluded = self.get_option("exclude_states") or []
        strict = self.get_option("strict")
        endpoints: list[Endpoint] = []
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
            if fetched.get("missing"):
                self.display.warning(fetched["missing"])
                continue
            nodes = nodes_from_records(fetched["records"], name, fetched["where"])
            if not nodes:
                self.display.warning(no_nodes(name))
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
                endpoints.append(Endpoint(host.vars["ansible_host"], host.vars["ansible_port"],
                                          host.vars["aml_node_id"], host.name, name,
                                          host.vars.get("ansible_user") or ""))
                if self.get_option("known_hosts"):
                    args = " ".join(a for a in (ssh_common_args(self._known_hosts_file()),
                                                self.get_option("ssh_common_args")) if a)
                    self.inventory.set_variable(host.name, "ansible_ssh_common_args", args)
                    self.inventory.set_variable(host.name, "aml_known_hosts_file", self._known_hosts_file())
                hostvars = self.inventory.get_host(host.name).get_vars()
                self._set_composite_vars(self.get_option("compose"), hostvars, host.name, strict=strict)
                self._add_host_to_composed_groups(self.get_option("groups"), hostvars, host.name, strict=strict)
                self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, host.name, strict=strict)

        self._follow_nodes(endpoints)

    # Known hosts and cached facts, tied to node ids ---------------------------------------
    def _known_hosts_file(self) -> str:
        path = self.get_option("known_hosts_file")
        if path:
            path = os.path.expanduser(str(path))
            return path if os.path.isabs(path) else os.path.join(self._basedir, path)
        from ansible import constants
        base = os.path.dirname(os.path.abspath(constants.CONFIG_FILE)) if constants.CONFIG_FILE else self._basedir
        return os.path.join(base, ".cache", "known_hosts")

    def _follow_nodes(self, endpoints: list[Endpoint]) -> None:
        """Bring the known_hosts file and the fact cache in line with the nodes read now."""
        path = self._known_hosts_file()
        with NodeRecord(path).locked() as record:
            text = None
            moved: list[Endpoint] = []
            if self.get_option("known_hosts"):
                text, moved = self._update_known_hosts(record, path, endpoints)
            current = {e.host: e.node_id for e in endpoints}
            stale = stale_fact_hosts(current, record.hosts)
            if stale:
                self._forget_facts(stale)
            self._close_masters(moved + [e for e in endpoints if e.host in set(stale)])
            record.hosts.update(current)
            record.save(text)

    def _close_masters(self, endpoints: list[Endpoint]) -> None:
        """Stop the ssh ControlPersist masters (ansible.cfg's, the environment's) of the
        endpoints that now stand for another node, or for a node not seen before."""
        if not endpoints:
            return
        from ansible import constants
        from ansible.plugins.loader import connection_loader
        from ansible.utils.path import unfrackpath
        try:
            connection_loader.get("ssh", class_only=True)  # its options' definitions
            option = functools.partial(constants.config.get_config_value, plugin_type="connection", plugin_name="ssh")
            directory, template, ssh = option("control_path_dir"), option("control_path"), option("ssh_executable")
        except Exception as exc:  # no ssh connection plugin settings: no masters of its own either
            self.display.vvv(f"azureml_compute: ssh settings not read: {exc}")
            return
        for endpoint in close_masters(endpoints, unfrackpath(directory), template, ssh=ssh or "ssh"):
            self.display.v(f"cluster '{endpoint.cluster}': closed the kept ssh connection to {endpoint.pattern}, "
                           f"which now stands for {endpoint.host} (node id {endpoint.node_id})")

    def _update_known_hosts(self, record: NodeRecord, path: str, endpoints: list[Endpoint]) -> tuple[str, list[Endpoint]]:
        """Scan new endpoints, replace those with another node id; pin the rest, also those this
        read did not list (module_utils/amlhpc/known_hosts.py)."""
        plan = plan_known_hosts(endpoints, record.endpoints, patterns_in(record.text))
        scanned = scan_keys(plan.to_scan, timeout=self.get_option("known_hosts_scan_timeout"))
        drop = {e.pattern for e, _unused, _unused in plan.replaced}
        add: list[str] = []
        for endpoint, old_id, old_host in plan.replaced:
            self.display.warning(replaced_warning(endpoint, old_id, old_host, path))
            record.endpoints.pop(endpoint.pattern, None)
        for endpoint in plan.to_scan:
            lines, error = scanned[endpoint.pattern]
            if not lines:
                self.display.warning(scan_failed_warning(endpoint, error))
                continue
            add.extend(lines)
            record.endpoints[endpoint.pattern] = {"node_id": endpoint.node_id, "cluster": endpoint.cluster,
                                                  "host": endpoint.host}
        for endpoint in plan.adopt + plan.keep:
            record.endpoints[endpoint.pattern] = {"node_id": endpoint.node_id, "cluster": endpoint.cluster,
                                                  "host": endpoint.host}
        return rewrite_known_hosts(record.text, drop, add), plan.to_scan

    def _forget_facts(self, hosts: list[str]) -> None:
        """Drop the cached facts of host names that now stand for another node."""
        from ansible import constants
        from ansible.plugins.loader import cache_loader
        try:
            cache = cache_loader.get(constants.CACHE_PLUGIN)
        except Exception as exc:  # a broken fact cache is the fact cache's problem, reported there
            self.display.vvv(f"azureml_compute: fact cache not opened: {exc}")
            return
        if cache is None:
            return
        for host in hosts:
            # The default in-memory cache raises for a host it never held (jsonfile does not).
            with contextlib.suppress(KeyError):
                cache.delete(host)
        self.display.vvv(f"azureml_compute: dropped the cached facts of {', '.join(hosts)} (node id changed)")

    def _empty(self, sentence: str) -> None:
        if not self.get_option("allow_empty"):
            raise AmlNodesError(sentence)
        self.display.warning(sentence)

    def parse(self, inventory, loader, path, cache=True):
        refused = core_floor_error(ansible_core_version)
        if refused:
            raise AnsibleParserError(refused)
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
                # A cluster without nodes (not created yet, scaled to 0) is about to change:
                # cluster.yml creates or scales it and reads the inventory again.
                if use_cache and all(c["records"] for c in data["clusters"].values()):
                    # Round-trip through JSON so the cached and the fresh runs see the same types.
                    self._cache[cache_key] = json.loads(json.dumps(data))
            self._populate(configs, data)
        except AmlNodesError as exc:
            raise AnsibleParserError(f"{path}: {exc}") from None
        except AnsibleError:
            raise
