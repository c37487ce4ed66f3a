"""Shared pytest set-up: the project's pure logic is importable as ``amlhpc``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_UTILS = ROOT / "plugins" / "module_utils"
if str(MODULE_UTILS) not in sys.path:
    sys.path.insert(0, str(MODULE_UTILS))

# Ansible run from tests uses the project's configuration, whatever the cwd.
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
