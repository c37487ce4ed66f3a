"""Module tests: the modules import by name from plugins/modules.

Their ``ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc`` imports resolve to
the package tests/conftest.py registers under that name (what AnsiballZ ships with a
module on a node).
"""

from __future__ import annotations

import sys
from pathlib import Path

_MODULES = str(Path(__file__).resolve().parents[4] / "plugins" / "modules")
if _MODULES not in sys.path:
    sys.path.append(_MODULES)
