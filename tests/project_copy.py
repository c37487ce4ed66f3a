"""A project folder of a test's own, for the tests that run the project's playbooks.

It holds links to every part of the checkout except the folders a run writes (outputs/, .cache/,
.scratch/) and the project's configuration (ansible.cfg, copied). Its ansible.cfg is the
project's, so a run there places everything as it would in the project (amlhpc_project_dir, the
fact cache, Ansible's home and local tmp, known_hosts and the pins: all follow the folder of the
ansible.cfg Ansible read), and writes nothing of the operator's (docs/testing.md, "Tests leave the
project's files alone"). The fixture ``project`` (tests/conftest.py) makes one under tmp_path.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT_WRITES = frozenset({"outputs", ".cache", ".scratch", "ansible.cfg", ".hypothesis", ".pytest_cache", ".git"})


def make_project_copy(where: Path, root: Path = ROOT) -> Path:
    """``where``, made a project of its own (links to root's parts, its own ansible.cfg and
    .cache/collections link); returns it."""
    where.mkdir(parents=True, exist_ok=True)
    for entry in sorted(os.listdir(root)):
        if entry not in PROJECT_WRITES and not (where / entry).exists():
            (where / entry).symlink_to(root / entry)
    (where / "ansible.cfg").write_text((root / "ansible.cfg").read_text())
    link = where / ".cache" / "collections" / "ansible_collections" / "amlhpc" / "azureml"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to("../../../..")
    # The collections `make setup` installed (ansible.posix, ...), read only.
    installed = root / ".cache" / "ansible-home" / "collections"
    if installed.is_dir() and not (where / ".cache" / "ansible-home" / "collections").exists():
        (where / ".cache" / "ansible-home").mkdir(parents=True, exist_ok=True)
        (where / ".cache" / "ansible-home" / "collections").symlink_to(installed)
    return where


def project_env(project: Path, **extra: str) -> dict[str, str]:
    """The environment of an Ansible command run in ``project``: its ansible.cfg (and so its
    home); what else the environment holds stays (ansible-test's injector needs its variables)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANSIBLE_CONFIG", "ANSIBLE_HOME")}
    env.update(ANSIBLE_CONFIG=str(project / "ansible.cfg"), **extra)
    return env
