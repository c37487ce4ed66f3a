"""Issue 48 item 3: a checkpoint store belongs to its run (plugins/module_utils/amlhpc/recovery/checkpoint_identity.py).

A store or checkpoint is resumed exactly when its run is this one (name, model, data), whatever
the world size; the data set's fingerprint is the same however its files are sharded over the
nodes; a run already at its last epoch says so. The store itself: tests/workload/test_ckpt_store.py."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.recovery import checkpoint_identity as ckpt_store
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.recovery.checkpoint_identity import (
    identity,
    identity_problem,
)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(a=st.fixed_dictionaries({"name": st.sampled_from(["cosmoflow", "other"]),
                                "model": st.dictionaries(st.sampled_from(["cube", "conv_size", "dropout"]),
                                                         st.integers(0, 3)),
                                "data": st.sampled_from(["96 files 01", "64 files 02"])}),
       b=st.fixed_dictionaries({"name": st.sampled_from(["cosmoflow", "other"]),
                                "model": st.dictionaries(st.sampled_from(["cube", "conv_size", "dropout"]),
                                                         st.integers(0, 3)),
                                "data": st.sampled_from(["96 files 01", "64 files 02"])}),
       worlds=st.tuples(st.integers(1, 64), st.integers(1, 64)))
@example(a={"name": "cosmoflow", "model": {}, "data": "96 files 01"},
         b={"name": "cosmoflow", "model": {}, "data": "96 files 01"}, worlds=(4, 3))
def test_a_store_is_resumed_exactly_when_its_run_is_this_one(a, b, worlds):
    theirs = identity(a["name"], a["model"], a["data"], world_size=worlds[0], global_batch=4 * worlds[0])
    ours = identity(b["name"], b["model"], b["data"], world_size=worlds[1], global_batch=4 * worlds[1])
    problem = identity_problem(theirs, ours, "the store")
    same = (a["name"], a["model"], a["data"]) == (b["name"], b["model"], b["data"])
    assert (problem is None) == same  # the world size never decides (a node left out resumes)
    if problem:
        assert problem.startswith("the store holds the checkpoints of another run")


@settings(derandomize=True, max_examples=100, deadline=None)
@given(names=st.sets(st.from_regex(r"(train|validation)/[a-z0-9_]{1,12}\.tfrecord", fullmatch=True), min_size=1,
                     max_size=60),
       nodes=st.integers(1, 8), data=st.data())
def test_any_sharding_of_the_data_gives_the_whole_sets_fingerprint(names, nodes, data):
    names = sorted(names)
    owner = [data.draw(st.integers(0, nodes - 1)) for _unused in names]
    parts = [ckpt_store.name_sum([n for n, o in zip(names, owner) if o == node]) for node in range(nodes)]
    assert ckpt_store.fingerprint(parts) == ckpt_store.fingerprint([ckpt_store.name_sum(names)])
    assert ckpt_store.fingerprint(parts) != ckpt_store.fingerprint([ckpt_store.name_sum(names[1:])])


def test_the_data_fingerprint_is_the_same_however_the_files_are_sharded():
    names = [f"train/univ_{i:04d}.tfrecord" for i in range(40)] + [f"validation/v_{i}.tfrecord" for i in range(8)]
    whole = ckpt_store.fingerprint([ckpt_store.name_sum(names)])
    for nodes in (2, 3, 5):
        parts = [ckpt_store.name_sum(names[i::nodes]) for i in range(nodes)]
        assert ckpt_store.fingerprint(parts) == whole
    assert ckpt_store.fingerprint([ckpt_store.name_sum(names[:-1])]) != whole
    assert whole.startswith("48 files ")


def test_a_store_at_the_requested_epoch_says_so_in_one_sentence():
    assert ckpt_store.nothing_to_train(3, 4, "the checkpoint store's epoch_003.pt") is not None
    text = ckpt_store.nothing_to_train(3, 4, "the checkpoint store's epoch_003.pt")
    assert "4 of --epochs 4" in text and "raise --epochs" in text and text.count(". ") == 0
    assert ckpt_store.nothing_to_train(2, 4, "x") is None
