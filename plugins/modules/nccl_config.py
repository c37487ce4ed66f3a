#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The nccl role's whole work on a node in one call: read, decide, write."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_config
short_description: Read a node, settle its NCCL topology and pinning, write nccl.conf and the job environment file
version_added: "1.0.0"
description:
  - Reads what M(amlhpc.azureml.nccl_facts) reads (instance metadata when the VM size is not
    known, the NCCL RDMA/SHARP plugin, C(nvidia-smi topo -m), the image's own topology file),
    settles the VM size, the topology file in use and the GPU-to-NUMA pinning, and writes the
    topology file (or removes a stale one), C(/etc/nccl.conf) and the environment file jobs
    source, each only when its content, owner or mode differ.
  - One module run per node on the controller instead of a probe, three M(ansible.builtin.set_fact),
    two messages and a write.
  - Its action plugin reads O(topo_file_src) on the controller (a role's C(files/) or a path) and
    makes RV(facts) host variables of the play (like M(ansible.builtin.set_fact), not cached),
    C(nccl_vm_size_found), C(nccl_vm_size_source), C(nccl_topology), C(nccl_topo_file_in_use),
    C(nccl_pinning), C(nccl_env_file) (C(path) and C(content) of the env file as written).
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Reads the node, writes nothing; reports what would change.
  diff_mode:
    support: full
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  vm_size:
    description: The VM size when the inventory knows it; empty - ask instance metadata (O(imds)).
    type: str
    default: ""
  imds:
    description: Ask instance metadata for the VM size when O(vm_size) is empty.
    type: bool
    default: true
  imds_url:
    description: The instance metadata URL.
    type: str
    default: http://169.254.169.254/metadata/instance?api-version=2021-02-01
  imds_timeout:
    description: Seconds to wait for instance metadata.
    type: int
    default: 3
  sharp_plugin_dirs:
    description: Folders that may hold C(libnccl-net.so); the first that has it goes in front of C(LD_LIBRARY_PATH).
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: The nvidia-smi executable (name on PATH or full path), read for C(topo -m).
    type: str
    default: nvidia-smi
  image_topo_files:
    description: Topology files the image may ship, C({name}) standing for the VM size's topology (ndv4, ndv5, ndv2).
    type: list
    elements: str
    default: []
  topo_file_src:
    description:
      - A topology file of the user's on the controller; it wins over the VM size's table and
        the image's file. The action plugin reads it and passes its text as O(topo_file_content).
    type: str
    default: ""
  topo_file_content:
    description: The text of O(topo_file_src) (set by the action plugin).
    type: str
  topo_file_dest:
    description: Where the topology file goes on the node.
    type: path
    default: /etc/amlhpc/nccl-topo.xml
  conf_path:
    description: NCCL's configuration file.
    type: path
    default: /etc/nccl.conf
  conf_settings:
    description: Its settings (a null or empty value drops a key); C(NCCL_TOPO_FILE) is added when a topology file is in use.
    type: dict
    default: {}
  conf_extra:
    description: More settings, merged over O(conf_settings) (a null value drops a key).
    type: dict
    default: {}
  conf_backup:
    description: Keep the O(conf_path) it replaces as a time-stamped backup.
    type: bool
    default: true
  env_path:
    description: The environment file jobs source.
    type: path
    default: /etc/amlhpc/nccl.env
  env:
    description: Its variables (exported, shell-quoted; a null or empty value drops a key).
    type: dict
    default: {}
  env_extra:
    description: More variables, merged over O(env) (a null value drops a key).
    type: dict
    default: {}
author:
  - amlhpc contributors (@amlhpc)
seealso:
  - module: amlhpc.azureml.nccl_facts
  - module: amlhpc.azureml.amlhpc_files
"""

EXAMPLES = r"""
- name: NCCL | Read the node, then write the topology file, nccl.conf and the job environment file
  amlhpc.azureml.nccl_config:
    vm_size: Standard_ND96asr_v4
    sharp_plugin_dirs: [/usr/local/nccl-rdma-sharp-plugins/lib]
    image_topo_files: ["/opt/microsoft/{name}/topo.xml"]
    conf_settings: {NCCL_IB_PCI_RELAXED_ORDERING: 1}
    env: {NCCL_SOCKET_IFNAME: eth0}
  become: true
"""

RETURN = r"""
msg:
  description: The topology file in use and where it comes from, and the pinning.
  type: str
  returned: always
  sample: "NCCL_TOPO_FILE=/etc/amlhpc/nccl-topo.xml from ndv4 table; GPU order 2,3,0,1,6,7,4,5, ..."
facts:
  description:
    - C(nccl_vm_size_found), C(nccl_vm_size_source), C(nccl_topology) (C(name) and C(gpu), or
      null), C(nccl_topo_file_in_use) (empty when none), C(nccl_env_file) (C(path) and
      C(content) of the job environment file as written, or as it would be in check mode) and
      C(nccl_pinning) (see the nccl
      role's README). The action plugin makes them host variables.
  type: dict
  returned: always
probe:
  description: What was read on the node, as M(amlhpc.azureml.nccl_facts) returns it.
  type: dict
  returned: always
changed_files:
  description: Paths written, made or removed (or that would be, in check mode).
  type: list
  elements: str
  returned: always
backups:
  description: Backup files made, by path.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.files import apply
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nccl import node_plan
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nccl_read import CONFIG_ARGUMENT_SPEC
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nccl_probe import probe


def main() -> None:
    module = AnsibleModule(argument_spec=CONFIG_ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if p["topo_file_src"] and p["topo_file_content"] is None:
        module.fail_json(msg=f"topo_file_src {p['topo_file_src']!r} was given without its text (topo_file_content): "
                             "run the module through its action plugin (amlhpc.azureml.nccl_config), which reads it")
    found = probe(module, ask_imds=p["imds"] and not p["vm_size"], imds_url=p["imds_url"],
                  imds_timeout=p["imds_timeout"], sharp_plugin_dirs=p["sharp_plugin_dirs"],
                  nvidia_smi=p["nvidia_smi"], vm_size=p["vm_size"], image_topo_files=p["image_topo_files"])
    try:
        plan = node_plan(found, vm_size=p["vm_size"], topo_file_src=p["topo_file_src"],
                         topo_file_content=p["topo_file_content"], topo_file_dest=p["topo_file_dest"],
                         conf_path=p["conf_path"], conf_settings={**p["conf_settings"], **p["conf_extra"]}, conf_backup=p["conf_backup"],
                         env_path=p["env_path"], env={**p["env"], **p["env_extra"]})
    except ValueError as exc:
        module.fail_json(msg=f"nccl settings: {exc}", probe=found)
    written = apply(module, plan["directories"], plan["files"])
    module.exit_json(msg=plan["msg"], facts=plan["facts"], probe=found, **written)


if __name__ == "__main__":
    main()
