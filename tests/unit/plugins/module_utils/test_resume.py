"""Issue 48 item 4: after a node lost during training the run stops naming the command, or, with
``submit_on_node_loss: resume``, resumes by itself a bounded number of times
(plugins/module_utils/amlhpc/recovery/resume.py).

The promise, on generated runs (losses one after another, AmlCompute putting nodes back or not):
never more automatic rounds than ``submit_resume_attempts`` nor than the rounds site.yml holds;
never in check mode, never without a durable checkpoint, never with fewer nodes left than the run
may train on; the default (``stop``) says exactly today's sentence."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.recovery.resume import (
    ROUNDS,
    Situation,
    decide,
    stop_sentence,
)

ROOT = Path(__file__).resolve().parents[4]
RECORD = {"run": "cf", "run_id": "cf-r2", "node": "nl-2", "epoch_reached": 2,
          "sentence": "node x (10.0.0.6), rank 2 of 5: no heartbeat for 40 s (missed heartbeat; last at "
                      "2026-11-29T01:00:00Z, seen by rank 0 at 2026-11-29T01:00:40Z)"}
TODAY = ("run cf-r2 lost node nl-2 in epoch 2: " + RECORD["sentence"] + ". Rerunning site.yml (or --tags "
         "healthcheck,stage,submit) gates the nodes again, leaves it out or gives its shard to the node AmlCompute put "
         "in its place (only its files move), and resumes from the last durable checkpoint")


def test_the_default_stops_with_todays_sentence():
    assert stop_sentence(RECORD) == TODAY
    for situation in (Situation(), Situation(mode="stop", attempts=5, planned=5, left=4, on_failure="exclude",
                                             spares=1)):
        assert decide(RECORD, situation) == {"action": "stop", "round": 0, "bound": situation.bound, "message": TODAY}


def test_resume_runs_the_next_round_then_stops_after_the_attempts_naming_them():
    base = dict(mode="resume", attempts=2, planned=5, left=4, on_failure="exclude", spares=1)
    first = decide(RECORD, Situation(**base))
    assert first["action"] == "resume" and first["round"] == 1
    assert "Resuming by itself (submit_on_node_loss: resume), attempt 1 of at most 2" in first["message"]
    assert decide(RECORD, Situation(**{**base, "rounds_done": 1}))["round"] == 2
    spent = decide(RECORD, Situation(**{**base, "rounds_done": 2}))
    assert spent["action"] == "stop"
    assert spent["message"] == TODAY + "; this run stopped after 2 automatic attempts (submit_resume_attempts: 2)"


def test_check_mode_never_resumes():
    assert decide(RECORD, Situation(mode="resume", check_mode=True, planned=5, left=4, on_failure="exclude",
                                    spares=1))["message"] == TODAY


def test_no_durable_checkpoint_and_too_few_nodes_stop_naming_the_fix():
    res = decide(RECORD, Situation(mode="resume", durable=False, planned=5, left=4, on_failure="exclude", spares=1))
    assert res["action"] == "stop" and res["message"].startswith(TODAY)
    assert res["message"].endswith("no checkpoint is durable (submit_checkpoint_store is empty, so a new attempt "
                                   "would start from epoch 1): set submit_checkpoint_store")
    # The gate's rule: with 'stop' no node may be left out, with 'exclude' no more than the spares.
    res = decide(RECORD, Situation(mode="resume", planned=4, left=3, on_failure="stop", spares=1))
    assert res["action"] == "stop" and "3 of the run's 4 node(s) are left and it trains on no fewer than 4" in res[
        "message"]
    assert decide(RECORD, Situation(mode="resume", planned=4, left=3, on_failure="exclude", spares=1))[
        "action"] == "resume"


def test_the_bound_is_the_rounds_site_yml_holds():
    """playbooks/site.yml imports playbooks/resume.yml exactly ROUNDS times, numbered 1..ROUNDS, and
    submit_resume_attempts cannot ask for more."""
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    rounds = [p["vars"]["node_loss_round"] for p in site if p.get("ansible.builtin.import_playbook") == "resume.yml"]
    assert rounds == list(range(1, ROUNDS + 1))
    spec = yaml.safe_load((ROOT / "roles" / "submit" / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert options["submit_resume_attempts"]["choices"] == list(range(0, ROUNDS + 1))
    assert options["submit_on_node_loss"]["choices"] == ["stop", "resume"]
    assert options["submit_on_node_loss"]["default"] == "stop" and options["submit_resume_attempts"]["default"] == 2


def run(mode: str, attempts: int, check_mode: bool, durable: bool, planned: int, on_failure: str, spares: int,
        events: list[bool]) -> tuple[int, list[dict]]:
    """A run whose job loses one node after another; between losses AmlCompute puts a node back
    (True) or not (False). Returns the rounds run and each decision."""
    rounds, training, decisions = 0, planned, []
    for replaced in events:
        left = training - 1
        d = decide(RECORD, Situation(mode=mode, attempts=attempts, rounds_done=rounds, check_mode=check_mode,
                                     durable=durable, planned=planned, left=left, on_failure=on_failure,
                                     spares=spares))
        decisions.append({**d, "left": left})
        if d["action"] != "resume":
            break
        assert d["round"] == rounds + 1
        rounds = d["round"]
        training = min(planned, left + (1 if replaced else 0))
    return rounds, decisions


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.sampled_from(["stop", "resume"]), st.integers(-2, 9), st.booleans(), st.booleans(), st.integers(1, 64),
       st.sampled_from(["stop", "exclude"]), st.integers(0, 8), st.lists(st.booleans(), min_size=1, max_size=12))
@example("resume", 9, False, True, 64, "exclude", 8, [True] * 12)  # asks for more rounds than site.yml holds
@example("resume", 2, False, True, 2, "exclude", 1, [False, False])  # the last node left is never enough
def test_never_more_rounds_than_the_bound_and_only_when_it_can_resume(
        mode, attempts, check_mode, durable, planned, on_failure, spares, events):
    rounds, decisions = run(mode, attempts, check_mode, durable, planned, on_failure, spares, events)
    assert rounds <= min(max(attempts, 0), ROUNDS) <= ROUNDS
    if mode == "stop" or check_mode:
        assert rounds == 0 and decisions[0]["message"] == TODAY
    floor = max(1, planned - (spares if on_failure == "exclude" else 0))
    for d in decisions:
        assert d["message"].startswith(TODAY) if d["action"] == "stop" else "Resuming by itself" in d["message"]
        if d["action"] == "resume":
            assert mode == "resume" and not check_mode and durable and d["left"] >= floor >= 1
    last = decisions[-1]
    if last["action"] == "resume":
        assert len(decisions) == len(events)  # it stops only when the losses stop
    elif mode == "resume" and not check_mode and rounds == min(max(attempts, 0), ROUNDS):
        assert re.search(rf"; this run stopped after {rounds} automatic attempts? \(submit_resume_attempts: "
                         rf"{attempts}\)$", last["message"]), last
