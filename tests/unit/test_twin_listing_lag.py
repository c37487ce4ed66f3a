"""The twin's listing lags as AmlCompute's does (issue 48): a lost or hung node stays listed in
its old state for the twin's ``listing_lag`` seconds, and a node that comes back is listed again
under the same node id. Pure: the listing is computed from the twin's state, no container runs."""

from __future__ import annotations

from pathlib import Path

from twin.cluster import Twin, TwinNode


def _twin(tmp_path: Path, lag: float | None) -> Twin:
    twin = Twin(3, tmp_path, prefix="lag-unit", image="none", listing_lag=lag)
    twin.nodes = [TwinNode(slot=i, node_id=f"tvmps_{i}_d", port=50000 + i, private_ip=f"10.9.0.{10 + i}",
                           container=f"lag-unit-{i}", disk_volume=f"lag-unit-disk-{i}") for i in range(3)]
    return twin


def states(twin: Twin, now: float) -> list[str]:
    return [n["nodeState"] for n in twin.list_nodes(now=now)]


def test_a_lost_node_stays_listed_in_its_old_state_for_the_lag(tmp_path):
    twin = _twin(tmp_path, lag=120)
    twin.nodes[0].mark_lost("preempted", at=1000.0)
    assert states(twin, 1000.0) == ["idle", "idle", "idle"]
    assert states(twin, 1119.0) == ["idle", "idle", "idle"]
    assert states(twin, 1120.0) == ["preempted", "idle", "idle"]
    assert not twin.nodes[0].usable  # the truth, whatever the listing says: no job is placed on it


def test_without_a_lag_the_listing_marks_a_lost_node_at_once(tmp_path):
    twin = _twin(tmp_path, lag=None)
    twin.nodes[1].mark_lost("preempted", at=1000.0)
    assert states(twin, 1000.0) == ["idle", "preempted", "idle"]


def test_a_node_that_comes_back_is_listed_again_under_the_same_id(tmp_path):
    twin = _twin(tmp_path, lag=60)
    node = twin.nodes[2]
    node.mark_lost("unusable", at=1000.0)
    assert states(twin, 1100.0)[2] == "unusable"
    node.mark_back()
    assert states(twin, 1101.0)[2] == "idle" and node.usable
    assert twin.list_nodes(now=1101.0)[2]["nodeId"] == "tvmps_2_d"


def test_the_lag_and_the_loss_survive_save_and_attach(tmp_path):
    twin = _twin(tmp_path, lag=90)
    twin.nodes[0].mark_lost("preempted", at=1000.0)
    again = Twin.attach(twin.save_state(tmp_path / "twin.json"))
    assert again.listing_lag == 90
    assert states(again, 1010.0)[0] == "idle" and states(again, 1090.0)[0] == "preempted"
