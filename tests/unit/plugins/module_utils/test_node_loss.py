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
    Finding,
    GateRule,
    Look,
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
    text = loss_sentence(Finding(seen, tuple(sorted(ranks)), seconds, last, what, 3), node=node, ip=ip, world=world,
                         by=by, at=last + seconds)
    log = "[cosmoflow] epoch 1: ...\nsome other line\n" + text + "\n[cosmoflow] more\n"
    found = parse_loss(log)
    assert found is not None
    assert (found["node"], found["ip"], found["ranks"], found["world"], found["seen"], found["by"]) == \
        (node, ip, sorted(ranks), world, seen, by)
    assert found["last_ts"] == int(last)  # to the second
    assert found["sentence"].startswith(f"node {node} (") and "rerun site.yml" in found["sentence"]


def test_the_sentence_names_this_nodes_ranks_of_the_finding_and_never_a_slow_peer():
    """A finding can span nodes: each node's sentence names its own ranks (the finding's where none
    are given). A slow peer is not lost: no sentence for it, in the words the keywords had."""
    finding = Finding(MISSED, (1, 2, 3), 95, T0)
    assert "rank 2 of 4:" in loss_sentence(finding, node="hx-2", ip="", ranks=[2], world=4, by=0, at=T0 + 95)
    assert "ranks 1-3 of 4:" in loss_sentence(finding, node="hx-1", ip="", world=4, by=0, at=T0 + 95)
    try:
        loss_sentence(Finding(node_loss.SLOW, (1,), 95, T0), node="hx-1", ip="", world=4, by=0, at=T0 + 95)
    except ValueError as exc:
        assert str(exc) == "seen must be one of ('missed heartbeat', 'collective timed out'), not 'slow peer'"
    else:
        raise AssertionError("a slow peer was named lost")


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
    return last_look(Look(job_nodes=RANKED, in_play=in_play, probes=probes, expected=expected or {}, timeout=30),
                     GateRule(on_failure=on_failure, spares=spares, ranked=RANKED, addresses=ADDR, port=29400,
                              verdict=previous))


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
    stop = GateRule(on_failure="stop", spares=0, ranked=RANKED, addresses=ADDR, port=29400)
    out = last_look(Look(job_nodes=RANKED, in_play=RANKED, probes=probes, expected=files, timeout=30, check_mode=True),
                    stop)
    assert out["action"] == "pass" and out["lost"] == []
    probes["c-2"] = {"unreachable": True, "msg": "Failed to connect to the host via ssh"}
    out = last_look(Look(job_nodes=RANKED, in_play=RANKED, probes=probes, expected=files, timeout=30, check_mode=True),
                    stop)
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
    sentence = loss_sentence(Finding(MISSED, (3,), 95, T0), node="tw-3-abc", ip="10.0.0.3", world=5, by=0, at=T0 + 95)
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
    old = loss_sentence(Finding(MISSED, (2,), 40, T0), node="old", ip="10.0.0.9", world=5, by=0, at=T0 + 40)
    log.write_text(f"attempt 1\n{old}\n")
    start = log.stat().st_size
    assert node_loss.parse_loss_file(str(log))["node"] == "old"
    assert node_loss.parse_loss_file(str(log), start=start) is None  # this run lost nothing
    new = loss_sentence(Finding(MISSED, (1,), 40, T0 + 900), node="new", ip="10.0.0.3", world=4, by=0, at=T0 + 940)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"attempt 2\n{new}\n")
    assert node_loss.parse_loss_file(str(log), start=start)["node"] == "new"
    assert node_loss.parse_loss_file(str(tmp_path / "none.log")) is None


# --- issue 48 item 2: lost, not slow, and the right node named ---------------------------------------
#
# A timeline: rank 0 waits in a collective from ``since``; rank 1, alive, beats every ``beat_gap``
# seconds or less and makes a step (a training or validation batch) after each gap in ``steps``.
# ``observe`` replays it as rank 0's watcher sees it, one look per ``interval``: when each rank's
# beat and step counters last moved, and the rank's recent step times (node_loss.StepClock).

from hypothesis import example  # noqa: E402

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.recovery.node_loss import (  # noqa: E402
    SLOW,
    StepClock,
    collective_bound,
    parse_losses,
)

WHAT = "the all-reduce of the validation errors"


def observe(lost_after: float, interval: float, beat_gap: float, steps: list[float], silent_from: float | None,
            stall_from: float | None):
    """Every verdict rank 0's watcher reaches, one look per ``interval``, over the timeline."""
    step_at, t = [], 0.0
    for gap in steps:
        t += gap
        step_at.append(t)
    end = (step_at[-1] if step_at else 0.0) + 3 * lost_after
    clock = StepClock()
    beat_seen, step_seen, count_seen = {0: 0.0, 1: 0.0}, {0: 0.0, 1: 0.0}, {0: 0, 1: 0}
    verdicts = []
    now = 0.0
    while now <= end:
        now += interval
        beat_last = now - (now % beat_gap)  # rank 1's latest beat
        alive = silent_from is None or beat_last < silent_from
        if alive:
            beat_seen[1] = now if beat_last > beat_seen[1] else beat_seen[1]
            done = sum(1 for s in step_at if s <= beat_last and (stall_from is None or s < stall_from))
            if done != count_seen[1]:
                count_seen[1] = done
                step_seen[1] = now
                clock.moved(1, now)
        beat_seen[0] = now  # rank 0 watches: always alive, waiting in the collective since 0
        verdicts.append((now, judge(now, beat_seen, {0: (WHAT, 0.0)}, lost_after, progress=step_seen,
                                    step_time=clock.step_times())))
    return verdicts


@settings(derandomize=True, max_examples=100, deadline=None)
@given(timeout=st.sampled_from([6.0, 12.0, 30.0, 120.0]), data=st.data())
@example(timeout=120.0, data=None)
def test_a_live_slow_rank_is_never_named_lost(timeout, data):
    t = node_loss.Timing.of(timeout)
    if data is None:  # the CI machine of issue 48: a validation batch every 40 s, beats on time
        beat_gap, steps = t.interval, [40.0] * 6
    else:
        beat_gap = data.draw(st.floats(0.1, t.interval))
        # every step within the bound the watcher had drawn from the steps before it
        steps, slowest = [], 0.0
        for _unused in range(data.draw(st.integers(1, 8))):
            gap = data.draw(st.floats(0.05, collective_bound(t.lost_after, slowest) - 2 * t.interval - beat_gap))
            steps.append(gap)
            slowest = max(slowest, gap)
    verdicts = observe(t.lost_after, t.interval, beat_gap, steps, None, stall_from=None)
    ended = [(now, f) for now, f in verdicts if now <= sum(steps) and f is not None and f.seen != SLOW]
    assert not ended, ended[0]


@settings(derandomize=True, max_examples=100, deadline=None)
@given(timeout=st.sampled_from([6.0, 12.0, 30.0, 120.0]), data=st.data())
def test_a_rank_silent_or_stalled_beyond_the_bound_is_always_named(timeout, data):
    t = node_loss.Timing.of(timeout)
    steps = [data.draw(st.floats(0.05, t.lost_after)) for _unused in range(data.draw(st.integers(1, 6)))]
    at = data.draw(st.floats(0, sum(steps)))
    silent = data.draw(st.booleans())
    verdicts = observe(t.lost_after, t.interval, t.interval, steps, at if silent else None, None if silent else at)
    # the watcher sees a step to a beat and a look: its step times are that much longer at most
    bound = collective_bound(t.lost_after, max(steps) + 2 * t.interval)
    named = [(now, f) for now, f in verdicts if f is not None and f.seen in (MISSED, COLLECTIVE)]
    assert named, "never named"
    now, finding = named[0]
    assert finding.ranks == (1,)
    if not silent:  # its beats go on: a stalled collective, never a missed heartbeat
        assert finding.seen == COLLECTIVE and finding.stalled >= finding.bound
    # within the bound (and the watcher's looks) of the moment it stopped
    assert now <= at + (t.lost_after if silent else bound) + 3 * t.interval


def test_a_slow_peer_is_said_and_a_stalled_one_named_with_what_was_seen():
    t = node_loss.Timing.of(120)
    now = 1000.0
    beats = {0: now, 1: now - 5}
    waits = {0: (WHAT, now - 95)}
    slow = judge(now, beats, waits, t.lost_after, progress={0: now, 1: now - 30}, step_time={1: 40.0})
    assert slow is not None and slow.seen == SLOW and slow.ranks == (1,)
    stalled = judge(now, beats, waits, t.lost_after, progress={0: now, 1: now - 170}, step_time={1: 40.0})
    assert stalled is not None and stalled.seen == COLLECTIVE and stalled.stalled >= 160
    text = loss_sentence(Finding(COLLECTIVE, (1,), 95, T0, WHAT, 1, stalled.stalled, stalled.bound), node="n1",
                         ip="10.0.0.5", world=2, by=0, at=T0 + 95)
    assert "made no step for 170 s" in text and "stalled" in text
    assert parse_loss(text)["ranks"] == [1]


def sentence(node_: str, ip: str, ranks: list[int], world: int, by: int, seen: str = MISSED, t: float = 95) -> str:
    return loss_sentence(Finding(seen, tuple(ranks), t, T0), node=node_, ip=ip, world=world, by=by, at=T0 + t)


def test_a_head_cut_off_from_the_network_is_the_node_named():
    # rank 0's node lost its network: rank 0 lost ranks 1-3, and each of them lost rank 0's store
    log = "\n".join([sentence("hr-1", "10.0.0.5", [1], 4, 0), sentence("hr-2", "10.0.0.6", [2], 4, 0),
                     sentence("hr-3", "10.0.0.7", [3], 4, 0)]
                    + [sentence("hr-0", "10.0.0.4", [0], 4, b) for b in (1, 2, 3)])
    found = parse_loss(log)
    assert (found["node"], found["ip"], found["ranks"]) == ("hr-0", "10.0.0.4", [0])
    assert found["cut_off"] is True
    assert "ranks 1-3 lost it" in found["sentence"] and "it lost ranks 1-3" in found["sentence"]
    assert len(parse_losses(log)) == 6


# Recorded on the twin (tests/integration/test_twin_head_cut.py, the head's veth taken down in epoch 3
# of 4): rank 0 stopped at its first finding, naming only the two ranks whose beats it missed first;
# every other rank named rank 0. The head named a healthy node, hcut-3, which the run recorded.
HEAD_CUT_ON_THE_TWIN = "\n".join(
    [f'[node-loss] node hcut-{r}-{n} (10.121.82.1{r}), rank {r} of 5: no heartbeat for 34 s (missed heartbeat; '
     f'last at 2026-11-29T06:47:44Z, seen by rank 0 at 2026-11-29T06:48:18Z); the job stops so that it can resume '
     f'without it: rerun site.yml (docs/operations.md, "A node lost during training")'
     for r, n in ((3, "8095340ab606"), (4, "2b0298d2b527"))]
    + [f'[node-loss] node hcut-0-7ea77969e43e (10.121.82.10), rank 0 of 5: no heartbeat for 37 s (missed heartbeat; '
       f'last at 2026-11-29T06:47:44Z, seen by rank {b} at 2026-11-29T06:48:21Z); the job stops so that it can '
       f'resume without it: rerun site.yml (docs/operations.md, "A node lost during training")' for b in (1, 2, 3, 4)])


def test_a_head_cut_off_that_stopped_at_its_first_finding_is_the_node_named():
    found = parse_loss(HEAD_CUT_ON_THE_TWIN)
    assert (found["node"], found["ranks"]) == ("hcut-0-7ea77969e43e", [0]), found["sentence"]
    assert found["cut_off"] is True
    assert "ranks 1-4 lost it" in found["sentence"] and "it lost ranks 3-4" in found["sentence"]


def test_two_workers_cut_off_together_never_blame_the_head_the_others_still_hear():
    # ranks 3 and 4 lost rank 0's store; rank 0 lost them; ranks 1 and 2 heard rank 0 all along
    log = "\n".join([sentence("hr-3", "10.0.0.7", [3], 5, 0), sentence("hr-4", "10.0.0.8", [4], 5, 0),
                     sentence("hr-0", "10.0.0.4", [0], 5, 3), sentence("hr-0", "10.0.0.4", [0], 5, 4)])
    found = parse_loss(log)
    assert found["node"] in ("hr-3", "hr-4") and found["node"] != "hr-0", found["sentence"]


@settings(max_examples=300)
@given(world=st.integers(3, 9), data=st.data())
def test_the_node_named_is_one_that_was_lost_whoever_spoke_and_in_whatever_order(world, data):
    """Generated losses: the head cut off (rank 0 names the ranks it missed first, then stops; every
    other rank names rank 0), a worker cut off (it names rank 0's store; rank 0 names it), or one
    or two workers dead (only rank 0 speaks). Sentences in any order. The node named is always one
    that was lost, never a healthy one."""
    kind = data.draw(st.sampled_from(["head cut", "worker cut", "dead"]))
    workers = list(range(1, world))
    lines = []
    if kind == "head cut":
        lost = {0}
        first_missed = data.draw(st.lists(st.sampled_from(workers), min_size=1, max_size=world - 1, unique=True))
        lines += [sentence(f"n{r}", f"10.0.0.{10 + r}", [r], world, 0) for r in first_missed]
        lines += [sentence("n0", "10.0.0.10", [0], world, b, t=97) for b in workers]
    elif kind == "worker cut":
        cut = data.draw(st.sampled_from(workers))
        lost = {cut}
        lines += [sentence(f"n{cut}", f"10.0.0.{10 + cut}", [cut], world, 0),
                  sentence("n0", "10.0.0.10", [0], world, cut, t=97)]
    else:
        dead = data.draw(st.lists(st.sampled_from(workers), min_size=1, max_size=min(2, world - 2), unique=True))
        lost = set(dead)
        lines += [sentence(f"n{r}", f"10.0.0.{10 + r}", [r], world, 0) for r in dead]
    lines = data.draw(st.permutations(lines))
    found = parse_loss("\n".join(lines))
    assert found is not None and found["ranks"][0] in lost, (kind, found["sentence"])


def test_a_worker_cut_off_is_the_node_named_whichever_sentence_comes_first():
    theirs = sentence("hr-3", "10.0.0.7", [3], 4, 0)
    its = sentence("hr-0", "10.0.0.4", [0], 4, 3)  # rank 3 lost rank 0's store
    for log in (its + "\n" + theirs + "\n" + theirs, theirs + "\n" + its):
        found = parse_loss(log)
        assert found["node"] == "hr-3" and found["cut_off"] is True, found["sentence"]


def test_a_frozen_node_that_wakes_after_the_finding_is_lost_not_cut_off():
    # Recorded on the twin (test_twin_node_loss, a node frozen with docker pause, thawed when the
    # job ended): rank 0 found rank 3 silent within the bound; rank 3, stopped all that time, looked
    # only once it woke and found rank 0's store silent for twice as long. A rank cut off from the
    # network looks while it is cut off, so its own gap is the bound too.
    woke = ('[node-loss] node nl-0-adfb926c206e (10.181.112.10), rank 0 of 4: no heartbeat for 69 s (missed '
            'heartbeat; last at 2026-11-29T00:07:41Z, seen by rank 3 at 2026-11-29T00:08:50Z); the job stops so that '
            'it can resume without it: rerun site.yml (docs/operations.md, "A node lost during training")')
    found_it = ('[node-loss] node nl-4-431f4c10090c (10.181.112.14), rank 3 of 4: no heartbeat for 34 s (missed '
                'heartbeat; last at 2026-11-29T00:07:45Z, seen by rank 0 at 2026-11-29T00:08:19Z); the job stops so '
                'that it can resume without it: rerun site.yml (docs/operations.md, "A node lost during training")')
    for log in (found_it + "\n" + woke, woke + "\n" + found_it):
        found = parse_loss(log)
        assert (found["node"], found["ranks"]) == ("nl-4-431f4c10090c", [3]), found["sentence"]
        assert not found.get("cut_off") and found["sentence"].startswith("node nl-4-431f4c10090c (10.181.112.14), "
                                                                         "rank 3 of 4: no heartbeat for 34 s")


def test_two_nodes_lost_at_once_and_a_plain_loss_are_named_as_seen():
    log = sentence("hr-2", "10.0.0.6", [2], 4, 0) + "\n" + sentence("hr-3", "10.0.0.7", [3], 4, 0)
    found = parse_loss(log)
    assert found["node"] == "hr-2" and not found.get("cut_off")
    assert [n["node"] for n in found["also"]] == ["hr-3"]
    # two nodes, each lost the other: no side can be told; the first is named and the sentence says so
    both = sentence("n1", "10.0.0.5", [1], 2, 0) + "\n" + sentence("n0", "10.0.0.4", [0], 2, 1)
    found = parse_loss(both)
    assert found["node"] == "n1" and "either" in found["sentence"]
