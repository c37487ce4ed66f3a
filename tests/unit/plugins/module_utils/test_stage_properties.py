"""Issue 40, items 1 and 2, as properties over generated inputs (Hypothesis).

* Containment: for any blob names, listings, handoffs and prefixes, a stage changes nothing
  outside its folder: a sentinel tree around it (files next to it, above it, in a sibling, a
  link from inside it to a folder outside) comes out byte for byte the same, whether the stage
  refuses or runs.
* Exact deletions: nothing inside the folder is removed unless ``prune`` asked (a file the
  plan's listing does not hold), the exact plan gave it to another node (node-local storage),
  or it is a planned file found wrong (fetched again); and the handoff the controller computes
  is exactly the oracle's: a set difference, never a maybe.

Shrunk failures found while writing these are kept as ``@example``s.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from amlhpc.staging.azcopy import ExpectedFile, ShardPlan, StageError, StageSource, StageWatch, stage_shard
from amlhpc.staging.azcopy_handoff import plan_handoff, read_command
from amlhpc.staging.azcopy_paths import inside, listing_problems, name_problem
from amlhpc.sdk.blob_listing import blob_from
from amlhpc.staging.shards import Blob, ShardError, plan_shards, plan_summary

# Segments a hostile or careless container holds: the dangerous ones, and plain CosmoFlow ones.
SEGMENTS = st.one_of(
    st.sampled_from(["", ".", "..", "train", "validation", "etc", "tmp", ".amlhpc-staged", ".amlhpc-staging",
                     "outside_000.tfrecord", "victim_000.tfrecord", "u_a1_000.tfrecord", "u_a1_001.tfrecord.gz",
                     "a\x00b", "line\nbreak_002.tfrecord", "x" * 256, "y" * 220 + "_003.tfrecord"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12),
)
NAMES = st.lists(SEGMENTS, min_size=1, max_size=4).map("/".join).map(lambda n: n if n else "/")
ABSOLUTE = st.lists(SEGMENTS, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
ANY_NAME = st.one_of(NAMES, ABSOLUTE)


def under(root: str, path: str) -> bool:
    root = os.path.realpath(root)
    return os.path.realpath(path).startswith(root.rstrip(os.sep) + os.sep)


@given(ANY_NAME)
@example("/etc/passwd_000.tfrecord.gz")
@example("../outside_000.tfrecord")
@example("train/../../outside_000.tfrecord")
def test_a_name_that_passes_stays_strictly_inside_any_folder(name):
    if name_problem(name) is not None:
        return
    for root in ("/mnt/scratch/cosmoflow", "/x"):
        joined = posixpath.normpath(posixpath.join(root, name))
        assert joined.startswith(root + "/") and joined != root, (name, joined)
        assert ".." not in name.split("/")


@given(prefix=st.sampled_from(["", "v07", "v07/", "a/b"]), names=st.lists(ANY_NAME, max_size=8, unique=True))
@example(prefix="v07", names=["/etc/passwd_000.tfrecord.gz"])
@example(prefix="v", names=["d.gz", "d.gz/e.gz"])  # issue 49: a file and a folder under one raw name
@example(prefix="v", names=["d", "d/e.gz"])
def test_the_plan_takes_only_names_that_stay_inside(prefix, names):
    """Whatever the container lists below any prefix: the planner refuses the listing, or
    every name it plans is one a stage may write (and no two land on one file, and no name is
    both a file and a folder, as listed or as staged)."""
    listed = [f"{prefix.rstrip('/')}/{n}" if prefix else n for n in names]
    blobs = [blob_from(n, 100, "gzip" if n.endswith(".gz") else "", {}, prefix) for n in listed]
    try:
        shards = plan_shards(["n0", "n1", "n2"], "balanced", blobs)
    except ShardError:
        return
    planned = [b.name for s in shards for b in s.blobs]
    assert all(name_problem(n) is None for n in planned), planned
    assert not listing_problems([n[:-3] if n.endswith(".gz") else n for n in planned])
    for shown in (planned, [n[:-3] if n.endswith(".gz") else n for n in planned]):
        assert not [(a, b) for a in shown for b in shown if b.startswith(a + "/")], shown


# --- the sentinel tree ---------------------------------------------------------------------------


def sentinel_tree(base: Path) -> dict[str, bytes]:
    """Files around ``base/stage`` that no stage may touch, and a link inside it to outside."""
    files = {
        "outside_000.tfrecord": b"next to the stage folder",
        "etc/victim_000.tfrecord": b"root's",
        "etc/passwd_000.tfrecord": b"root's too",
        "stage-sibling/u_a1_000.tfrecord": b"a sibling folder's",
        "outside/u_a1_001.tfrecord": b"behind the link",
    }
    for rel, data in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(data)
    (base / "stage").mkdir()
    (base / "stage" / "linked").symlink_to(base / "outside")
    return files


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every file and link under ``root`` (not following links), with its content."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, names in os.walk(root):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            out[rel] = f"-> {os.readlink(path)}" if os.path.islink(path) else Path(path).read_bytes()
    return out


INSIDE = st.sampled_from(["train/u_a1_000.tfrecord", "train/u_a1_001.tfrecord", "validation/u_a2_007.tfrecord",
                          "u_a1_003.tfrecord", "notes.txt", "linked/u_a1_001.tfrecord"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planned=st.lists(st.one_of(INSIDE, ANY_NAME), max_size=4, unique=True),
       existing=st.lists(INSIDE, max_size=5, unique=True),
       handed=st.lists(st.one_of(INSIDE, ANY_NAME), max_size=3, unique=True),
       gone=st.lists(st.one_of(INSIDE, ANY_NAME), max_size=3, unique=True),
       prune=st.booleans(), shared=st.booleans(), sizes_right=st.booleans())
@example(planned=["/ETC/victim_000.tfrecord"], existing=[], handed=[], gone=[], prune=False, shared=True,
         sizes_right=False)
@example(planned=["../outside_000.tfrecord"], existing=[], handed=["../etc/passwd_000.tfrecord"],
         gone=["linked/u_a1_001.tfrecord"], prune=True, shared=False, sizes_right=False)
@example(planned=[], existing=["train/u_a1_000.tfrecord"], handed=["train/u_a1_000.tfrecord"],
         gone=["train/u_a1_000.tfrecord"], prune=False, shared=False, sizes_right=False)  # found by Hypothesis
def test_a_stage_changes_nothing_outside_and_removes_only_what_it_was_told(
        planned, existing, handed, gone, prune, shared, sizes_right):
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        sentinel_tree(base)
        stage_dir = base / "stage"
        planned = [p.replace("/ETC/", f"{base}/etc/") for p in planned]  # an absolute name aimed at the sentinel
        for rel in existing:
            if not rel.startswith("linked/"):
                (stage_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                (stage_dir / rel).write_bytes(b"staged " + rel.encode())
        outside_before = {k: v for k, v in snapshot(base).items() if not k.startswith("stage" + os.sep)}
        inside_before = snapshot(stage_dir)
        size = None if sizes_right else 3
        expected = [ExpectedFile(n, size) for n in planned]
        try:
            stage_shard(StageSource(azcopy="/nonexistent/azcopy", source_url="http://127.0.0.1:9/a/c"),
                        ShardPlan(stage_dir=str(stage_dir), rank=0, blobs=planned, expected=expected, prune=prune,
                                  shared=shared, handoff={"handed": handed, "gone": gone}),
                        StageWatch(lock_wait=0))
        except StageError:
            pass
        outside_after = {k: v for k, v in snapshot(base).items() if not k.startswith("stage" + os.sep)}
        assert outside_after == outside_before
        inside_after = snapshot(stage_dir)
        removed = {k for k in inside_before if k not in inside_after}
        for rel in removed:
            told = ((rel in handed and not shared) or (rel in gone and prune) or (rel in planned and not sizes_right))
            assert told, (rel, planned, handed, gone, prune, shared)


# --- exact handoff ------------------------------------------------------------------------------

FILE_NAMES = st.builds(lambda u, s, gz: f"train/u_a{u}_{s:03d}.tfrecord" + (".gz" if gz else ""),
                       st.integers(0, 6), st.integers(0, 63), st.booleans())


@settings(max_examples=150, deadline=None)
@given(listing=st.lists(FILE_NAMES, min_size=1, max_size=40, unique_by=lambda n: n.removesuffix(".gz")),
       strays=st.lists(FILE_NAMES.map(lambda n: n.removesuffix(".gz")), max_size=30, unique=True),
       hosts=st.integers(1, 5), shared=st.booleans(), mode=st.sampled_from(["balanced", "suffix"]))
def test_the_handoff_is_exactly_the_set_difference(listing, strays, hosts, shared, mode):
    """Each node holds its shard, plus ``strays`` (files an earlier plan or another node left):
    ``handed`` is exactly the strays another shard plans (none on shared storage), ``gone``
    exactly those no shard plans, and nothing of a node's own shard is in either."""
    blobs = [Blob(n, 100, 100 if not n.endswith(".gz") else 300, "gzip" if n.endswith(".gz") else "") for n in listing]
    names = [f"h{i}" for i in range(hosts)]
    plan = plan_summary(plan_shards(names, mode, blobs, allow_idle=True), mode)
    listed = set(listing)
    staged = {n.removesuffix(".gz") for n in listing}
    reads, oracle = {}, {}
    import base64
    import json as _json
    for h in names:
        entry = plan["shards"][h]
        own = {r["name"].removesuffix(".gz") if r["gzip"] else r["name"] for r in entry["expected"]}
        files = sorted(own | set(strays))
        manifest = base64.b64encode(_json.dumps({"files": {n: 1 for n in files}}).encode()).decode()
        raw = base64.b64encode(b"".join(n.encode() + b"\0" for n in files)).decode()
        reads[h] = f"@@amlhpc-stage-folder files {raw}\n@@amlhpc-stage-folder manifest {entry['rank']}.json {manifest}\n"
        outside = set(files) - own
        oracle[h] = {"handed": [] if shared else sorted(outside & staged), "gone": sorted(outside - staged)}
        assert listed  # the listing the oracle uses is the plan's
    got = plan_handoff(plan, reads, shared=shared)
    assert got == oracle


def test_the_read_command_quotes_any_folder():
    cmd = read_command("/mnt/sc'ratch $(rm -rf ~)/x", 3, False)
    assert "'/mnt/sc'\"'\"'ratch $(rm -rf ~)/x'" in cmd


def test_inside_refuses_a_link_out_of_the_folder(tmp_path):
    (tmp_path / "stage").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "stage" / "train").symlink_to(tmp_path / "out")
    assert inside(str(tmp_path / "stage"), "u_a1_000.tfrecord") == str(tmp_path / "stage" / "u_a1_000.tfrecord")
    try:
        inside(str(tmp_path / "stage"), "train/u_a1_000.tfrecord")
    except ValueError as exc:
        assert "a link out of the stage folder" in str(exc)
    else:
        raise AssertionError("a name through a link out of the folder was taken")
