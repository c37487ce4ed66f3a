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
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

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

# Ansible run from tests uses the project's configuration, whatever the cwd, but a fact cache of
# the run's own: facts the tests' throw-away inventories gather (n0, gpu-0, localhost) never land in
# the project's .cache/facts, where the operator's next run (gathering = smart) would take them.
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
TEST_FACTS = tempfile.mkdtemp(prefix="amlhpc-test-facts-")
os.environ.setdefault("ANSIBLE_CACHE_PLUGIN_CONNECTION", TEST_FACTS)

# ssh's control sockets (ansible.cfg's control_path_dir, .cache/cp of the project) in a short folder
# of the test run's own, removed at its end: under a project folder in a test's tmp_path
# (/tmp/pytest-of-root/pytest-N/popen-gw1/test_<30 characters>0/project/.cache/cp/<12>.<16>) the
# socket's path passes the 107 bytes a unix socket takes: ssh refuses every node, and the validate
# play refuses the run first (trust/control_socket.py), as it would an operator's too-deep project,
# who sets the same variable. A test that sets its own (test_known_hosts.py) keeps it.
TEST_CONTROL_PATHS = tempfile.mkdtemp(prefix="amlhpc-cp-")
os.environ.setdefault("ANSIBLE_SSH_CONTROL_PATH_DIR", TEST_CONTROL_PATHS)

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
    config.addinivalue_line("markers", "pypi: reads the package index (pip's resolver over PyPI): a minute or "
                                       "so, and only where PyPI is reachable (make test-collection)")
    config.addinivalue_line("markers", "alone: an integration test make test-integration runs by itself "
                                       "(tests/integration/conftest.py ALONE)")


# No test touches the operator's files (docs/testing.md, "Tests leave the project's files alone").
# The project's outputs/ and .cache/ are snapshot (name, size, mtime of every entry, links not
# followed) before the first test and after each one; a test that changed them is named, and the
# run fails at its end with the paths. Left out, as Ansible's and the tiers' own working space,
# not the operator's: .cache/collections (the link above), .cache/ansible-local (Ansible's
# local_tmp, made and removed by every Ansible process), .cache/ansible-home (Ansible's home:
# Galaxy's cache, collections `make setup` installs), .cache/cp (ssh's control sockets), .cache/vm
# (the VM tier's image) and the copies ansible-test works in (.cache/units, .cache/integration,
# .cache/sanity*: project_copy.COPIES).
from project_copy import project_files_changes, project_files_snapshot  # noqa: E402

_PROJECT_FILES: dict[str, Any] = {"last": None, "by_test": {}, "reporter": None}


# Watched: the sessions of tests/unit, tests/workload and tests/integration (a run whose tests are
# all of these tiers). The integration tier's tests run their playbooks, ansible-runner and the
# local default in a project folder of their own (tests/project_copy.py). make test runs it in
# lane 1 beside lane 2 (oldest core, lint, sanity, ansible-test units and integration, molecule,
# the VM), whose tiers write the checkout's outputs/ and .cache/ nowhere the check looks: the oldest core's
# local default and the VM tier's playbooks run in a project copy too (.ci/oldest-core,
# tests/vm/conftest.py), ansible-test in its copies (.cache/units, .cache/integration,
# .cache/sanity*), the VM image is built and read in .cache/vm, molecule works in its own
# ephemeral folder (its fact cache and the health verdict too, molecule/*/molecule.yml; make
# test-molecule fails where it changes them, .ci/checkout-unchanged), lint keeps no fact cache (Makefile). Not watched: tests/core, tests/collection
# and tests/vm (a run that holds any of them), whose own folders are their tmp_path.
WATCHED_TIERS = (ROOT / "tests" / "unit", ROOT / "tests" / "workload", ROOT / "tests" / "integration")


def pytest_collection_finish(session):
    """The snapshot before the first test, where every test collected is of a watched tier."""
    if not session.items or not all(any(Path(str(item.fspath)).is_relative_to(tier) for tier in WATCHED_TIERS)
                                    for item in session.items):
        return
    _PROJECT_FILES["reporter"] = session.config.pluginmanager.get_plugin("terminalreporter")
    _PROJECT_FILES["last"] = project_files_snapshot()
    _PROJECT_FILES["first"] = _PROJECT_FILES["last"]


def pytest_runtest_teardown(item, nextitem):
    if _PROJECT_FILES.get("first") is None:
        return
    now = project_files_snapshot()
    changes = project_files_changes(_PROJECT_FILES["last"], now)
    if changes:
        _PROJECT_FILES["by_test"][item.nodeid] = changes
    _PROJECT_FILES["last"] = now


def pytest_runtest_logfinish(nodeid, location):
    """Said at once too (outside the test's output capture), so that a run cut short says it."""
    changes = _PROJECT_FILES["by_test"].get(nodeid)
    reporter = _PROJECT_FILES.get("reporter")
    if changes and reporter is not None:
        reporter.write_line(f"\n{nodeid} changed the project's files: {', '.join(changes[:5])}"
                            + (" ..." if len(changes) > 5 else ""), yellow=True)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(TEST_FACTS, ignore_errors=True)
    shutil.rmtree(TEST_CONTROL_PATHS, ignore_errors=True)
    if _PROJECT_FILES.get("first") is None:
        return
    changes = project_files_changes(_PROJECT_FILES["first"], project_files_snapshot())
    if not changes and not _PROJECT_FILES["by_test"]:
        return
    lines = ["", "Tests changed the project's outputs/ or .cache/ (each test writes under its own tmp_path):"]
    for nodeid, test_changes in _PROJECT_FILES["by_test"].items():
        lines.append(f"  {nodeid}:")
        lines += [f"    {line}" for line in test_changes[:20]] + ([f"    ... {len(test_changes) - 20} more"]
                                                                  if len(test_changes) > 20 else [])
    if changes:
        lines.append("  over the whole run: " + ", ".join(changes[:20]) + (" ..." if len(changes) > 20 else ""))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    else:
        sys.stderr.write("\n".join(lines) + "\n")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def project(tmp_path) -> Path:
    """A project folder of the test's own (tests/project_copy.py): run playbooks with
    ``cwd=project, env=project_env(project)`` and nothing lands in the checkout's outputs/ or .cache/."""
    from project_copy import make_project_copy

    return make_project_copy(tmp_path / "project")
