"""Module tests: the modules import by name from plugins/modules.

Their ``ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc`` imports resolve to
the package tests/conftest.py registers under that name (what AnsiballZ ships with a
module on a node).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from ansible.module_utils.common import warnings as _module_warnings

_MODULES = str(Path(__file__).resolve().parents[4] / "plugins" / "modules")
if _MODULES not in sys.path:
    sys.path.append(_MODULES)


@pytest.fixture(autouse=True)
def fresh_module_process():
    """Each test's modules start as in a process of their own (AnsiballZ runs one per task): the
    warnings and deprecations a module of an earlier test recorded are not this test's. Ansible
    keeps them in ``ansible.module_utils.common.warnings`` for the process's life; the module is
    built anew (``importlib.reload``), as a new process would build it. Without it, the SAS
    warning of test_azcopy_stage.py's modules showed in the results of every module run after it
    in the same worker (test_nccl_config.py, test_nvidia_gpu_clocks.py: red in that order)."""
    importlib.reload(_module_warnings)
    yield
