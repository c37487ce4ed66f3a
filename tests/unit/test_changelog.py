"""The changelog is antsibull-changelog's: fragments under changelogs/fragments, the releases in
changelogs/changelog.yaml, CHANGELOG.md generated from it (`make lint` checks that it is). Here:
the release galaxy.yml names is recorded, and every module and plugin says in its documentation
which release brought it, the one whose "New Modules" / "New Plugins" list names it (that list
is made from `version_added`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHANGES = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
PLUGIN_TYPES = ("modules", "inventory", "lookup", "filter")


def documented() -> list[tuple[str, str, dict]]:
    """(type, name, DOCUMENTATION) of every module and plugin of the collection."""
    found = []
    for kind in PLUGIN_TYPES:
        for path in sorted((ROOT / "plugins" / kind).iterdir()):
            if path.suffix == ".py" and path.name != "__init__.py":
                tree = ast.parse(path.read_text())
                docs = [n.value.value for n in tree.body if isinstance(n, ast.Assign)
                        and any(getattr(t, "id", "") == "DOCUMENTATION" for t in n.targets)]
                if not docs:  # a filter plugin's .py: its filters are documented in .yml files
                    continue
                found.append((kind, path.stem, yaml.safe_load(docs[0])))
            elif path.suffix == ".yml":
                found.append((kind, path.stem, yaml.safe_load(path.read_text())["DOCUMENTATION"]))
    return found


def released(version: str) -> set[tuple[str, str]]:
    release = CHANGES["releases"][version]
    names = {("modules", m["name"]) for m in release.get("modules", [])}
    for kind, plugins in release.get("plugins", {}).items():
        names |= {(kind, p["name"]) for p in plugins}
    return names


def test_the_galaxy_version_is_a_release_of_the_changelog():
    assert GALAXY["version"] in CHANGES["releases"]
    assert CHANGES["releases"][GALAXY["version"]]["changes"]["release_summary"]


def test_the_plugins_of_the_collection_are_found():
    found = {(kind, name) for kind, name, _doc in documented()}
    assert {kind for kind, _name in found} == set(PLUGIN_TYPES)
    assert ("modules", "aml_job") in found


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


@pytest.mark.parametrize(("kind", "name", "doc"), documented(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_plugin_names_the_release_that_lists_it_as_new(kind, name, doc):
    version = str(doc.get("version_added", ""))
    if version not in CHANGES["releases"] and _semver(version) > max(map(_semver, CHANGES["releases"])):
        return  # not released yet: the release's "New Plugins" list is made from version_added then
    assert version in CHANGES["releases"], f"{kind}/{name}: version_added {version!r} is no release of changelogs/changelog.yaml"
    assert (kind, name) in released(version), f"{kind}/{name} is missing from release {version}'s new plugins"
