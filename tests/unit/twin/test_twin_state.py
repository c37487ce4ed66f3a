"""A twin with no node needs no Docker (tests/twin/cluster.py).

The unit tier makes twins of no node as the AzureML stand-in's state (tests/unit/test_aml_job_action.py):
the test image is looked up when a node starts, not when the twin is made, so `make test-unit`
runs on a machine with no Docker and never waits on an image build.
"""

from __future__ import annotations

import json

from twin.cluster import Twin


def test_a_twin_of_no_node_is_made_and_saved_without_docker(tmp_path, monkeypatch):
    empty = tmp_path / "no-tools"
    empty.mkdir()
    monkeypatch.delenv("AMLHPC_TEST_IMAGE", raising=False)
    monkeypatch.setenv("PATH", str(empty))  # no docker, no bash: an image build would fail at once
    saved = Twin(0, tmp_path / "twin", prefix="amlhpc-state").save_state(tmp_path / "twin.json")
    state = json.loads(saved.read_text())
    assert state["size"] == 0 and state["nodes"] == [] and state["image"] is None
    assert Twin.attach(saved).size == 0
