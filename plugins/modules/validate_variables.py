#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Documentation stub: validate_variables is an action plugin (plugins/action/validate_variables.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: validate_variables
short_description: Check every role variable a run reads before anything changes
description:
  - Runs on the controller, in the action itself (no module is sent anywhere).
  - Reads the C(main) entry point of each role's C(meta/argument_specs.yml) under O(roles_dir)
    and holds the variables the run sets (inventory, group_vars, extra vars; role defaults are
    the roles' own and are not checked) to them with Ansible's own argument spec validator
    (types, choices, list elements; not C(required), which the roles' defaults give), one
    variable at a time, so one that cannot be templated here is a warning, not a stop.
  - Then the rules between variables no argument spec can say, each answered in one sentence
    that names the fix - spare nodes fewer than the nodes, absolute paths, AzureML's rule for
    compute names, the VM size's name (an unknown one is a warning), and signs (no negative
    count, time or rate; process and node counts from 1).
  - Values of C(no_log) options never appear in a sentence.
version_added: 2.2.0
author:
  - amlhpc contributors (@amlhpc)
attributes:
  check_mode:
    support: full
    details: Changes nothing; checks the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  roles_dir:
    description: The folder holding the roles (the collection's C(roles/)).
    type: path
    required: true
  roles:
    description: The roles whose variables to check (the ones the run reaches).
    type: list
    elements: str
    required: true
  node_count:
    description: The nodes the run will have, for C(healthcheck_spare_nodes); unknown when empty.
    type: raw
  fail_on_problems:
    description: Fail with the sentences (C(false) returns them and goes on).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Check the variables of the roles this run reaches
  amlhpc.azureml.validate_variables:
    roles_dir: "{{ role_path | dirname }}"
    roles: [healthcheck, stage, submit]
    node_count: "{{ groups['aml_nodes'] | length }}"
"""

RETURN = r"""
problems:
  description: One sentence per problem, each naming the fix.
  returned: always
  type: list
  elements: str
checked:
  description: The roles whose variables were checked.
  returned: always
  type: list
  elements: str
variables:
  description: How many variables were set and checked.
  returned: always
  type: int
"""
