#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Several directories and small files set in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: amlhpc_files
short_description: Set several directories and small text files on a node in one call
version_added: "1.0.0"
description:
  - Each directory is made (or its owner and mode set) as M(ansible.builtin.file)
    C(state=directory) does; each file gets its content, owner and mode as
    M(ansible.builtin.copy) with C(content) does, or is removed (C(state=absent)).
  - One module run per node on the controller instead of one or two per file (copy costs a
    remote stat and a file or copy run). Writes only what differs, atomically. Supports
    check mode and diff.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  directories:
    description: Directories, made in order.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: The directory., type: path, required: true}
      owner: {description: Owner name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
      mode: {description: Octal mode as a string., type: str, default: "0755"}
  files:
    description: Files, set in order.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: The file., type: path, required: true}
      content: {description: Its whole text (C(state=present))., type: str, default: ""}
      state: {description: C(present) or C(absent)., type: str, default: present, choices: [present, absent]}
      owner: {description: Owner name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
      mode: {description: Octal mode as a string., type: str, default: "0644"}
      backup: {description: Keep a timestamped copy of a file whose content is replaced., type: bool, default: false}
author:
  - amlhpc contributors (@amlhpc)
"""

EXAMPLES = r"""
- name: NCCL | Write the topology file, nccl.conf and the job environment file
  amlhpc.azureml.amlhpc_files:
    directories: [{path: /etc/amlhpc}]
    files:
      - {path: /etc/nccl.conf, content: "NCCL_IB_PCI_RELAXED_ORDERING=1\n"}
      - {path: /etc/amlhpc/nccl-topo.xml, state: absent}
"""

RETURN = r"""
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

_DIR = {"path": {"type": "path", "required": True}, "owner": {"type": "str", "default": "root"},
        "group": {"type": "str", "default": "root"}, "mode": {"type": "str", "default": "0755"}}
_FILE = {"path": {"type": "path", "required": True}, "content": {"type": "str", "default": ""},
         "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
         "owner": {"type": "str", "default": "root"}, "group": {"type": "str", "default": "root"},
         "mode": {"type": "str", "default": "0644"}, "backup": {"type": "bool", "default": False}}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "dict", "default": [], "options": _DIR},
            "files": {"type": "list", "elements": "dict", "default": [], "options": _FILE},
        },
        supports_check_mode=True,
    )
    module.exit_json(**apply(module, module.params["directories"], module.params["files"]))


if __name__ == "__main__":
    main()
