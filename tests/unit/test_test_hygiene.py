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
