"""Shared pytest set-up.

* This checkout is the collection ``amlhpc.azureml``: Ansible run from the tests (in process
  or as a command) finds it through ansible.cfg's ``collections_path``, where ``make setup``
  links it (.ci/bootstrap collection); the link is made here too, so ``pytest`` works on a
  fresh checkout.
* The pure logic is one package, ``plugins/module_utils/amlhpc``. Modules and plugins import
  it as ``ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc``; the tests and the
  workload as ``amlhpc``. Both names are the very same module objects here, so a monkeypatch
  on one is seen through the other.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_UTILS = ROOT / "plugins" / "module_utils"
COLLECTION_NAME = "ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc"


def ensure_collection_link(root: Path = ROOT) -> Path:
    """The link .cache/collections/ansible_collections/amlhpc/azureml -> the checkout."""
    link = root / ".cache" / "collections" / "ansible_collections" / "amlhpc" / "azureml"
    if not (link.is_symlink() and os.readlink(link) == "../../../.."):
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("../../../..")
    return link


ensure_collection_link()

if str(MODULE_UTILS) not in sys.path:
    sys.path.insert(0, str(MODULE_UTILS))

import amlhpc  # noqa: E402

sys.modules.setdefault(COLLECTION_NAME, amlhpc)
for _info in pkgutil.iter_modules(amlhpc.__path__):
    sys.modules.setdefault(f"{COLLECTION_NAME}.{_info.name}", importlib.import_module(f"amlhpc.{_info.name}"))

# Ansible run from tests uses the project's configuration, whatever the cwd.
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
