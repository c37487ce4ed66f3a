"""The shard planner: every blob in exactly one shard, deterministic, balanced."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amlhpc.staging.shards import (
    SUFFIXES,
    Blob,
    ShardError,
    empty_source_error,
    imbalance,
    include_pattern,
    list_of_files,
    moved_files,
    plan_shards,
    plan_shards_without,
    plan_summary,
    split_suffixes,
    suffix_of,
)


def cosmo_blobs(universes: int, sizes=None, gz: bool = True) -> list[Blob]:
    out = []
    for u in range(universes):
        for s in range(SUFFIXES):
            name = f"train/univ_ics_2019-03_a{u:06d}_{s:03d}.tfrecord" + (".gz" if gz else "")
            size = sizes(u, s) if sizes else 1000 + (u * 64 + s) % 17
            out.append(Blob(name, size, size * 4, "gzip" if gz else ""))
    return out


hosts_st = st.integers(min_value=1, max_value=200).map(lambda n: [f"node-{i}" for i in range(n)])
blobs_st = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, SUFFIXES - 1), st.integers(0, 10_000), st.booleans()),
    max_size=300, unique_by=lambda t: (t[0], t[1], t[3]),
).map(lambda rows: [Blob(f"d/univ_ics_2019-03_a{u:06d}_{s:03d}.tfrecord" + (".gz" if g else ""), size)
                    for u, s, size, g in rows])


@settings(max_examples=150, deadline=None)
@given(hosts=hosts_st, blobs=blobs_st, mode=st.sampled_from(["suffix", "balanced"]))
def test_every_blob_in_exactly_one_shard(hosts, blobs, mode):
    shards = plan_shards(hosts, mode, blobs, allow_idle=True)
    assert [s.host for s in shards] == hosts
    assert [s.rank for s in shards] == list(range(len(hosts)))
    names = [b.name for s in shards for b in s.blobs]
    assert sorted(names) == sorted(b.name for b in blobs)
    assert len(names) == len(set(names))


@settings(max_examples=100, deadline=None)
@given(hosts=hosts_st, blobs=blobs_st, mode=st.sampled_from(["suffix", "balanced"]))
def test_plan_is_deterministic_whatever_the_listing_order(hosts, blobs, mode):
    a = plan_summary(plan_shards(hosts, mode, blobs, allow_idle=True), mode)
    b = plan_summary(plan_shards(hosts, mode, list(reversed(blobs)), allow_idle=True), mode)
    assert a == b


@settings(max_examples=100, deadline=None)
@given(blobs=blobs_st.filter(lambda b: len(b) > 0), n=st.integers(1, 200))
def test_balanced_is_within_one_largest_blob_of_the_mean(blobs, n):
    """LPT's guarantee: no host exceeds the mean by more than the largest blob."""
    shards = plan_shards([f"h{i}" for i in range(n)], "balanced", blobs)
    mean = sum(b.size for b in blobs) / n
    largest = max(b.size for b in blobs)
    assert max(s.bytes for s in shards) <= mean + largest


@settings(max_examples=64, deadline=None)
@given(n=st.integers(1, SUFFIXES))
def test_suffixes_split_evenly_and_contiguously(n):
    per_host = split_suffixes(n)
    flat = [s for block in per_host for s in block]
    assert flat == list(range(SUFFIXES))
    sizes = [len(b) for b in per_host]
    assert max(sizes) - min(sizes) <= 1


def test_more_than_64_nodes_in_suffix_mode_is_refused_with_the_fix():
    with pytest.raises(ShardError, match=r"70 nodes would leave 6 of them without data: use shard mode 'balanced'"):
        split_suffixes(70)
    per_host = split_suffixes(70, allow_idle=True)
    assert [len(b) for b in per_host] == [1] * 64 + [0] * 6


def test_balanced_handles_more_than_64_nodes_evenly():
    blobs = cosmo_blobs(10, sizes=lambda u, s: 16_000_000 + (u * 131 + s * 7) % 400_000)
    shards = plan_shards([f"h{i}" for i in range(70)], "balanced", blobs)
    assert sum(s.files for s in shards) == 640
    # 640 files over 70 nodes: 9 or 10 each, so the best possible max/mean is 10 / (640 / 70).
    assert {s.files for s in shards} == {9, 10}
    assert imbalance([s.bytes for s in shards]) < 10 / (640 / 70) * 1.01


def test_suffix_mode_uses_the_cosmoflow_suffix():
    blobs = cosmo_blobs(2)
    shards = plan_shards(["a", "b", "c"], "suffix", blobs)
    assert [s.suffixes[0] for s in shards] == [0, 21, 42]
    assert all(suffix_of(b.name) in shards[1].suffixes for b in shards[1].blobs)
    assert [s.files for s in shards] == [42, 42, 44]


def test_suffix_mode_refuses_blobs_outside_the_naming():
    blobs = cosmo_blobs(1) + [Blob("train/README.txt", 10)]
    with pytest.raises(ShardError, match=r"1 blob\(s\) do not follow the CosmoFlow naming .*README.txt"):
        plan_shards(["a"], "suffix", blobs)


def test_include_pattern_matches_plain_and_gzip():
    assert include_pattern([5, 4]) == "*_004.tfrecord;*_004.tfrecord.gz;*_005.tfrecord;*_005.tfrecord.gz"
    with pytest.raises(ShardError):
        include_pattern([64])


def test_suffix_of():
    assert suffix_of("x/univ_ics_2019-03_a000123_063.tfrecord.gz") == 63
    assert suffix_of("univ_ics_2019-03_a000123_064.tfrecord") is None
    assert suffix_of("univ_ics_2019-03_a000123_001.tfrecord.tmp") is None


@pytest.mark.parametrize(("name", "suffix"), [
    ("train/cosmo_2019_05_4parE_u7_012.tfrecord", 12),  # another CosmoFlow-style naming
    ("val/sample-000042_063.tfrecord.gz", 63),
    ("univ_ics_2019-03_a000123_000.tfrecord", 0),
    ("x_64.tfrecord", None),  # two digits
    ("x_0064.tfrecord", None),  # four digits: not _<NNN>
    ("x_064.tfrecord", None),  # beyond 063
    ("_005.tfrecord", None),  # nothing before the suffix
    ("x_005.tfrecords", None),
])
def test_suffix_of_accepts_any_name_ending_in_a_suffix(name, suffix):
    assert suffix_of(name) == suffix


def test_suffix_mode_plans_other_cosmoflow_style_names():
    blobs = [Blob(f"train/run{u}-sample_{s:03d}.tfrecord.gz", 100, 400, "gzip") for u in range(2) for s in range(64)]
    shards = plan_shards(["a", "b"], "suffix", blobs)
    assert [s.files for s in shards] == [64, 64]


def test_summary_reports_bytes_files_and_imbalance():
    blobs = [Blob("a", 300, 900, "gzip"), Blob("b", 100, None, "gzip"), Blob("c", 100)]
    summary = plan_summary(plan_shards(["h0", "h1"], "balanced", blobs), "balanced")
    assert summary["shards"]["h0"]["list_of_files"] == ["a"]
    assert summary["shards"]["h1"]["list_of_files"] == ["b", "c"]
    assert summary["shards"]["h0"]["raw_bytes"] == 900
    assert summary["shards"]["h1"]["raw_bytes"] is None  # b's size after gunzip is unknown
    assert summary["total_bytes"] == 500 and summary["total_files"] == 3
    assert summary["imbalance"] == pytest.approx(300 / 250)
    assert summary["files_imbalance"] == pytest.approx(2 / 1.5)
    assert list_of_files(plan_shards(["h"], "balanced", blobs)[0].blobs) == "a\nb\nc\n"


def test_suffix_plan_without_listing():
    summary = plan_summary(plan_shards(["h0", "h1"], "suffix"), "suffix", listed=False)
    assert summary["total_files"] is None
    assert summary["shards"]["h1"]["suffixes"][0] == "032"
    assert "list_of_files" not in summary["shards"]["h0"]


def test_bad_inputs():
    with pytest.raises(ShardError, match="balanced mode needs the container listing"):
        plan_shards(["a"], "balanced")
    with pytest.raises(ShardError, match="shard mode must be one of"):
        plan_shards(["a"], "random")
    with pytest.raises(ShardError, match="names a host twice"):
        plan_shards(["a", "a"], "suffix")
    with pytest.raises(ShardError, match="names blob 'x' twice"):
        plan_shards(["a"], "balanced", [Blob("x", 1), Blob("x", 2)])


@settings(max_examples=60, deadline=None)
@given(blobs=blobs_st, n=st.integers(1, 40))
def test_fast_loads_match_the_planner(blobs, n):
    from amlhpc.staging.shards import balanced_loads
    shards = plan_shards([f"h{i}" for i in range(n)], "balanced", blobs)
    sizes = sorted((b.size for b in blobs), reverse=True)
    assert balanced_loads(sizes, n) == [s.bytes for s in shards]


def test_an_empty_listing_is_refused_naming_the_container_and_prefix():
    msg = empty_source_error([], "cosmoflow", "nothing-here")
    assert msg.startswith("container 'cosmoflow' has no blobs under prefix 'nothing-here', ")
    assert "nothing was staged or removed" in msg and "stage_allow_empty: true" in msg
    assert msg.count(". ") == 0 and msg.endswith(".")


def test_an_empty_listing_passes_when_meant_and_so_do_a_listing_with_blobs_and_no_listing():
    assert empty_source_error([], "cosmoflow", "p", allow_empty=True) is None
    assert empty_source_error([Blob("a_000.tfrecord", 1)], "cosmoflow", "p") is None
    assert empty_source_error(None, "cosmoflow", "p") is None


# --------------------------------------------------------------------------------------
# Leaving nodes out (the health gate's exclude): only their files move
# --------------------------------------------------------------------------------------
HOSTS4 = ["n0", "n1", "n2", "n3"]


@pytest.mark.parametrize("mode", ["suffix", "balanced"])
@pytest.mark.parametrize("bad", [["n0"], ["n2"], ["n1", "n3"]])
def test_excluding_nodes_moves_only_their_files(mode, bad):
    blobs = cosmo_blobs(2)
    whole = plan_shards(HOSTS4, mode, blobs)
    kept = plan_shards_without(HOSTS4, bad, mode, blobs)
    assert [s.host for s in kept] == [h for h in HOSTS4 if h not in bad]
    # every blob once, and each kept node still holds all it held before
    names = [b.name for s in kept for b in s.blobs]
    assert sorted(names) == sorted(b.name for b in blobs)
    before = {s.host: {b.name for b in s.blobs} for s in whole}
    for s in kept:
        assert before[s.host] <= {b.name for b in s.blobs}
        assert s.rank == HOSTS4.index(s.host)
    moved = moved_files(whole, kept)
    assert sorted(n for to in moved.values() for src, ns in to.items() for n in ns) == sorted(
        n for h in bad for n in before[h])
    assert all(set(to) <= set(bad) for to in moved.values())
    # the bad nodes' files are spread evenly: kept shards differ by at most one suffix / blob count
    sizes = [len(s.suffixes) if mode == "suffix" else s.files for s in kept]
    assert max(sizes) - min(sizes) <= 1


def test_the_node_back_takes_its_own_shard_back():
    blobs = cosmo_blobs(1)
    kept = plan_shards_without(HOSTS4, ["n0"], "suffix", blobs)
    back = plan_shards_without(HOSTS4, [], "suffix", blobs)
    assert back == plan_shards(HOSTS4, "suffix", blobs)
    moved = moved_files(kept, back)
    assert list(moved) == ["n0"] and sorted(n for ns in moved["n0"].values() for n in ns) == sorted(
        b.name for b in plan_shards(HOSTS4, "suffix", blobs)[0].blobs)


def test_suffix_mode_without_a_listing_deals_the_suffixes():
    kept = plan_shards_without(HOSTS4, ["n1"], "suffix")
    # n1's suffixes 16-31 go round, one at a time, to the node with the fewest
    assert kept[0].suffixes == list(range(16)) + [16, 19, 22, 25, 28, 31]
    assert kept[1].suffixes == [17, 20, 23, 26, 29] + list(range(32, 48))
    assert kept[2].suffixes == [18, 21, 24, 27, 30] + list(range(48, 64))


def test_excluding_every_node_is_refused():
    with pytest.raises(ShardError, match="no node left"):
        plan_shards_without(["a", "b"], ["a", "b"], "suffix")
