"""The test suite's own promises: the same inputs on every run (the Hypothesis profile "ci" of
tests/conftest.py) and no test touching the operator's files (the session check of
tests/conftest.py over the project's outputs/ and .cache/). docs/testing.md says why."""

from __future__ import annotations

from hypothesis import settings


def test_hypothesis_draws_the_same_inputs_on_every_run():
    assert settings.default.derandomize is True
    assert settings.default.database is None
    assert settings.default.deadline is None
    assert settings.default.print_blob is True


def test_the_project_files_check_sees_what_a_test_makes_changes_or_removes(tmp_path):
    from project_copy import project_files_changes, project_files_snapshot

    (tmp_path / "outputs" / "cosmoflow-local").mkdir(parents=True)
    (tmp_path / "outputs" / "cosmoflow-local" / "report.html").write_text("the operator's run")
    (tmp_path / ".cache" / "collections").mkdir(parents=True)
    (tmp_path / ".cache" / "known_hosts.nodes.json").write_text("{}")
    before = project_files_snapshot(tmp_path)
    (tmp_path / "outputs" / "cosmoflow-local" / "report.html").write_text("a test's page, repointed")
    (tmp_path / "outputs" / "cosmoflow").mkdir()
    (tmp_path / ".cache" / "known_hosts.nodes.json").unlink()
    (tmp_path / ".cache" / "facts").mkdir()
    (tmp_path / ".cache" / "facts" / "localhost").write_text("{}")
    (tmp_path / ".cache" / "collections" / "anything").write_text("left out: the collection link's folder")
    (tmp_path / ".cache" / "ansible-local").mkdir()  # left out: Ansible's local_tmp
    assert project_files_changes(before, project_files_snapshot(tmp_path)) == [
        "made .cache/facts", "made .cache/facts/localhost", "removed .cache/known_hosts.nodes.json",
        "made outputs/cosmoflow", "changed outputs/cosmoflow-local/report.html"]
    assert project_files_changes(before, before) == []


def test_the_tiers_collection_copies_are_not_walked(tmp_path):
    """.ci/collection-copy's copies (.cache/units, .cache/integration, .cache/sanity*) are the
    tiers' working space: neither reported nor walked (a left-over .cache/units of 20,000
    entries walked after every unit test made `make test-unit` after `make test` take hours)."""
    from project_copy import project_files_snapshot

    for copy in ("units", "integration", "sanity", "sanity-core218", "sanity-core217"):
        (tmp_path / ".cache" / copy / "ansible_collections").mkdir(parents=True)
    (tmp_path / ".cache" / "unitsx").mkdir()  # a folder that only starts like one is watched
    assert sorted(project_files_snapshot(tmp_path)) == [".cache", ".cache/unitsx"]
