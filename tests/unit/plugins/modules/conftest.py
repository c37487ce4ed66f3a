"""Modules import the pure logic as ``ansible.module_utils.amlhpc`` (AnsiballZ puts it there
on a node); in the tests the same package is found by adding plugins/module_utils to
``ansible.module_utils``' search path, and plugins/modules to ``sys.path``."""

from __future__ import annotations

import sys
from pathlib import Path

import ansible.module_utils

ROOT = Path(__file__).resolve().parents[4]
for _path, _where in ((ROOT / "plugins" / "module_utils", ansible.module_utils.__path__),
                      (ROOT / "plugins" / "modules", sys.path)):
    if str(_path) not in _where:
        _where.append(str(_path))
