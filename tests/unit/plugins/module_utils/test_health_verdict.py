"""The health verdict: stop, or leave out up to the spare count of failing nodes and go on."""

from __future__ import annotations

import pytest

from amlhpc.health.health_verdict import VerdictError, health_json, node_file, report_lines, verdict, verdict_id

OK = [{"check": "gpu_health", "status": "pass", "value": "0 problem(s)", "threshold": "0 problems", "reason": ""}]
ECC = [{"check": "gpu_health", "status": "fail", "value": "1 problem(s)", "threshold": "0 problems",
        "reason": "GPU 0 (0001:00:00.0): 2 uncorrectable ECC error(s) since boot"}]
NODES = ["c-0", "c-1", "c-2", "c-3"]
IPS = {n: f"10.0.0.{i + 4}" for i, n in enumerate(NODES)}


def results(**bad):
    return {n: bad.get(n.replace("-", "_"), OK) for n in NODES}


def test_no_failing_node_passes_with_every_node():
    v = verdict(results(), NODES, on_failure="exclude", spares=1, addresses=IPS)
    assert v["action"] == "pass" and v["good"] == NODES and v["excluded"] == []
    assert v["rendezvous"] == "10.0.0.4:29400" and (v["min_nodes"], v["max_nodes"]) == (4, 4)


def test_stop_is_the_default_and_keeps_the_reports_sentence():
    v = verdict(results(c_2=ECC), NODES, addresses=IPS, stop_message="health check failed on 1 of 4 node(s): c-2 (...)")
    assert v["action"] == "stop" and v["message"].startswith("health check failed on 1 of 4")
    assert v["good"] == [] and v["excluded"] == [] and v["rendezvous"] == ""


def test_exclude_leaves_the_failing_node_out_and_meets_on_the_first_good_one():
    v = verdict(results(c_0=ECC), NODES, on_failure="exclude", spares=1, addresses=IPS)
    assert v["action"] == "exclude" and v["excluded"] == ["c-0"] and v["good"] == ["c-1", "c-2", "c-3"]
    # The head is bad: the rendezvous is on the first good node, not on the head.
    assert v["rendezvous"] == "10.0.0.5:29400" and (v["min_nodes"], v["max_nodes"]) == (3, 3)
    assert "c-0 (gpu_health: GPU 0 (0001:00:00.0): 2 uncorrectable ECC" in v["message"]
    assert "Training goes on with the 3 other node(s): c-1, c-2, c-3." in v["message"]


def test_a_node_that_stopped_answering_is_failing():
    v = verdict({**results(), "c-3": None}, NODES, on_failure="exclude", spares=1, addresses=IPS)
    assert v["excluded"] == ["c-3"] and "stopped answering" in v["failing"][0]["reasons"][0]


def test_more_failing_nodes_than_spares_stops_naming_the_fix():
    v = verdict(results(c_1=ECC, c_2=None), NODES, on_failure="exclude", spares=1, addresses=IPS)
    assert v["action"] == "stop" and v["good"] == []
    assert v["message"].startswith("2 node(s) failed the health check but healthcheck_spare_nodes allows 1: c-1 (")
    assert "raise healthcheck_spare_nodes to 2" in v["message"]


def test_no_good_node_left_stops():
    v = verdict({"c-0": ECC}, ["c-0"], on_failure="exclude", spares=3)
    assert v["action"] == "stop" and "nothing can train" in v["message"]


def test_the_reports_failing_list_is_heard():
    """Checks that other parts of the gate add (the pair gate's, for one) reach the report's
    failing list; the verdict follows that list."""
    failing = [{"node": "c-2", "reasons": ["pair_link: 3.1 Gb/s with c-1 and c-3, 40 expected"]}]
    v = verdict(results(), NODES, on_failure="exclude", spares=1, addresses=IPS, failing=failing)
    assert v["excluded"] == ["c-2"] and "pair_link" in v["message"]


def test_ignore_failures_keeps_every_node():
    v = verdict(results(c_1=ECC), NODES, on_failure="stop", ignore_failures=True, stop_message="m")
    assert v["action"] == "ignore" and v["good"] == NODES and v["message"].startswith("IGNORED")


def test_bad_options_are_refused():
    with pytest.raises(VerdictError, match="stop, exclude"):
        verdict(results(), NODES, on_failure="drain")
    with pytest.raises(VerdictError, match="0 or more"):
        verdict(results(), NODES, on_failure="exclude", spares=-1)


def test_the_id_changes_with_who_trains_only():
    a = verdict(results(c_0=ECC), NODES, on_failure="exclude", spares=1, addresses=IPS)
    b = verdict(results(c_0=ECC), NODES, on_failure="exclude", spares=1, addresses=IPS)
    c = verdict(results(c_1=ECC), NODES, on_failure="exclude", spares=1, addresses=IPS)
    assert a["id"] == b["id"] == verdict_id(a) and a["id"] != c["id"]


def test_node_file_and_health_json():
    r = results(c_0=ECC)
    v = verdict(r, NODES, on_failure="exclude", spares=1, addresses=IPS)
    bad, good = node_file(v, "c-0"), node_file(v, "c-2")
    # The checks by name, no figure (issue 42: the file stays the same bytes while the verdict does).
    assert bad["status"] == "excluded" and bad["checks"] == ["gpu_health"]
    assert bad["reasons"] == ["gpu_health failed (the figures are in the run's health.json)"]
    assert good == {"id": v["id"], "node": "c-2", "status": "good", "checks": [], "reasons": [],
                    "rendezvous": "10.0.0.5:29400", "min_nodes": 3, "max_nodes": 3, "good": ["c-1", "c-2", "c-3"]}
    doc = health_json(v, r, run="cf")
    assert doc["job_nodes"] == ["c-1", "c-2", "c-3"] and doc["excluded"] == ["c-0"]
    assert doc["nodes"]["c-0"]["status"] == "excluded"
    assert doc["nodes"]["c-0"]["checks"][0] == {**ECC[0]}
    assert doc["nodes"]["c-1"] == {"status": "good", "reachable": True, "checks": OK}
    assert report_lines(v)[1].startswith("the job trains on 3 node(s) (c-1, c-2, c-3), rendezvous 10.0.0.5:29400")
