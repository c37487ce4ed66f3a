"""Module tests: make ``ansible.module_utils.amlhpc`` resolve to the project's package.

Under Ansible, AnsiballZ ships plugins/module_utils/amlhpc inside the module as
``ansible.module_utils.amlhpc``; in-process tests alias the same package (the very same
module objects, so a monkeypatch on one is seen through the other) under that name, and
put plugins/modules on ``sys.path`` so the modules import by name.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import amlhpc
import ansible.module_utils  # noqa: F401

sys.modules.setdefault("ansible.module_utils.amlhpc", amlhpc)
for _info in pkgutil.iter_modules(amlhpc.__path__):
    sys.modules.setdefault(f"ansible.module_utils.amlhpc.{_info.name}",
                           importlib.import_module(f"amlhpc.{_info.name}"))

_MODULES = str(Path(__file__).resolve().parents[4] / "plugins" / "modules")
if _MODULES not in sys.path:
    sys.path.append(_MODULES)
