#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Ansible module: the stage role's first task on a node: its checks, the installed azcopy, the install decision."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: azcopy_probe
short_description: Check a node's stage inputs, probe its azcopy and decide whether to install the pinned one
version_added: "1.0.0"
author:
  - amlhpc contributors (@amlhpc)
description:
  - The azcopy probe of the C(amlhpc.azureml.stage) role as a task of its own. Since round 7 the role
    probes inside M(amlhpc.azureml.azcopy_stage) (its O(amlhpc.azureml.azcopy_stage#module:version)
    option), one module run per node instead of two; this module stays for playbooks that probe
    without staging.
  - Its action plugin, on the controller, checks the role's variables against the role's argument
    spec when the role was imported with C(rolespec_validate=false) (the same check and message as
    Ansible's), then that this node has a shard in the plan (O(shard)) and, with O(auth=sas), that a
    SAS is set (O(has_sas)); a node that fails them is not contacted.
  - On the node, the module runs C(<azcopy> --version) (also in check mode; it changes nothing) and
    decides whether the pinned O(version) is to be installed from O(src), or refuses, with the
    role's messages, when there is nothing to install it from or, with O(install=false), when
    azcopy does not run.
  - The action plugin makes C(stage_shard) (O(shard)), C(stage_azcopy_needed) (RV(needed)) and
    C(stage_azcopy_src_kind) (RV(src_kind)) host variables of the play, like
    M(ansible.builtin.set_fact) (not cached).
  - No secret is an option; the SAS never reaches this module.
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Probes as in a real run; it changes nothing either way.
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  azcopy:
    description: Path of the azcopy the role runs (C(stage_azcopy_path)).
    type: path
    default: /usr/local/bin/azcopy
  version:
    description: The pinned azcopy version (C(stage_azcopy_version)); C(<azcopy> --version) prints C(azcopy version <version>).
    type: str
    required: true
  install:
    description: Install azcopy where the pinned version does not run (C(stage_azcopy_install)); false takes any azcopy that runs.
    type: bool
    default: true
  src:
    description: Controller path or https URL of the azcopy release archive or binary (C(stage_azcopy_src)); empty for none.
    type: str
    default: ""
  shard:
    description:
      - This node's entry of the C(azcopy_shards) plan (C(stage_plan.shards[inventory_hostname])); left out
        when the plan has none for this node, which fails the task. Checked on the controller, never sent to the node.
    type: dict
  auth:
    description: How azcopy authenticates (C(stage_auth)); with C(sas), O(has_sas) must be true.
    type: str
    choices: [sas, managed_identity, service_principal, azure_cli]
    default: sas
  has_sas:
    description: Whether C(stage_sas) is set and not empty. Only this truth value, never the SAS, is an option.
    type: bool
    default: false
notes:
  - The role runs the install tasks only where RV(needed) is true, so a node with the pinned azcopy costs the
    controller this one task before the stage.
seealso:
  - module: amlhpc.azureml.azcopy_stage
  - module: amlhpc.azureml.azcopy_shards
"""

EXAMPLES = r"""
- name: Stage | Check the inputs and probe the installed azcopy
  amlhpc.azureml.azcopy_probe:
    azcopy: "{{ stage_azcopy_path }}"
    version: "{{ stage_azcopy_version }}"
    install: "{{ stage_azcopy_install }}"
    src: "{{ stage_azcopy_src }}"
    shard: "{{ stage_plan.shards[inventory_hostname] | default(omit) }}"
    auth: "{{ stage_auth }}"
    has_sas: "{{ stage_sas | default('') | length > 0 }}"

- name: Stage | Install azcopy
  ansible.builtin.include_tasks: install.yml
  when: stage_azcopy_needed
"""

RETURN = r"""
needed:
  description: The pinned azcopy is to be installed (O(install) and it does not run at O(azcopy)); also the host variable C(stage_azcopy_needed).
  returned: success
  type: bool
src_kind:
  description: C(url-archive), C(url-binary), C(file-archive) or C(file-binary), from O(src); also C(stage_azcopy_src_kind).
  returned: success
  type: str
probe:
  description:
    - What C(<azcopy> --version) gave. C(rc) its exit status (the error number when it could not be started),
      C(stdout) its output (e.g. C(azcopy version 10.32.2)), C(stderr) its error output (empty when it could not
      be started).
  returned: always
  type: dict
  sample: {"rc": 0, "stdout": "azcopy version 10.32.2", "stderr": ""}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_cmd import AUTH_MODES
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_install import probe_install


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "azcopy": {"type": "path", "default": "/usr/local/bin/azcopy"},
            "version": {"type": "str", "required": True},
            "install": {"type": "bool", "default": True},
            "src": {"type": "str", "default": ""},
            "shard": {"type": "dict"},
            "auth": {"type": "str", "default": "sas", "choices": list(AUTH_MODES)},
            "has_sas": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    decision, found = probe_install(module.run_command, azcopy=p["azcopy"], install=p["install"],
                                    version=p["version"], src=p["src"])
    if decision["error"]:
        module.fail_json(msg=decision["error"], probe=found)
    module.exit_json(changed=False, needed=decision["needed"], src_kind=decision["src_kind"], probe=found)


if __name__ == "__main__":
    main()
