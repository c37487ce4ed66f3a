"""Issue 49 item 5: the stage's promises over generated inputs that reach the edges.

What the world has and the earlier generators lacked:

* siblings whose names share the stage folder's prefix (``/x/cosmoflow`` beside
  ``/x/cosmoflow2``, ``/x/cosmoflow-old``, ``/x/cosmoflow.bak``), each holding sentinel files,
  and links inside the stage folder to them, to a sentinel file, to the parent and to itself;
* shared storage with handoffs: two nodes' ranks staging into one shared folder, with what an
  earlier plan left there under each rank's manifest;
* names that normalise to one another: ``a/./b`` and ``a/b``, ``a//b``, a trailing ``/``, the
  NFC and NFD forms of one name, case variants, a name through a link that comes back inside.

Every oracle here is the test's own: "inside" is ``os.path.realpath`` and
``os.path.commonpath``, the handoff a set difference over the raw lists, "removed" the
difference of two walks of the disk; none of them calls the checker it judges
(``azcopy_paths``). Shrunk failures are kept as ``@example``s.
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import tempfile
import unicodedata
from pathlib import Path

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from amlhpc.sdk.blob_listing import blob_from
from amlhpc.staging.azcopy import ExpectedFile, ShardPlan, StageError, StageSource, StageWatch, stage_shard
from amlhpc.staging.azcopy_handoff import plan_handoff, read_command
from amlhpc.staging.shards import Blob, ShardError, plan_shards, plan_summary

URL = "http://127.0.0.1:9/a/c"  # nothing answers: a stage that would fetch fails, as a refusal does
SOURCE = StageSource(azcopy="/nonexistent/azcopy", source_url=URL)
NO_WAIT = StageWatch(lock_wait=0)
CAFE = "train/caf\u00e9_004.tfrecord"  # NFC
CAFE_NFD = unicodedata.normalize("NFD", CAFE)
STAGED = ["train/u_a1_000.tfrecord", "train/u_a1_001.tfrecord", "u_a1_003.tfrecord",
          "validation/u_a2_007.tfrecord", CAFE, CAFE_NFD, "Train/U_A1_000.tfrecord"]

# Ways to write a name that mean, or may mean, another one. "{S}" is the stage folder's absolute path.
ALIASES = [
    "{n}", "./{n}", "{n}/", "{d}/./{f}", "{d}//{f}", "{upper}", "{nfd}", "{nfc}",
    "self/{n}", "up/cosmoflow/{n}", "up/cosmoflow2/{n}", "twin/{n}", "old/{n}", "bak/{n}",
    "../cosmoflow2/{n}", "../cosmoflow-old/{n}",
    "{S}/{n}", "{S}2/{n}", "{S}-old/{n}", "{S}.bak/{n}", "{S}/../cosmoflow2/{n}",
]


def alias(template: str, name: str) -> str:
    d, _sep, f = name.rpartition("/")
    return template.format(n=name, d=d or ".", f=f, upper=name.upper(), S="{S}",
                           nfd=unicodedata.normalize("NFD", name), nfc=unicodedata.normalize("NFC", name))


# Mostly names a stage may take (so that it runs and removes), the rest links and aliases.
PLAIN = st.sampled_from(STAGED + ["passwd_000.tfrecord", "old", "up", "self"])
ALIASED = st.builds(alias, st.sampled_from(ALIASES), st.sampled_from(STAGED))
# The aliases that no spelling rule refuses: through a link that comes back inside, through one
# that leads out, another Unicode form or case.
LOOP = st.builds(alias, st.sampled_from(["self/{n}", "up/cosmoflow/{n}"]), st.sampled_from(STAGED))
THROUGH = st.builds(alias, st.sampled_from(["up/cosmoflow2/{n}", "twin/{n}", "old/{n}", "bak/{n}",
                                            "{upper}", "{nfd}", "{nfc}"]), st.sampled_from(STAGED))
NAMES = st.builds(lambda k, names: names[k], st.integers(0, 5),
                  st.tuples(PLAIN, PLAIN, PLAIN, LOOP, THROUGH, ALIASED))


def edge_tree(base: Path) -> Path:
    """``base/x/cosmoflow`` (returned) among siblings that share its prefix, each holding
    sentinels (one under the very relative name a stage writes), with links inside it to each
    sibling, to a sentinel file, to its parent and to itself."""
    x = base / "x"
    files = {
        "x/cosmoflow2/train/u_a1_000.tfrecord": b"the sibling cosmoflow2's, under a staged name",
        "x/cosmoflow2/u_a1_003.tfrecord": b"cosmoflow2's",
        "x/cosmoflow-old/train/u_a1_001.tfrecord": b"cosmoflow-old's",
        f"x/cosmoflow-old/{CAFE}": b"cosmoflow-old's NFC",
        "x/cosmoflow.bak/passwd_000.tfrecord": b"cosmoflow.bak's, behind a link to a file",
        "x/cosmoflow.bak/validation/u_a2_007.tfrecord": b"cosmoflow.bak's",
        "x/outside_000.tfrecord": b"next to the stage folder",
        "etc/victim_000.tfrecord": b"root's",
    }
    for rel, data in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(data)
    stage = x / "cosmoflow"
    stage.mkdir()
    (stage / "twin").symlink_to("../cosmoflow2")
    (stage / "old").symlink_to(x / "cosmoflow-old")
    (stage / "bak").symlink_to("../cosmoflow.bak")
    (stage / "passwd_000.tfrecord").symlink_to("../cosmoflow.bak/passwd_000.tfrecord")
    (stage / "up").symlink_to("..")
    (stage / "self").symlink_to(".")
    return stage


def walk(root: Path) -> dict[str, bytes | str]:
    """Every file and link under ``root``, links not followed, with its content or target."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, names in os.walk(root):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            out[rel] = f"-> {os.readlink(path)}" if os.path.islink(path) else Path(path).read_bytes()
    return out


def strictly_inside(root: str, path: str) -> bool:
    """The test's own "inside": ``path``, links resolved, lies below ``root`` (not ``root`` itself)."""
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    return real != real_root and os.path.commonpath([real_root, real]) == real_root


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(planned=st.lists(NAMES, max_size=3, unique=True),
       existing=st.lists(st.sampled_from(STAGED), max_size=5, unique=True),
       handed=st.lists(NAMES, max_size=3, unique=True), gone=st.lists(NAMES, max_size=3, unique=True),
       prune=st.booleans(), shared=st.booleans(), sizes_right=st.booleans())
@example(planned=[], existing=[], handed=["{S}2/u_a1_003.tfrecord"], gone=["{S}-old/train/u_a1_001.tfrecord"],
         prune=True, shared=False, sizes_right=True)
@example(planned=[], existing=[], handed=["passwd_000.tfrecord"], gone=[], prune=False, shared=False,
         sizes_right=True)
@example(planned=[], existing=[CAFE], handed=[CAFE_NFD], gone=[CAFE_NFD], prune=True, shared=False,
         sizes_right=True)
@example(planned=["train/u_a1_000.tfrecord"], existing=["train/u_a1_000.tfrecord"],
         handed=["self/train/u_a1_000.tfrecord"], gone=[], prune=False, shared=False, sizes_right=True)
@example(planned=[], existing=["train/u_a1_000.tfrecord"], handed=[],
         gone=["up/cosmoflow/train/u_a1_000.tfrecord"], prune=True, shared=True, sizes_right=True)
# Shrunk by Hypothesis with the fix to azcopy_paths.inside broken (a link back inside let an
# alias through): a raw FileNotFoundError, twice, and a file removed under another name.
@example(planned=[], existing=["train/u_a1_000.tfrecord"], handed=["train/u_a1_000.tfrecord"],
         gone=["self/train/u_a1_000.tfrecord"], prune=False, shared=False, sizes_right=False)
@example(planned=[], existing=["train/u_a1_000.tfrecord"], handed=[],
         gone=["train/u_a1_000.tfrecord", "self/train/u_a1_000.tfrecord"], prune=True, shared=False,
         sizes_right=False)
@example(planned=[], existing=["train/u_a1_000.tfrecord"], handed=[], gone=["self/train/u_a1_000.tfrecord"],
         prune=True, shared=False, sizes_right=False)
def test_prefix_siblings_links_and_aliases_change_nothing_outside_and_nothing_unnamed(
        planned, existing, handed, gone, prune, shared, sizes_right):
    """Whatever the plan and the handoff name, through links, prefix-sharing siblings or a
    spelling that normalises to another name: the tree outside ``cosmoflow`` comes out byte for
    byte the same, and a file inside is removed only under a name the plan or handoff gave
    exactly (its own, not an alias of it)."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        stage = edge_tree(base)

        def real(names):
            return [n.replace("{S}", str(stage)) for n in names]

        planned, handed, gone = real(planned), real(handed), real(gone)
        # the planned files are there (to be checked, not fetched), and some others
        for rel in dict.fromkeys(existing + [n for n in planned if n in STAGED]):
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            (stage / rel).write_bytes(b"staged " + rel.encode())
        before = walk(base)
        expected = [ExpectedFile(n, None if sizes_right else 3) for n in planned]
        try:
            stage_shard(SOURCE, ShardPlan(stage_dir=str(stage), rank=0, blobs=planned, expected=expected, prune=prune,
                                          prune_most=True, shared=shared, handoff={"handed": handed, "gone": gone}),
                        NO_WAIT)
            event("the stage ran")
        except StageError:
            event("the stage was refused")
        after = walk(base)
        stage_rel = os.path.relpath(stage, base)

        def outside(tree):
            return {k: v for k, v in tree.items() if not k.startswith(stage_rel + os.sep)}

        assert outside(after) == outside(before)
        for rel, data in after.items():  # nothing new or changed anywhere but the stage's own folders
            if rel not in before or before[rel] != data:
                parts = Path(rel).relative_to(stage_rel).parts
                assert parts[0] in (".amlhpc-staged", ".amlhpc-staging"), rel
        told = (set(gone if prune else ()) | set(() if shared else handed)
                | set(() if sizes_right else planned))
        removed = {os.path.relpath(base / k, stage) for k in before if k not in after}
        event("it removed a file" if removed else "it removed nothing")
        assert removed <= told, (removed, planned, handed, gone, prune, shared)


# --- the plan: names that normalise to one another -----------------------------------------

SEGMENT = st.sampled_from(["", ".", "..", "train", "Train", "TRAIN", "caf\u00e9",
                           unicodedata.normalize("NFD", "caf\u00e9"), "u_a1_000.tfrecord",
                           "U_A1_000.tfrecord", "u_a1_000.tfrecord.gz", "cosmoflow", "cosmoflow2"])
PLAN_NAMES = st.lists(SEGMENT, min_size=1, max_size=3).map("/".join).flatmap(
    lambda n: st.sampled_from([n, n + "/", "./" + n, "/" + n, n.replace("/", "//"), n.replace("/", "/./")]))


@settings(max_examples=150)
@given(names=st.lists(PLAN_NAMES, max_size=8, unique=True), prefix=st.sampled_from(["", "v07", "v07/"]))
@example(names=["train/u_a1_000.tfrecord", "train/./u_a1_000.tfrecord"], prefix="v07")
@example(names=["train/u_a1_000.tfrecord", "train//u_a1_000.tfrecord"], prefix="")
@example(names=["train/caf\u00e9", unicodedata.normalize("NFD", "train/caf\u00e9")], prefix="v07")
@example(names=["train/u_a1_000.tfrecord.gz", "train/u_a1_000.tfrecord"], prefix="v07/")
def test_the_plan_never_takes_two_spellings_of_one_path_or_one_outside(names, prefix):
    """Whatever the container lists: each planned name, joined to any stage folder, lands
    strictly inside it (``commonpath``), is already in normal form (``posixpath.normpath``: no
    ``.``, ``//`` or trailing ``/`` left to mean another name), and no two planned files, as
    staged, are one path."""
    listed = [f"{prefix.rstrip('/')}/{n}" if prefix else n for n in names]
    blobs = [blob_from(n, 100, "gzip" if n.endswith(".gz") else "", {}, prefix) for n in listed]
    try:
        shards = plan_shards(["n0", "n1"], "balanced", blobs)
    except ShardError:
        return
    planned = [b.name for s in shards for b in s.blobs]
    staged = [n[:-3] if n.endswith(".gz") else n for n in planned]
    for root in ("/x/cosmoflow", "/x/cosmoflow2"):
        for name in planned + staged:
            path = posixpath.normpath(posixpath.join(root, name))
            assert path != root and posixpath.commonpath([root, path]) == root, (name, path)
            assert posixpath.relpath(path, root) == name, name
    assert len({posixpath.normpath(n) for n in staged}) == len(staged), staged


# --- shared storage with handoffs --------------------------------------------------------------

FILES = st.builds(lambda u, s: f"train/u_a{u}_{s:03d}.tfrecord", st.integers(0, 3), st.integers(0, 15))
# Universes 8 and 9 are never listed: what an earlier data set left.
STALE = st.builds(lambda u, s: f"train/u_a{u}_{s:03d}.tfrecord", st.integers(8, 9), st.integers(0, 15))


def read(folder: Path, rank: int, shard: dict) -> str:
    """The node's read, by the real shell command (as the role runs it)."""
    suffixes = [int(x) for x in shard.get("suffixes") or []] if shard.get("mode") == "suffix" else None
    cmd = read_command(str(folder), rank, True, suffixes)
    return subprocess.run(["sh", "-c", cmd], check=True, capture_output=True, text=True).stdout


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(listing=st.lists(FILES, min_size=1, max_size=12, unique=True),
       earlier=st.lists(st.tuples(st.one_of(FILES, STALE), st.integers(0, 1)), max_size=10,
                        unique_by=lambda t: t[0]),
       mode=st.sampled_from(["balanced", "suffix"]), prune=st.booleans())
@example(listing=["train/u_a0_000.tfrecord", "train/u_a0_001.tfrecord"],
         earlier=[("train/u_a0_000.tfrecord", 1), ("train/u_a0_009.tfrecord", 0),
                  ("train/u_a0_001.tfrecord", 0)],
         mode="balanced", prune=True)
def test_two_nodes_on_one_shared_folder_remove_only_the_set_difference(listing, earlier, mode, prune):
    """Two nodes' ranks stage into one shared folder that an earlier plan filled (``earlier``:
    file, the rank whose manifest lists it). Oracle from the raw lists: no node is handed
    anything; a node's ``gone`` is exactly its own earlier files (its manifest, and in suffix
    mode the files with its suffixes) less the listing; after both stages every planned file is
    there byte for byte, only ``gone`` files were removed (none without prune), and the
    sibling ``shared2`` is untouched."""
    blobs = [Blob(n, 7, 7, "") for n in listing]
    hosts = ["h0", "h1"]
    plan = plan_summary(plan_shards(hosts, mode, blobs, allow_idle=True), mode)
    with tempfile.TemporaryDirectory() as tmp:
        folder, sibling = Path(tmp) / "shared", Path(tmp) / "shared2"
        (sibling / "train").mkdir(parents=True)
        (sibling / "train" / "u_a0_000.tfrecord").write_bytes(b"the sibling's")
        contents = {}
        for name, owner in earlier:
            contents[name] = f"earlier rank {owner}".encode()
        for name in listing:
            contents[name] = b"7 bytes"
        for name, data in contents.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        (folder / ".amlhpc-staged").mkdir(parents=True, exist_ok=True)
        for rank in (0, 1):
            mine = {n: len(contents[n]) for n, owner in earlier if owner == rank}
            manifest = json.dumps({"key": "listed", "files": mine})
            (folder / ".amlhpc-staged" / f"{rank}.json").write_text(manifest)
        sibling_before = walk(sibling)
        reads = {h: read(folder, plan["shards"][h]["rank"], plan["shards"][h]) for h in hosts}
        got = plan_handoff(plan, reads, shared=True)
        listed = set(listing)
        oracle_gone = set()
        for h in hosts:
            entry = plan["shards"][h]
            rank = entry["rank"]
            own = {r["name"] for r in entry["expected"]}
            mine = {n for n, owner in earlier if owner == rank}
            if mode == "suffix":
                sfx = {f"_{int(s):03d}.tfrecord" for s in entry.get("suffixes") or []}
                mine |= {n for n in contents if any(n.endswith(s) for s in sfx)}
            assert got[h]["handed"] == [], got[h]
            assert set(got[h]["gone"]) == mine - own - listed, (h, got[h], mine, own)
            oracle_gone |= mine - listed
        before = walk(folder)
        for h in hosts:
            entry = plan["shards"][h]
            expected = [ExpectedFile(r["name"], r["raw_size"]) for r in entry["expected"]]
            try:
                stage_shard(SOURCE, ShardPlan(stage_dir=str(folder), rank=entry["rank"],
                                              blobs=[e.blob for e in expected], expected=expected, prune=prune,
                                              prune_most=True, shared=True, handoff=got[h]), NO_WAIT)
            except StageError as exc:
                raise AssertionError(f"{h}: every planned file is there, nothing to fetch: {exc}") from None
        after = walk(folder)
        data_before = {k: v for k, v in before.items() if not k.startswith(".amlhpc-")}
        data_after = {k: v for k, v in after.items() if not k.startswith(".amlhpc-")}
        removed = set(data_before) - set(data_after)
        event("files went" if removed else "no file went")
        assert removed == (oracle_gone if prune else set()), (removed, oracle_gone)
        assert all(data_after.get(n) == b"7 bytes" for n in listing), data_after
        assert all(data_after[k] == v for k, v in data_before.items() if k not in removed)
        assert walk(sibling) == sibling_before


def test_the_oracles_own_inside_is_not_fooled_by_a_shared_prefix(tmp_path):
    """The test's ``strictly_inside`` itself: a prefix-sharing sibling is outside, a link back
    into the folder inside, the folder itself not strictly inside."""
    stage = edge_tree(tmp_path)
    assert not strictly_inside(str(stage), str(stage.parent / "cosmoflow2" / "u_a1_003.tfrecord"))
    assert not strictly_inside(str(stage), str(stage / "twin" / "u_a1_003.tfrecord"))
    assert strictly_inside(str(stage), str(stage / "self" / "u_a1_003.tfrecord"))
    assert not strictly_inside(str(stage), str(stage / "up" / "cosmoflow"))


def test_a_name_through_a_link_back_into_the_folder_is_refused_and_removes_nothing(tmp_path):
    """Found by the generator above (red before the fix): ``self -> .`` inside the folder made
    a handed ``self/train/u_a1_000.tfrecord`` remove this node's own planned
    ``train/u_a1_000.tfrecord``, a file no list named. A name whose folder on the way is a link,
    even one that comes back inside, stands for another name: the stage is refused, naming it."""
    stage = edge_tree(tmp_path)
    (stage / "train").mkdir()
    (stage / "train" / "u_a1_000.tfrecord").write_bytes(b"mine")
    planned = [ExpectedFile("train/u_a1_000.tfrecord", 4)]
    for through in ("self/train/u_a1_000.tfrecord", "up/cosmoflow/train/u_a1_000.tfrecord"):
        try:
            stage_shard(SOURCE, ShardPlan(stage_dir=str(stage), rank=0, blobs=[e.blob for e in planned],
                                          expected=planned, prune=True, shared=False,
                                          handoff={"handed": [through], "gone": []}), NO_WAIT)
        except StageError as exc:
            assert repr(through) in str(exc) and "link" in str(exc), str(exc)
        else:
            raise AssertionError(f"{through} was taken")
        assert (stage / "train" / "u_a1_000.tfrecord").read_bytes() == b"mine"
