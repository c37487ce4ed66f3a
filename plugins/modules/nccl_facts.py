#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Everything the nccl role reads from a node, in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_facts
short_description: Read what the nccl role decides on from one node in one call
version_added: "1.0.0"
description:
  - Asks the instance metadata service for the VM size (when O(imds) is true), looks for
    the NCCL RDMA/SHARP network plugin (C(libnccl-net.so)) in O(sharp_plugin_dirs), and
    reads the GPU/NIC topology matrix (C(nvidia-smi topo -m)).
  - Replaces a M(ansible.builtin.uri), a M(ansible.builtin.stat) loop and a
    M(ansible.builtin.command) task, so that the controller pays for one module run per
    node instead of three or more. Read-only; runs in check mode too.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  imds:
    description: Ask instance metadata (false when the VM size is known from the inventory).
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
    description: Folders that may hold C(libnccl-net.so), in order of preference.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: The nvidia-smi executable (name on PATH or full path).
    type: str
    default: nvidia-smi
  vm_size:
    description: The VM size when the inventory knows it (else the one instance metadata gives).
    type: str
    default: ""
  image_topo_files:
    description:
      - Topology files the image may ship, C({name}) standing for the VM size's topology
        (ndv4, ndv5, ndv2); the first that exists is returned as RV(image_topo_file).
    type: list
    elements: str
    default: []
author:
  - amlhpc contributors (@amlhpc)
"""

EXAMPLES = r"""
- name: NCCL | Read the VM size, the SHARP plugin and the topology matrix
  amlhpc.azureml.nccl_facts:
    imds: "{{ nccl_vm_size | length == 0 and nccl_imds_enabled | bool }}"
    sharp_plugin_dirs: "{{ nccl_sharp_plugin_dirs }}"
  register: nccl_probe
"""

RETURN = r"""
imds:
  description: Shaped like M(ansible.builtin.uri)'s result - C(status) (-1 when not reached
    or not asked), C(json) (the metadata document when 200), C(msg).
  type: dict
  returned: always
sharp_plugin_dirs_found:
  description: The folders of O(sharp_plugin_dirs) that hold C(libnccl-net.so), in order.
  type: list
  elements: str
  returned: always
topo_m:
  description: C(rc) and C(stdout) of C(nvidia-smi topo -m) (rc -1 when nvidia-smi is absent).
  type: dict
  returned: always
image_topo_file:
  description: The first of O(image_topo_files) that exists for this VM size, else empty.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nccl_probe import probe


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "imds": {"type": "bool", "default": True},
            "imds_url": {"type": "str", "default": "http://169.254.169.254/metadata/instance?api-version=2021-02-01"},
            "imds_timeout": {"type": "int", "default": 3},
            "sharp_plugin_dirs": {"type": "list", "elements": "str", "default": []},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "vm_size": {"type": "str", "default": ""},
            "image_topo_files": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(changed=False, **probe(module, ask_imds=p["imds"], imds_url=p["imds_url"],
                                            imds_timeout=p["imds_timeout"], sharp_plugin_dirs=p["sharp_plugin_dirs"],
                                            nvidia_smi=p["nvidia_smi"], vm_size=p["vm_size"],
                                            image_topo_files=p["image_topo_files"]))


if __name__ == "__main__":
    main()
