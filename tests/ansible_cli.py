"""The ansible command-line tools the tests run.

Those beside the Python that runs the tests (`.venv/bin` under `make test-unit`), or, where
that Python has none, the ones on PATH: `ansible-test units` runs the tests in a venv of its
own, with ansible-core on PYTHONPATH and its bin folder first on PATH."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def ansible_cli(name: str) -> str:
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name}: not beside {sys.executable} and not on PATH")
    return found
