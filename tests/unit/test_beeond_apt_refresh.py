"""beeond: a repository that was just added is refreshed before its packages are installed.

`apt: update_cache: true, cache_valid_time: 3600` skips the refresh when the lists are younger
than an hour, which they are on a node provisioned minutes ago: the BeeGFS packages are then
"not found". The role must refresh whenever the repository changed, whatever the lists' age.
The BeeGFS repository cannot be reached from the tests, so this reads the role's tasks with
Ansible's own loader and checks the order and the conditions that make the refresh happen.
"""

from __future__ import annotations

from pathlib import Path

from ansible.parsing.dataloader import DataLoader

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "roles" / "beeond" / "tasks"


def _tasks(name: str) -> list[dict]:
    return DataLoader().load_from_file(str(TASKS / name))


def _module(task: dict) -> str:
    return next(k for k in task if k.startswith("ansible.builtin."))


def test_repository_is_a_deb822_source_that_reports_its_changes():
    repo = [t for t in _tasks("repo.yml") if t["name"] == "BeeOND | Add the BeeGFS apt repository"]
    assert len(repo) == 1 and repo[0]["register"] == "beeond_repo"
    args = repo[0][_module(repo[0])]
    assert args["dest"].endswith(".sources")  # deb822, not a one-line .list
    lines = args["content"].splitlines()
    assert "Signed-By: {{ beeond_repo_keyring }}" in lines and "Architectures: amd64" in lines


def test_lists_are_refreshed_when_the_repository_changed_before_the_install():
    install = _tasks("install.yml")
    modules = [(_module(t), t) for t in install]
    refresh = [i for i, (m, t) in enumerate(modules)
               if m == "ansible.builtin.apt" and t[m].get("update_cache") and "name" not in t[m]]
    assert refresh, "a task refreshes the apt lists on its own"
    task = install[refresh[0]]
    # No cache_valid_time: a refresh that may be skipped for young lists is the defect.
    assert "cache_valid_time" not in task["ansible.builtin.apt"]
    assert "beeond_repo is changed" in str(task["when"])
    packages = next(i for i, (m, t) in enumerate(modules)
                    if m == "ansible.builtin.apt" and t[m].get("name") == "{{ beeond_packages }}")
    assert refresh[0] < packages
