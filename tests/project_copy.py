"""A project folder of a test's own, for the tests that run the project's playbooks.

It holds links to every part of the checkout except the folders a run writes (outputs/, .cache/,
.scratch/, state/) and the project's configuration (ansible.cfg, copied). Its ansible.cfg is the
project's, so a run there places everything as it would in the project (amlhpc_project_dir, the
fact cache, Ansible's home and local tmp, known_hosts and the pins: all follow the folder of the
ansible.cfg Ansible read), and writes nothing of the operator's (docs/testing.md, "Tests leave the
project's files alone"). The fixture ``project`` (tests/conftest.py) makes one under tmp_path.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# state/ too: the nodes' host key pins (ansible.cfg's known_hosts_file) a run in the copy keeps are
# its own, never the operator's.
PROJECT_WRITES = frozenset({"outputs", ".cache", ".scratch", "state", "ansible.cfg", ".hypothesis", ".pytest_cache",
                            ".git"})


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


# The check of tests/conftest.py (docs/testing.md, "Tests leave the project's files alone").
WATCHED = ("outputs", ".cache")
# The copies .ci/collection-copy makes for ansible-test (.cache/units, .cache/integration,
# .cache/sanity and .cache/sanity-core218, ...) are the tiers' working space, not walked either.
COPIES = ("units", "integration", "sanity", "sanity-core218", "sanity-core217")
# .cache/vm: the VM tier's Debian image, built by .ci/bootstrap (tests/vm/build-image.sh) and read by
# tests/vm beside the integration tier (make test's second lane), as the tier's working space.
NOT_WATCHED = frozenset({".cache/collections", ".cache/ansible-local", ".cache/ansible-home", ".cache/cp", ".cache/vm",
                         *(f".cache/{copy}" for copy in COPIES)})


def project_files_snapshot(root: Path = ROOT) -> dict[str, tuple]:
    """{path relative to root: (kind, size, mtime_ns)} for everything under the watched folders."""
    snap: dict[str, tuple] = {}
    for top in WATCHED:
        for folder, dirs, files in os.walk(root / top):
            rel_folder = Path(folder).relative_to(root).as_posix()
            dirs[:] = [d for d in dirs if f"{rel_folder}/{d}" not in NOT_WATCHED]
            for name in dirs + files:
                rel = f"{rel_folder}/{name}"
                if rel in NOT_WATCHED:
                    continue
                try:
                    st = os.lstat(root / rel)
                except FileNotFoundError:  # removed while walked: its absence shows on the next snapshot
                    continue
                kind = "link" if os.path.islink(root / rel) else "dir" if name in dirs else "file"
                snap[rel] = (kind, 0 if kind == "dir" else st.st_size, st.st_mtime_ns)
        if (root / top).is_dir():
            snap[top] = ("dir", 0, 0)  # the folder itself made by a test counts; its mtime is its entries'
    return snap


def project_files_changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """One line per path made, removed or changed between two snapshots, sorted."""
    lines = [f"made {p}" for p in after.keys() - before.keys()]
    lines += [f"removed {p}" for p in before.keys() - after.keys()]
    lines += [f"changed {p}" for p in before.keys() & after.keys()
              if before[p] != after[p] and not before[p][0] == after[p][0] == "dir"]
    return sorted(lines, key=lambda line: line.split(" ", 1)[1])
