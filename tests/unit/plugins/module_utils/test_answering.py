"""Issue 48 item 1: a listed node that does not answer is handled like a lost one
(plugins/module_utils/amlhpc/recovery/answering.py).

AmlCompute keeps a dead or hung VM listed as idle/running for minutes. The look at the start of
the node phases names each listed node that did not answer within its bound in one sentence; the
gate's own rule (healthcheck_on_failure, healthcheck_spare_nodes) leaves it out or stops the run;
each cluster's head (the rendezvous, the node whose job environment submit reads) is the answering
node of lowest rank. Property: whatever answers, the chosen heads answer and no silent node is
staged to or trained on."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.recovery.answering import (
    answering,
    job_head,
)

TIMEOUT = 20
OK = {"changed": False, "elapsed": 0}
TIMED_OUT = {"failed": True, "elapsed": 20, "msg": "timed out waiting for ping module test: Data could not be sent to "
             "remote host \"127.0.0.1\". Make sure this host can be reached over ssh: "}


def nodes(n: int, cluster: str = "c", state: str = "idle") -> list[dict]:
    return [{"host": f"hx-{i}", "cluster": cluster, "rank": i, "state": state, "ip": f"10.0.0.{10 + i}"}
            for i in range(n)]


def look(listed, answers, on_failure="exclude", spares=1):
    return answering(listed, answers, timeout=TIMEOUT, on_failure=on_failure, spares=spares, port=29400)


def test_every_listed_node_answers_nothing_changes():
    out = look(nodes(3), {f"hx-{i}": OK for i in range(3)})
    assert out["action"] == "pass" and out["silent"] == [] and out["answering"] == ["hx-0", "hx-1", "hx-2"]
    assert out["heads"] == {"c": "hx-0"} and out["moved"] == [] and out["verdict"] is None


def test_a_frozen_head_still_listed_is_named_left_out_and_the_head_moves():
    out = look(nodes(3), {"hx-0": TIMED_OUT, "hx-1": OK, "hx-2": OK})
    assert out["action"] == "exclude"
    assert [s["node"] for s in out["silent"]] == ["hx-0"]
    assert out["answering"] == ["hx-1", "hx-2"]
    assert out["heads"] == {"c": "hx-1"}
    assert out["moved"] == [{"cluster": "c", "from": "hx-0", "to": "hx-1"}]
    assert out["verdict"]["excluded"] == ["hx-0"] and out["verdict"]["good"] == ["hx-1", "hx-2"]
    assert out["verdict"]["rendezvous"] == "10.0.0.11:29400"
    assert out["message"].startswith(
        "node hx-0 is listed by AmlCompute as idle but did not answer within 20 s: handled as a lost node. "
        "Left out (healthcheck_spare_nodes: 1): ssh_trust, the health gate, the stage and the last look run on "
        "hx-1, hx-2, its shard moves to them, and the head's role (rendezvous, job environment) moves from hx-0 "
        "to hx-1."), out["message"]


def test_a_node_with_no_answer_at_all_is_silent_too():
    # Unreachable before the look (no registered result): as silent as one that timed out.
    out = look(nodes(3), {"hx-0": OK, "hx-1": OK})
    assert [s["node"] for s in out["silent"]] == ["hx-2"] and out["heads"] == {"c": "hx-0"} and out["moved"] == []
    assert "did not answer" in out["silent"][0]["reason"]


def test_with_stop_the_run_stops_naming_the_node_and_the_fix():
    out = look(nodes(3), {"hx-0": TIMED_OUT, "hx-1": OK, "hx-2": OK}, on_failure="stop", spares=0)
    assert out["action"] == "stop"
    assert out["message"] == (
        "node hx-0 is listed by AmlCompute as idle but did not answer within 20 s: handled as a lost node. The run "
        "stops before the node phases: rerun site.yml once AmlCompute marks it or it answers again, or set "
        "healthcheck_on_failure: exclude with healthcheck_spare_nodes to go on without it.")


def test_more_silent_nodes_than_spares_stops_in_the_gates_words():
    out = look(nodes(4), {"hx-0": TIMED_OUT, "hx-1": TIMED_OUT, "hx-2": OK, "hx-3": OK}, spares=1)
    assert out["action"] == "stop" and "healthcheck_spare_nodes allows 1" in out["message"]
    assert out["message"].startswith("node hx-0 is listed by AmlCompute as idle but did not answer within 20 s")


def test_each_cluster_gets_its_own_head():
    listed = nodes(2, "a") + nodes(2, "b")
    listed[2]["host"], listed[3]["host"] = "hy-0", "hy-1"
    out = look(listed, {"hx-0": OK, "hx-1": OK, "hy-0": TIMED_OUT, "hy-1": OK}, spares=1)
    assert out["heads"] == {"a": "hx-0", "b": "hy-1"}
    assert out["moved"] == [{"cluster": "b", "from": "hy-0", "to": "hy-1"}]


def test_submit_reads_the_job_environment_from_the_first_node_that_trains():
    ranked = ["hx-0", "hx-1", "hx-2"]
    assert job_head(ranked, good=None, silent=[]) == "hx-0"
    assert job_head(ranked, good=["hx-1", "hx-2"], silent=[]) == "hx-1"
    assert job_head(ranked, good=None, silent=["hx-0"]) == "hx-1"
    assert job_head(ranked, good=["hx-0", "hx-2"], silent=["hx-0"]) == "hx-2"
    assert job_head([], good=None, silent=[]) == ""


# --- the promise, on generated listings -------------------------------------------------------------

@st.composite
def listings(draw):
    clusters = draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True))
    listed, answers = [], {}
    for c in clusters:
        for rank in range(draw(st.integers(1, 5))):
            host = f"{c}-{rank}"
            listed.append({"host": host, "cluster": c, "rank": rank, "ip": f"10.{ord(c)}.0.{rank + 10}",
                           "state": draw(st.sampled_from(["idle", "running"]))})
            answer = draw(st.sampled_from(["ok", "timeout", "none"]))
            if answer != "none":
                answers[host] = OK if answer == "ok" else TIMED_OUT
    draw(st.randoms()).shuffle(listed)  # the look does not rely on the order it is given
    return listed, answers


@settings(derandomize=True, max_examples=300, deadline=None)
@given(listings(), st.sampled_from(["stop", "exclude"]), st.integers(0, 4))
@example(([{"host": "a-0", "cluster": "a", "rank": 0, "ip": "10.97.0.10", "state": "idle"},
           {"host": "a-1", "cluster": "a", "rank": 1, "ip": "10.97.0.11", "state": "idle"}], {"a-1": OK}),
         "exclude", 1)
def test_the_chosen_heads_answer_and_no_silent_node_is_staged_to_or_trained_on(listing, on_failure, spares):
    listed, answers = listing
    out = look(listed, answers, on_failure=on_failure, spares=spares)
    answered = {h for h, a in answers.items() if not a.get("failed")}
    silent = {s["node"] for s in out["silent"]}
    assert silent == {n["host"] for n in listed} - answered
    assert set(out["answering"]) == answered and not silent & set(out["answering"])
    for cluster, head in out["heads"].items():
        members = sorted((n for n in listed if n["cluster"] == cluster), key=lambda n: n["rank"])
        expected = next((n["host"] for n in members if n["host"] in answered), None)
        assert head == expected  # the answering node of lowest rank, or none
    assert out["action"] in ("pass", "exclude", "stop")
    if not silent:
        assert out["action"] == "pass"
    elif out["action"] == "exclude":
        good = out["verdict"]["good"]
        assert good and set(good) <= answered and set(out["verdict"]["excluded"]) == silent
        ranked = [n["host"] for n in sorted(listed, key=lambda n: (n["cluster"], n["rank"]))]
        assert job_head(ranked, good=good, silent=sorted(silent)) in answered
    else:
        assert out["verdict"] is None or out["verdict"]["good"] == []
    for s in out["silent"]:  # one sentence per silent node, naming it and the bound
        assert f"node {s['node']} is listed by AmlCompute as" in out["message"]
        assert f"within {TIMEOUT} s" in out["message"]
