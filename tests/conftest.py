"""Shared pytest set-up.

* This checkout is the collection ``amlhpc.azureml``: Ansible run from the tests (in process
  or as a command) finds it through ansible.cfg's ``collections_path``, where ``make setup``
  links it (.ci/bootstrap collection); the link is made here too, so ``pytest`` works on a
  fresh checkout.
* The pure logic is one package, ``plugins/module_utils/amlhpc``, in a folder per subsystem. Modules and plugins import
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

# The shared fakes and the twin (tests/azureml_fakes.py, tests/twin) import by name, also
# where pytest's own rootdir handling does not put this folder on sys.path (ansible-test units).
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

if str(MODULE_UTILS) not in sys.path:
    sys.path.insert(0, str(MODULE_UTILS))

import amlhpc  # noqa: E402

sys.modules.setdefault(COLLECTION_NAME, amlhpc)
# The subsystem folders first (walk_packages imports only them), then their modules.
for _info in sorted(pkgutil.walk_packages(amlhpc.__path__, "amlhpc."), key=lambda i: not i.ispkg):
    sys.modules.setdefault(COLLECTION_NAME + _info.name[len("amlhpc"):], importlib.import_module(_info.name))

# `ansible-test units` sets Ansible settings of its own in the environment, the conventions of its
# integration tests (no inventory, an empty configuration, no deprecation warnings, ...). The
# tests here run Ansible as a user does in the project, so there they get what `make test-unit`
# gives them instead (see the Makefile). ANSIBLE_COLLECTIONS_PATH stays: ansible-test's pytest
# plugin reads it, and it names this same collection.
ANSIBLE_TEST_SETTINGS = ("ANSIBLE_INVENTORY", "ANSIBLE_CONFIG", "ANSIBLE_LIBRARY", "ANSIBLE_INVENTORY_PLUGIN_EXTS",
                         "ANSIBLE_HOST_PATTERN_MISMATCH", "ANSIBLE_FORCE_HANDLERS", "ANSIBLE_DEPRECATION_WARNINGS",
                         "ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_RETRY_FILES_ENABLED", "ANSIBLE_FORCE_COLOR",
                         "ANSIBLE_DEVEL_WARNING", "ANSIBLE_DISPLAY_TRACEBACK", "ANSIBLE_PYTHON_MODULE_RLIMIT_NOFILE",
                         "ANSIBLE_WORKER_SHUTDOWN_POLL_COUNT", "ANSIBLE_WORKER_SHUTDOWN_POLL_DELAY")
if "ANSIBLE_TEST_ANSIBLE_LIB_ROOT" in os.environ:
    for _name in ANSIBLE_TEST_SETTINGS:
        os.environ.pop(_name, None)
    os.environ["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "true"

# Ansible run from tests uses the project's configuration, whatever the cwd.
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))

# Hypothesis: every run draws the same inputs (docs/testing.md, "Property tests"). The profile
# "ci" is loaded here, before any test module is imported, so a test's own @settings(...) only
# changes what it names (max_examples, health checks) and inherits the rest. A failure it finds
# is printed with its reproduction blob and kept as an explicit @example. No deadline: a test's
# outcome never hangs on the machine's load. `pytest --hypothesis-profile=explore` draws afresh
# (a new seed each run) on a developer's machine; whatever it finds becomes an @example.
# The workload venv has no Hypothesis (and no property tests).
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # pragma: no cover - the workload tier
    _hypothesis_settings = None
if _hypothesis_settings is not None:
    _hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
    _hypothesis_settings.register_profile("explore", derandomize=False, database=None, print_blob=True,
                                          deadline=None)
    _hypothesis_settings.load_profile("ci")


def pytest_configure(config):
    """The markers, here rather than in pyproject.toml: `ansible-test units` runs pytest with an
    ini file of its own (and --strict-markers)."""
    config.addinivalue_line("markers", "slow: takes more than a few seconds")
