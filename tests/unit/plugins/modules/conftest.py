"""Module tests: make ``ansible.module_utils.amlhpc`` resolve to the project's package.

Under Ansible, AnsiballZ ships plugins/module_utils/amlhpc inside the module as
``ansible.module_utils.amlhpc``; in-process tests alias the same package under that name.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import amlhpc
import ansible.module_utils

sys.modules.setdefault("ansible.module_utils.amlhpc", amlhpc)
for _info in pkgutil.iter_modules(amlhpc.__path__):
    sys.modules.setdefault(f"ansible.module_utils.amlhpc.{_info.name}",
                           importlib.import_module(f"amlhpc.{_info.name}"))
