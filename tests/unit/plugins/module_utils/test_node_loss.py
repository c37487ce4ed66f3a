"""Issue 43 and issue 42 item 5: the pure logic of a lost node (plugins/module_utils/amlhpc/recovery/node_loss.py).

The sentence the job prints and the controller reads back; the heartbeat's rule (never a rank
with fresh beats called lost, never one waiting in the collective called its laggard); the
run's slots (with the real shard planner: a node that survived keeps its shard whatever the
listing calls it now, only the lost node's files move, a node AmlCompute put in its place gets
exactly that shard); the last look before submit; the interruption's record and report."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.recovery import node_loss
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.recovery.node_loss import (
    COLLECTIVE,
    MISSED,
    judge,
    last_look,
    loss_sentence,
    parse_loss,
    parse_ranks,
    plan_slots,
    rank_list,
)
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.shards import plan_shards, plan_shards_without

T0 = 1_795_000_000.0


# --- the sentence ---------------------------------------------------------------------------------

@given(st.sets(st.integers(0, 4095), min_size=1, max_size=40))
def test_rank_lists_read_back(ranks):
    assert parse_ranks(rank_list(ranks)) == sorted(ranks)


hosts = st.from_regex(r"[a-z][a-z0-9-]{0,20}(/node[0-9]{1,2})?", fullmatch=True)
ips = st.one_of(st.just(""), st.ip_addresses(v=4).map(str))


@given(node=hosts, ip=ips, ranks=st.sets(st.integers(0, 511), min_size=1, max_size=8),
       seen=st.sampled_from([MISSED, COLLECTIVE]), seconds=st.floats(0, 10_000), last=st.floats(T0, T0 + 1e6),
       by=st.integers(0, 511), what=st.sampled_from(["the gradient all-reduce of step 42",
                                                     "the all-reduce of the validation errors"]))
def test_the_sentence_reads_back_from_a_log(node, ip, ranks, seen, seconds, last, by, what):
    world = max(ranks) + 1
    text = loss_sentence(node=node, ip=ip, ranks=sorted(ranks), world=world, seen=seen, seconds=seconds, last=last,
                         by=by, at=last + seconds, what=what, waiting=3)
    log = "[cosmoflow] epoch 1: ...\nsome other line\n" + text + "\n[cosmoflow] more\n"
    found = parse_loss(log)
    assert found is not None
    assert (found["node"], found["ip"], found["ranks"], found["world"], found["seen"], found["by"]) == \
        (node, ip, sorted(ranks), world, seen, by)
    assert found["last_ts"] == int(last)  # to the second
    assert found["sentence"].startswith(f"node {node} (") and "rerun site.yml" in found["sentence"]


def test_no_sentence_no_loss():
    assert parse_loss("rank 0 of 2: the gradient all-reduce of step 5 waited more than 600 s") is None
    assert parse_loss("") is None


# --- the heartbeat's rule -------------------------------------------------------------------------

beats = st.dictionaries(st.integers(0, 15), st.floats(0, 200), min_size=2, max_size=16)


@given(beats, st.floats(1, 100), st.data())
def test_judge_never_calls_a_fresh_rank_lost_and_names_every_silent_one(last_change, lost_after, data):
    now = 200.0
    waits = data.draw(st.dictionaries(st.sampled_from(sorted(last_change)),
                                      st.tuples(st.sampled_from(["", "C1", "C2"]), st.floats(0, 200))))
    finding = judge(now, last_change, waits, lost_after)
    silent = sorted(r for r, t in last_change.items() if now - t >= lost_after)
    if silent:
        assert finding is not None and finding.seen == MISSED and list(finding.ranks) == silent
        return
    if finding is None:
        # nobody waited long in a collective that some live rank stays out of
        for what in {w for w, _unused in waits.values() if w}:
            inside = {r for r, (w, _unused) in waits.items() if w == what}
            held = [r for r in inside if now - waits[r][1] >= lost_after]
            assert not held or inside >= set(last_change)
        return
    assert finding.seen == COLLECTIVE
    inside = {r for r, (w, _unused) in waits.items() if w == finding.what}
    assert not set(finding.ranks) & inside  # a rank that waits is never the laggard
    assert set(finding.ranks) == set(last_change) - inside and finding.waiting == len(inside)
    assert any(now - waits[r][1] >= lost_after for r in inside)


@given(st.integers(2, 16), st.floats(1, 100), st.data())
def test_judge_names_the_live_ranks_that_keep_the_others_waiting(world, lost_after, data):
    now = 1000.0
    fresh = {r: now - data.draw(st.floats(0, lost_after * 0.99)) for r in range(world)}  # every rank beats
    inside = data.draw(st.sets(st.integers(0, world - 1), min_size=1))
    since = {r: now - data.draw(st.floats(0, 3 * lost_after)) for r in inside}
    finding = judge(now, fresh, {r: ("the gradient all-reduce of step 7", since[r]) for r in inside}, lost_after)
    held = any(now - t >= lost_after for t in since.values())
    if not held or len(inside) == world:  # nobody waited long, or nobody is behind: not ours to end
        assert finding is None
        return
    assert finding.seen == COLLECTIVE and set(finding.ranks) == set(range(world)) - inside
    assert finding.waiting == len(inside) and finding.seconds >= lost_after


# --- slots ------------------------------------------------------------------------------------------

def node(i: int, host: str | None = None) -> dict:
    return {"host": host or f"c-{i}", "node_id": f"id{i}", "ip": f"10.0.0.{i}", "cluster": "c", "rank": i}


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 12), st.data())
def test_only_the_lost_nodes_files_move_and_a_replacement_takes_its_shard(size, data):
    first = [node(i) for i in range(size)]
    slots = plan_slots(None, first)
    assert slots["hosts"] == [n["host"] for n in first] and slots["lost"] == []
    before = {s.host: set(s.suffixes) for s in plan_shards(slots["hosts"], "suffix")}
    recorded = slots["record"]
    # Some nodes are lost; AmlCompute lists the rest under names shifted down the ranks, and
    # maybe some new nodes (replacements); the listing's order is any.
    lost = data.draw(st.sets(st.integers(0, size - 1), max_size=size - 1))
    new = data.draw(st.integers(0, len(lost)))
    survivors = [i for i in range(size) if i not in lost]
    current = [dict(node(i), host=f"c-{k}", rank=k) for k, i in enumerate(survivors)]
    current += [dict(node(100 + j), host=f"c-{len(survivors) + j}", rank=len(survivors) + j) for j in range(new)]
    current = data.draw(st.permutations(current))
    plan = plan_slots(recorded, node_loss.current_nodes({n["host"]: {"aml_node_id": n["node_id"],
                                                                     "aml_private_ip": n["ip"], "aml_cluster": "c",
                                                                     "aml_node_rank": n["rank"]}
                                                         for n in current}, [n["host"] for n in current]))
    assert len(plan["hosts"]) == size and len(set(plan["hosts"])) == size
    assert sorted(h for h in plan["hosts"] if h not in plan["lost"]) == sorted(n["host"] for n in current)
    assert len(plan["lost"]) == len(lost) - new and all(h.startswith(node_loss.LOST_PREFIX) for h in plan["lost"])
    shards = {s.host: set(s.suffixes) for s in plan_shards_without(plan["hosts"], plan["lost"], "suffix")}
    name_of = {n["node_id"]: n["host"] for n in current}
    for i in survivors:  # a survivor keeps every suffix it held, under whatever name it has now
        assert before[f"c-{i}"] <= shards[name_of[f"id{i}"]]
    replaced = {r["host"]: r["was"] for r in plan["replacements"]}
    assert len(replaced) == new
    for host, was in replaced.items():  # the node in a lost node's place gets that node's shard
        assert before[was] <= shards[host]
        if not plan["lost"]:
            assert shards[host] == before[was]
    moved = set()
    for i in survivors:
        moved |= shards[name_of[f"id{i}"]] - before[f"c-{i}"]
    for host, was in replaced.items():
        moved |= shards[host] - before[was]
    lost_suffixes = set().union(*(before[f"c-{i}"] for i in lost)) if lost else set()
    taken = set().union(*(before[w] for w in replaced.values())) if replaced else set()
    assert moved == lost_suffixes - taken  # only what the lost slots without a node held moved, and all of it
    assert sorted(x for s in shards.values() for x in s) == list(range(64))
    # The next run maps onto the new record the same way: nothing changes, nothing moves.
    again = plan_slots(plan["record"], node_loss.current_nodes(
        {n["host"]: {"aml_node_id": n["node_id"], "aml_node_rank": n["rank"], "aml_cluster": "c"} for n in current},
        [n["host"] for n in current]))
    assert again["hosts"] == plan["hosts"] and again["lost"] == plan["lost"]


def test_the_first_run_and_an_unchanged_cluster_plan_as_before():
    nodes = [node(i) for i in range(5)]
    first = plan_slots(None, nodes)
    assert first["differs"] and first["lines"] == []
    again = plan_slots(first["record"], nodes)
    assert again["hosts"] == [f"c-{i}" for i in range(5)] and not again["differs"] and again["lines"] == []


def test_a_preempted_node_is_named_and_its_slot_left_out():
    record = plan_slots(None, [node(i) for i in range(5)])["record"]
    now = [dict(node(i), host=f"c-{k}", rank=k) for k, i in enumerate([0, 1, 3, 4])]
    plan = plan_slots(record, now)
    assert plan["hosts"] == ["c-0", "c-1", "lost:c-2", "c-2", "c-3"] and plan["lost"] == ["lost:c-2"]
    assert plan["lines"][0] == "node c-2 (node id id2) of this run is gone: its shard moves to the other nodes"
    # AmlCompute adds a node later: it takes the slot back.
    back = plan_slots(plan["record"], [*now, dict(node(9), host="c-4", rank=4)])
    assert back["hosts"] == ["c-0", "c-1", "c-4", "c-2", "c-3"] and back["lost"] == []
    assert back["lines"] == ["node c-4 takes the place of node c-2 (slot 2): it stages that node's shard"]


# --- the last look before submit -----------------------------------------------------------------

RANKED = [f"c-{i}" for i in range(5)]
ADDR = {h: f"10.0.0.{i}" for i, h in enumerate(RANKED)}


def probe(stdout="", **kw):
    return {"rc": 0, "stdout": stdout, "changed": False, **kw}


def look(probes, expected=None, on_failure="exclude", spares=1, in_play=RANKED, previous=None):
    return last_look(job_nodes=RANKED, in_play=in_play, probes=probes, expected=expected or {}, timeout=30,
                     on_failure=on_failure, spares=spares, previous=previous, ranked=RANKED, addresses=ADDR,
                     port=29400)


def test_every_node_answers_and_holds_its_shard():
    files = {h: [f"train/a_{i:03d}.tfrecord.gz"] for i, h in enumerate(RANKED)}
    out = look({h: probe(f"train/a_{i:03d}.tfrecord\n") for i, h in enumerate(RANKED)}, files)
    assert out["action"] == "pass" and out["lost"] == []


def test_a_node_that_does_not_answer_in_time_is_named_left_out_and_its_shard_moved():
    probes = {h: probe() for h in RANKED}
    probes["c-3"] = {"failed": True, "msg": "The ansible.builtin.command action failed to execute in the expected "
                                            "time frame (30) and was terminated"}
    out = look(probes)
    assert out["action"] == "exclude" and out["lost"] == [
        {"node": "c-3", "reason": "did not answer within 30 s right before submit"}]
    assert out["message"].startswith("node c-3 was lost after the health gate: it did not answer within 30 s right "
                                     "before submit. Left out (healthcheck_spare_nodes: 1): its shard moves to c-0, "
                                     "c-1, c-2, c-4, and the job trains on them.")
    assert out["verdict"]["excluded"] == ["c-3"] and out["verdict"]["rendezvous"] == "10.0.0.0:29400"
    assert out["restage"] == ["c-0", "c-1", "c-2", "c-4"] and out["verdict"]["min_nodes"] == 4
    # wait_for_connection's own words for a node that did not answer
    probes["c-3"] = {"failed": True, "elapsed": 30, "msg": "timed out waiting for ping module test: Failed to connect"}
    assert look(probes)["lost"] == [{"node": "c-3", "reason": "did not answer within 30 s right before submit"}]


def test_a_node_gone_from_the_play_or_missing_files_stops_without_exclude():
    files = {"c-2": ["train/x_001.tfrecord.gz", "train/x_002.tfrecord.gz"]}
    probes = {h: probe() for h in RANKED}
    probes["c-2"] = probe("train/x_001.tfrecord\n")
    out = look(probes, files, on_failure="stop", in_play=[h for h in RANKED if h != "c-4"])
    assert out["action"] == "stop"
    assert [n["node"] for n in out["lost"]] == ["c-2", "c-4"]
    assert "holds 1 of the 2 files of its shard (missing: train/x_002.tfrecord)" in out["message"]
    assert "stopped answering after the health gate" in out["message"]
    assert "set healthcheck_on_failure: exclude" in out["message"]


def test_in_check_mode_a_node_that_answers_is_kept_though_nothing_was_staged():
    """Check mode stages nothing: the stage folder may not exist and the shard is not there; a
    node that answers is fit (found on the twin: `site.yml --check` on a fresh cluster named
    every node lost). A node that does not answer is lost in check mode too."""
    files = {h: [f"train/a_{i:03d}.tfrecord.gz"] for i, h in enumerate(RANKED)}
    missing = {"rc": 1, "stdout": "", "stderr": "find: '/mnt/scratch/cosmoflow': No such file or directory",
               "changed": False}
    probes = {h: dict(missing) for h in RANKED}
    out = last_look(job_nodes=RANKED, in_play=RANKED, probes=probes, expected=files, timeout=30,
                    on_failure="stop", spares=0, previous=None, ranked=RANKED, addresses=ADDR, port=29400,
                    check_mode=True)
    assert out["action"] == "pass" and out["lost"] == []
    probes["c-2"] = {"unreachable": True, "msg": "Failed to connect to the host via ssh"}
    out = last_look(job_nodes=RANKED, in_play=RANKED, probes=probes, expected=files, timeout=30,
                    on_failure="stop", spares=0, previous=None, ranked=RANKED, addresses=ADDR, port=29400,
                    check_mode=True)
    assert [n["node"] for n in out["lost"]] == ["c-2"]
    # outside check mode the same listing is a lost node
    assert look({h: dict(missing) for h in RANKED}, files, on_failure="stop")["action"] == "stop"


def test_the_spares_the_gate_used_count():
    previous = {"failing": [{"node": "c-0", "reasons": ["gpu_health: 2 uncorrectable ECC error(s)"]}]}
    probes = {h: probe() for h in RANKED}
    probes["c-1"] = {"unreachable": True, "msg": "Failed to connect to the host via ssh"}
    out = look(probes, previous=previous)
    assert out["action"] == "stop" and "healthcheck_spare_nodes allows 1" in out["message"]
    out = look(probes, previous=previous, spares=2)
    assert out["action"] == "exclude" and out["verdict"]["excluded"] == ["c-0", "c-1"]


# --- the interruption ----------------------------------------------------------------------------

def test_the_interruption_is_recorded_resumed_and_reported():
    sentence = loss_sentence(node="tw-3-abc", ip="10.0.0.3", ranks=[3], world=5, seen=MISSED, seconds=95,
                             last=T0, by=0, at=T0 + 95)
    loss = parse_loss(sentence)
    metrics = {"epochs": [{"epoch": 0, "train_loss": 0.5}], "steps": [{"step": 9, "loss": 0.4}]}
    record = node_loss.interruption(loss, run="cf", run_id="cf", ended_at=T0 + 100, hosts_by_ip={"10.0.0.3": "c-3"},
                                    metrics=metrics)
    assert (record["node"], record["ranks"], record["epoch_reached"], record["epochs_done"]) == ("c-3", [3], 2, 1)
    note = node_loss.resume_note(record, rerun_at=T0 + 160, submitted_at=T0 + 250)
    assert note["time_lost_s"] == {"detection": 95.0, "job_end": 5.0, "waiting_for_rerun": 60.0,
                                   "regate_restage": 90.0}
    assert note["lost_at"] == T0 and note["epoch_reached"] == 2
    done = node_loss.resumed(record, "cf-r2", {"resume": [{"resumed_from_checkpoint": {
        "checkpoint": "https://a/c/cf/epoch_000.pt", "epoch_done": 1}, "interruption": {
        "resumed_epoch": 2, "time_lost_s": {**note["time_lost_s"], "restart": 40.0, "total": 290.0}}}]})
    [line] = node_loss.report_lines([done])
    assert line == ("interrupted: run cf lost node c-3 (10.0.0.3, rank 3; missed heartbeat) in epoch 2; cf-r2 "
                    "resumed from https://a/c/cf/epoch_000.pt at epoch 2; time lost (s): detection 95.0, job end "
                    "5.0, waiting for rerun 60.0, regate restage 90.0, restart 40.0, total 290.0")
    assert node_loss.report_lines([record])[0].endswith("; not resumed yet (rerun site.yml)")


def test_only_this_runs_part_of_an_appended_log_is_read(tmp_path):
    log = tmp_path / "run.log"
    old = loss_sentence(node="old", ip="10.0.0.9", ranks=[2], world=5, seen=MISSED, seconds=40, last=T0, by=0,
                        at=T0 + 40)
    log.write_text(f"attempt 1\n{old}\n")
    start = log.stat().st_size
    assert node_loss.parse_loss_file(str(log))["node"] == "old"
    assert node_loss.parse_loss_file(str(log), start=start) is None  # this run lost nothing
    new = loss_sentence(node="new", ip="10.0.0.3", ranks=[1], world=4, seen=MISSED, seconds=40, last=T0 + 900,
                        by=0, at=T0 + 940)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"attempt 2\n{new}\n")
    assert node_loss.parse_loss_file(str(log), start=start)["node"] == "new"
    assert node_loss.parse_loss_file(str(tmp_path / "none.log")) is None
