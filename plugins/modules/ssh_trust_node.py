#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""One node's side of the ssh_trust role in one module call: the head's key in root's
authorized_keys, the nodefile, and the nodes' host keys in the managed known_hosts block."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ssh_trust_node
short_description: Trust the head's key, write the nodefile and the nodes' host keys on one node
version_added: "1.0.0"
description:
  - Does in one call what M(ansible.posix.authorized_key), M(ansible.builtin.file),
    M(ansible.builtin.copy) and M(ansible.builtin.blockinfile) did one after the other, so
    that the controller pays for one module run per node instead of five.
  - The key line is put in the user's authorized_keys once (a line with the same key but
    other options or comment is replaced in place, and with O(replaces_comment) so is a line
    of another key under that comment); the user's .ssh directory is made (0700) when missing.
  - The nodefile is written whole (its directory made 0755 when missing).
  - The host keys go into a block between C(# BEGIN <marker>) and C(# END <marker>) of the
    known_hosts file, as M(ansible.builtin.blockinfile) writes it; the rest of the file stays.
  - Every file is written only when its content, owner or mode differ. Supports check mode
    and diff.
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
  authorized_key:
    description: The whole authorized_keys line (options, type, key, comment). Empty - leave
      authorized_keys alone (check mode before the head's key exists).
    type: str
    default: ""
  replaces_comment:
    description:
      - A line of authorized_keys with another key and this comment is dropped, the new line
        taking the first one's place. The role passes its C(ssh_trust_key_comment), so that
        the keys of the cluster's earlier heads (a replaced head, a head that moved after a
        rank shift) are no longer trusted.
      - Empty - other keys stay whatever their comment.
    type: str
    default: ""
  user:
    description: Whose authorized_keys.
    type: str
    default: root
  nodefile:
    description: Path of the nodefile.
    type: path
    required: true
  nodefile_lines:
    description: Its lines (the private IPs in rank order).
    type: list
    elements: str
    required: true
  known_hosts:
    description: The known_hosts file that holds the managed block.
    type: path
    required: true
  known_hosts_marker:
    description: The block's marker text (after C(# BEGIN ) / C(# END )).
    type: str
    required: true
  known_hosts_lines:
    description: The block's lines.
    type: list
    elements: str
    required: true
author:
  - amlhpc contributors (@amlhpc)
"""

EXAMPLES = r"""
- name: SSH trust | Trust the head's key, write the nodefile and the nodes' host keys
  amlhpc.azureml.ssh_trust_node:
    authorized_key: "ssh-rsa AAAAB3... amlhpc-head@gpu"
    nodefile: /etc/amlhpc/nodefile
    nodefile_lines: [10.0.0.4, 10.0.0.5]
    known_hosts: /etc/ssh/ssh_known_hosts
    known_hosts_marker: "amlhpc ssh_trust: cluster gpu"
    known_hosts_lines: ["10.0.0.4 ssh-ed25519 AAAAC3...", "10.0.0.5 ssh-ed25519 AAAAC3..."]
"""

RETURN = r"""
changed_files:
  description: The files written (or that would be, in check mode).
  type: list
  elements: str
  returned: always
"""

import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.files import ensure_dir, ensure_file, read_text
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.trust.ssh_trust import (
    NODE_ARGUMENT_SPEC,
    authorized_keys_text,
    managed_block_text,
)


def main() -> None:
    module = AnsibleModule(argument_spec=NODE_ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    changed: list[str] = []
    diffs: list[dict] = []

    if p["authorized_key"]:
        try:
            user = pwd.getpwnam(p["user"])
        except KeyError:
            module.fail_json(msg=f"user {p['user']!r} does not exist on this node")
        ssh_dir = os.path.join(user.pw_dir, ".ssh")
        ensure_dir(module, ssh_dir, user.pw_uid, user.pw_gid, 0o700, changed, enforce=False)
        ak = os.path.join(ssh_dir, "authorized_keys")
        try:
            text = authorized_keys_text(read_text(ak) or "", p["authorized_key"], replaces=p["replaces_comment"])
        except ValueError as exc:
            module.fail_json(msg=f"authorized_key: {exc}")
        ensure_file(module, ak, text, user.pw_uid, user.pw_gid, 0o600, changed, diffs)

    ensure_dir(module, os.path.dirname(p["nodefile"]), 0, 0, 0o755, changed)
    ensure_file(module, p["nodefile"], "\n".join(p["nodefile_lines"]) + "\n", 0, 0, 0o644, changed, diffs)

    ensure_dir(module, os.path.dirname(p["known_hosts"]), 0, 0, 0o755, changed, enforce=False)
    kh = managed_block_text(read_text(p["known_hosts"]) or "", p["known_hosts_marker"], p["known_hosts_lines"])
    ensure_file(module, p["known_hosts"], kh, 0, 0, 0o644, changed, diffs)

    module.exit_json(changed=bool(changed), changed_files=changed, diff=diffs)


if __name__ == "__main__":
    main()
