#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Documentation stub: report_file is an action plugin (plugins/action/report_file.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: report_file
short_description: Write the run's report page on the controller
description:
  - Runs on the controller, in the action itself (no module is sent anywhere). It makes the
    folder of O(dest) where missing (mode C(0755)) and replaces O(dest) with O(content)
    atomically (a temporary file in the same folder, renamed), so a reader never sees half a
    page.
  - For the report play (C(hosts=localhost), C(connection=local)), or a task delegated to
    C(localhost) (the page of a run that failed in a play on the nodes). Any other connection,
    or a C(delegate_to) another host, is refused with a sentence, as the page would still land
    on the controller.
  - Where the page on disk already has these bytes and mode, nothing is written.
version_added: "1.0.0"
author:
  - amlhpc contributors (@amlhpc)
attributes:
  check_mode:
    support: full
    details: Writes nothing; says whether it would change the page.
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  dest:
    description: The page's path on the controller.
    type: path
    required: true
  content:
    description: The page (UTF-8 text).
    type: str
    required: true
  mode:
    description: The page's mode, octal (C('0644')).
    type: raw
    default: "0644"
  link:
    description:
      - A stable path made a symbolic link to O(dest) (relative where O(dest) is beside or below
        it), replacing what is there atomically, so that it always leads to the latest of several pages.
    type: path
    version_added: "2.0.0"
  unique:
    description:
      - Write a page of its own - at O(dest) where nothing is there, else at the first free
        C(<stem>-2<suffix>), C(<stem>-3<suffix>), ... - taken atomically, so two runs that name
        their pages the same (started in the same second) keep two pages. RV(dest) is the name taken.
    type: bool
    default: false
    version_added: 2.2.0
"""

EXAMPLES = r"""
- name: Write report.html
  amlhpc.azureml.report_file:
    dest: "{{ playbook_dir }}/outputs/cosmoflow/report.html"
    content: "{{ page }}"
  changed_when: false
"""

RETURN = r"""
dest:
  description: The page's path (with O(unique), the name taken).
  returned: always
  type: str
size:
  description: Bytes written (or that would be).
  returned: always
  type: int
created_dir:
  description: Whether the folder was made (or would be, in check mode).
  returned: always
  type: bool
link:
  description: O(link), where given.
  returned: when O(link) is set
  type: str
linked:
  description: Whether O(link) was pointed at O(dest) in this run (or would be, in check mode).
  returned: when O(link) is set
  type: bool
"""
