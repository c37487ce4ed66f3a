# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Inventory plugin: the nodes of AzureML compute clusters (AmlCompute) as hosts."""

from __future__ import annotations

DOCUMENTATION = r"""
name: azureml_compute
short_description: AzureML compute cluster (AmlCompute) nodes as hosts
version_added: "1.0.0"
description:
  - Turns the nodes of one or more AzureML compute clusters into hosts, read through azure-ai-ml (SDK v2, the
    default), azureml-core (SDK v1) or a saved C(list_nodes()) payload.
  - Reads configuration files whose names end in C(.azureml_compute.yml) or C(.azureml_compute.yaml); any
    other file is left to other plugins.
  - "Every node goes in group C(aml_nodes) and in C(cluster_<name>) (characters other than letters, digits and
    C(_) become C(_)); rank 0 of each cluster goes in C(head), the other nodes in C(workers)."
  - "Ranks follow the public SSH port (then private IP, then nodeId), so they do not depend on the order the
    API lists nodes in; host names are C(<cluster>-<rank>) by default, stable while the node set is
    unchanged."
  - Nodes in state unusable, leaving or preempted are left out by default, with a warning that names them.
  - When the node behind a host name changes (a node replaced, ranks shifted), the host's cached facts are
    emptied and its ssh connection is a new one. See docs/operations.md, Host keys and node replacement.
  - "Host vars: C(ansible_host) (public IP), C(ansible_port) (the node's public SSH port), C(ansible_user)
    (the cluster's admin user), C(aml_cluster), C(aml_node_rank), C(aml_private_ip), C(aml_public_ip),
    C(aml_public_port), C(aml_node_id), C(aml_node_state), C(aml_run_id), and when the cluster's properties
    are known C(aml_cluster_min_nodes), C(aml_cluster_max_nodes), C(aml_vm_size), C(ansible_control_path);
    with O(known_hosts) also C(ansible_ssh_common_args), C(ansible_host_key_checking),
    C(ansible_ssh_host_key_checking), C(aml_known_hosts_file), C(aml_host_keys) (the node id's pinned host
    keys, C(type base64)) and, for a node that offers another key than its pin, C(aml_host_key_refused) (the
    sentence that names it and the fix)."
  - The workspace and credential options (O(subscription_id), O(resource_group), O(workspace_name),
    O(auth_source), O(client_id), O(secret), O(tenant)) are templated, so a lookup (C(ansible.builtin.env),
    for instance) or a vault-encrypted value works.
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
      - Where the nodes come from. C(azure-ai-ml) (SDK v2, the default) asks the workspace; C(azureml-core)
        (SDK v1, out of support since 2026-06-30, the default before 2.0.0) is for workspaces still on it.
      - C(nodes_file) reads a saved C(list_nodes()) payload (O(clusters[].nodes_file) or O(nodes_file)) and
        calls no SDK. See docs/architecture.md, Inventory plugin design.
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
      - The clusters to read, each a cluster name or a mapping with O(clusters[].name) and optional overrides.
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
      - A JMESPath expression evaluated on each node's record (C(cluster), C(nodeId), C(privateIpAddress),
        C(publicIpAddress), C(port), C(nodeState), C(runId)); the node is kept when the result is truthy.
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
      - Connect to the private IP on port O(ssh_port) instead of the public IP and NAT port (for a controller
        inside the cluster's VNet, or clusters without node public IPs).
    type: bool
    default: false
  ssh_port:
    description: The SSH port used with O(use_private_ip).
    type: int
    default: 22
  allow_empty:
    description:
      - Warn instead of failing when none of a cluster's nodes is left after O(exclude_states) and
        O(node_filter).
      - A cluster that does not exist yet, or has no nodes, is always a warning and reads as empty, so that
        C(site.yml) can create or scale it. See docs/operations.md, The inventory.
    type: bool
    default: false
  known_hosts:
    description:
      - Keep the controller's known_hosts for the nodes, so that ssh checks their host keys without a prompt.
        Each node id's keys are pinned when it is first seen (a warning names it); a node that later offers
        another key is refused, whatever host key checking says, and a warning names the fix.
      - C(false) leaves host keys to you (an SSH certificate authority, your own known_hosts). See
        docs/operations.md, Host keys and node replacement.
    type: bool
    default: true
    env:
      - name: AMLHPC_KNOWN_HOSTS
  known_hosts_file:
    description:
      - The controller's known_hosts file for the nodes, with each node id's pinned keys beside it in
        C(<file>.nodes.json), which C(make clean) leaves and C(make forget-pins) removes.
      - Set in C(ansible.cfg) or this file, a relative path is relative to that file; without it,
        C(amlhpc/known_hosts) in O(ansible_home). See docs/operations.md, Host keys and node replacement.
    type: path
    env:
      - name: AMLHPC_KNOWN_HOSTS_FILE
    ini:
      - section: inventory_plugin_azureml_compute
        key: known_hosts_file
    version_added: 2.2.0
  known_hosts_migrate_from:
    description:
      - Where the pins were kept before (C(.cache/known_hosts) in 2.2.0). Where O(known_hosts_file) has no
        pins yet, the first read moves them from here, with a warning, and never reads this place again. See
        docs/operations.md, Host keys and node replacement.
    type: path
    env:
      - name: AMLHPC_KNOWN_HOSTS_MIGRATE_FROM
    ini:
      - section: inventory_plugin_azureml_compute
        key: known_hosts_migrate_from
    version_added: 2.3.0
  ansible_home:
    description:
      - Ansible's home folder (the C(home) setting of C(ansible.cfg)), where the default O(known_hosts_file)
        goes. See docs/architecture.md, Inventory plugin design.
    type: path
    default: ~/.ansible
    env:
      - name: ANSIBLE_HOME
    ini:
      - section: defaults
        key: home
    version_added: 2.2.0
  known_hosts_verify:
    description:
      - Whose live host keys a read compares with their pin; a node that offers another key is named in a
        warning, and in the host var C(aml_host_key_refused), with the fix.
      - C(edited) compares the nodes whose known_hosts lines were deleted or edited (elsewhere ssh itself
        refuses a changed key), C(always) every node on every read (slow at scale), C(never) none. See
        docs/architecture.md, Inventory plugin design.
    type: str
    default: edited
    choices: [edited, always, never]
    env:
      - name: AMLHPC_KNOWN_HOSTS_VERIFY
    version_added: 2.2.0
  known_hosts_repin:
    description:
      - Node ids whose pin is replaced by the keys they offer now, for a node you know was re-imaged under the
        same node id (a warning names each). Set it for one run, then remove it.
    type: list
    elements: str
    default: []
    env:
      - name: AMLHPC_KNOWN_HOSTS_REPIN
    version_added: 2.2.0
  ssh_control_path:
    description:
      - Give every host an C(ansible_control_path) of its own node id, so that a new node behind an old
        endpoint gets a new ssh connection. C(false) leaves the ssh connection's own C(control_path) (and
        yours) in force. See docs/architecture.md, Inventory plugin design.
    type: bool
    default: true
    version_added: 2.2.0
  control_path_dir:
    description:
      - The ssh connection's C(control_path_dir), where the kept connection to a node whose key is refused is
        closed; without it, C(cp) in O(ansible_home). See docs/architecture.md, Inventory plugin design.
    type: path
    env:
      - name: ANSIBLE_SSH_CONTROL_PATH_DIR
    ini:
      - section: ssh_connection
        key: control_path_dir
    version_added: 2.3.0
  fact_caching:
    description:
      - The fact cache plugin (C([defaults] fact_caching)) whose entries of a host are emptied when the node
        behind the host name changed. See docs/architecture.md, Inventory plugin design.
    type: str
    default: memory
    env:
      - name: ANSIBLE_CACHE_PLUGIN
    ini:
      - section: defaults
        key: fact_caching
    version_added: 2.2.0
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

import json
import os
import sys
from typing import Any

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable, get_cache_plugin
from ansible.module_utils.ansible_release import __version__ as ansible_core_version

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.core_range import core_floor_error
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.azure.aml_nodes import (
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
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.trust.host_key_checks import HOST_KEY_CHECKING_VARS
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.trust.known_hosts import (
    Endpoint,
    RECORD_SUFFIX,
    control_path,
    follow_pins,
    pin_of,
    ssh_common_args,
    stale_fact_hosts,
)
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.trust.known_hosts_io import (
    NodeRecord,
    RecordError,
    close_master,
    scan_keys,
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
        from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.sdk.aml_sdk import connect
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
                    # Host key checking turned off elsewhere would void the pins: these host vars outrank
                    # it (docs/architecture.md, Inventory plugin design).
                    for checking in HOST_KEY_CHECKING_VARS:
                        self.inventory.set_variable(host.name, checking, True)
                    self.inventory.set_variable(host.name, "aml_known_hosts_file", self._known_hosts_file())
                hostvars = self.inventory.get_host(host.name).get_vars()
                self._set_composite_vars(self.get_option("compose"), hostvars, host.name, strict=strict)
                self._add_host_to_composed_groups(self.get_option("groups"), hostvars, host.name, strict=strict)
                self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, host.name, strict=strict)

        self._follow_nodes(endpoints)

    # Known hosts, kept connections and cached facts, tied to node ids ----------------------
    def _known_hosts_file(self, option: str = "known_hosts_file") -> str | None:
        # Written in this configuration file: relative to its folder (get_option resolves a
        # relative path from the environment against the working folder, from ansible.cfg
        # against that file's folder).
        written = (getattr(self, "_config_data", None) or {}).get(option)
        path = written if written and not os.path.isabs(os.path.expanduser(str(written))) else \
            self.get_option(option)
        if path:
            path = os.path.expanduser(str(path))
            return path if os.path.isabs(path) else os.path.join(self._basedir, path)
        if option != "known_hosts_file":
            return None
        home = os.path.expanduser(str(self.get_option("ansible_home") or "~/.ansible"))
        return os.path.join(home if os.path.isabs(home) else os.path.join(self._basedir, home), "amlhpc", "known_hosts")

    def _control_path_dir(self) -> str:
        """The ssh connection's control_path_dir (its default: cp in Ansible's home)."""
        path = self.get_option("control_path_dir")
        if not path:
            path = os.path.join(str(self.get_option("ansible_home") or "~/.ansible"), "cp")
        path = os.path.expanduser(str(path))
        return path if os.path.isabs(path) else os.path.join(self._basedir, path)

    def _follow_nodes(self, endpoints: list[Endpoint]) -> None:
        """Bring the known_hosts file, the pins and the fact cache in line with the nodes read now."""
        path = self._known_hosts_file()
        self._refused: set[str] = set()
        try:
            with NodeRecord(path, self._known_hosts_file("known_hosts_migrate_from")).locked() as record:
                text = None
                if self.get_option("known_hosts"):
                    text = self._update_known_hosts(record, path, endpoints)
                current = {e.host: e.node_id for e in endpoints}
                stale = stale_fact_hosts(current, record.hosts)
                if stale:
                    self._forget_facts(stale)
                record.hosts.update(current)
                record.save(text)
                if record.moved_from:
                    self.display.warning(f"the host key pins were moved from {record.moved_from}{RECORD_SUFFIX} to "
                                         f"{record.record_path}, state that no clean-up of caches removes; the "
                                         "old place is not read again")
        except RecordError as exc:
            raise AmlNodesError(str(exc)) from None
        for endpoint in endpoints:
            keys = (pin_of(record.pins, endpoint) or []) if self.get_option("known_hosts") else []
            if self.get_option("ssh_control_path"):
                path = control_path(endpoint, keys)
                self.inventory.set_variable(endpoint.host, "ansible_control_path", path)
                if endpoint.host in self._refused and close_master(path % {"directory": self._control_path_dir()},
                                                                   endpoint.address):
                    # The sentence says ssh refuses the node: so it does, not through the old master.
                    self.display.vvv(f"azureml_compute: closed the ssh master of {endpoint.host} (host key changed)")
            if self.get_option("known_hosts"):
                self.inventory.set_variable(endpoint.host, "aml_host_keys", keys)

    def _update_known_hosts(self, record: NodeRecord, path: str, endpoints: list[Endpoint]) -> str:
        """Pin new node ids, put known ones back from their pins, compare the live keys of known
        ones with their pins (module_utils/amlhpc/trust/known_hosts.py follow_pins); the new text."""
        timeout = self.get_option("known_hosts_scan_timeout")
        outcome = follow_pins(record, endpoints, lambda todo: scan_keys(todo, timeout=timeout),
                              repin=[str(n) for n in self.get_option("known_hosts_repin") or []],
                              verify=str(self.get_option("known_hosts_verify")), path=path,
                              config=self._config_path)
        for warning in outcome.warnings:
            self.display.warning(warning)
        self._refused = set(outcome.refused)
        for host, sentence in outcome.refused.items():
            self.inventory.set_variable(host, "aml_host_key_refused", sentence)
        if record.migrated:
            self.display.vvv(f"azureml_compute: pinned the keys {path} held for {len(record.endpoints)} endpoint(s) "
                             f"(a record from before pins) in {record.record_path}")
        return outcome.text

    def _forget_facts(self, hosts: list[str]) -> None:
        """Empty the cached facts of host names that now stand for another node, in the fact cache
        [defaults] fact_caching names: the next play with fact gathering gathers them again."""
        name = self.get_option("fact_caching") or "memory"
        if name in ("memory", "ansible.builtin.memory"):
            return  # nothing outlives the process that gathered it
        try:
            cache = get_cache_plugin(name)
            for host in hosts:
                if cache.get(host) is not None:
                    cache[host] = {}
            cache.set_cache()
        except Exception as exc:  # a broken fact cache is the fact cache's problem, reported there
            self.display.vvv(f"azureml_compute: fact cache {name} not emptied for {', '.join(hosts)}: {exc}")
            return
        self.display.vvv(f"azureml_compute: emptied the cached facts of {', '.join(hosts)} (node id changed)")

    def _empty(self, sentence: str) -> None:
        if not self.get_option("allow_empty"):
            raise AmlNodesError(sentence)
        self.display.warning(sentence)

    def parse(self, inventory, loader, path, cache=True):
        refused = core_floor_error(ansible_core_version)
        if refused:
            raise AnsibleParserError(refused)
        super().parse(inventory, loader, path, cache)
        self._config_data = self._read_config_data(path)
        self._basedir = os.path.dirname(os.path.abspath(path))
        self._config_path = path
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
