"""Issue 47 item 2: ``stage_shard`` takes three small objects that say what they are, not 25
keyword arguments: where the data comes from (:class:`StageSource`), what this node's shard is
(:class:`ShardPlan`) and how the run is bounded and watched (:class:`StageWatch`).

The objects refuse what ``stage_shard`` refused, in the same sentences, and an object that holds
a SAS or a client secret never shows it: its ``repr`` and ``str`` (what a traceback, a log line or
a debugger prints) carry no run of the secret, over generated SAS shapes (Hypothesis).
"""

from __future__ import annotations

import base64
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from amlhpc.staging.azcopy import ExpectedFile, Limits, ShardPlan, StageError, StageSource, StageWatch, stage_shard

WINDOW = 8
URL = "http://127.0.0.1:9/a/c"  # nothing answers


def leaks(secret: str, out: str) -> list[str]:
    """Runs of WINDOW characters of ``secret`` left in ``out``, raw or URL-encoded."""
    found = []
    for i in range(max(len(secret) - WINDOW + 1, 1)):
        run = secret[i:i + WINDOW]
        found += [form for form in (run, quote(run, safe=""), quote_plus(run)) if form in out]
    return found


@st.composite
def sas_like(draw) -> tuple[str, str]:
    """(a SAS of a generated shape, its signature): 32 random bytes in base64, URL-encoded or not,
    among the usual fields in any order, with or without the leading ``?``."""
    sig = base64.b64encode(draw(st.binary(min_size=32, max_size=32))).decode()
    value = quote(sig, safe="") if draw(st.booleans(), label="quoted") else sig
    fields = draw(st.permutations(["sv=2026-10-06", "sr=c", "sp=rl", "se=2030-01-01T00%3A00%3A00Z", "spr=https"]))
    at = draw(st.integers(0, len(fields)))
    sas = "&".join([*fields[:at], f"sig={value}", *fields[at:]])
    return ("?" + sas if draw(st.booleans(), label="leading ?") else sas), sig


@given(sas_like(), st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789~.-_", min_size=16, max_size=40))
@example(("sv=2026-10-06&sp=rl&sig=" + "A" * 43 + "=", "A" * 43 + "="), "a-client-secret-of-forty-characters-long")
def test_a_source_never_shows_its_sas_or_client_secret(shape, client_secret):
    sas, sig = shape
    source = StageSource(azcopy="/opt/azcopy", source_url="https://acct.blob.core.windows.net/cosmoflow/v07",
                         sas=sas, auth="sas", auth_options={"client_secret": client_secret},
                         env={"AZCOPY_SPA_CLIENT_SECRET": client_secret, "SAS": sas})
    for shown in (repr(source), str(source), f"{source}", f"{source!r}"):
        assert "cosmoflow/v07" in shown  # it does show what it is
        assert not leaks(sig, shown), shown
        assert not leaks(sas.lstrip("?"), shown), shown
        assert not leaks(client_secret, shown), shown


def test_a_plan_names_its_node_after_its_rank_unless_told():
    assert ShardPlan(stage_dir="/mnt/stage", rank=3, blobs=[]).node == "node 3"
    assert ShardPlan(stage_dir="/mnt/stage", rank=3, blobs=[], node="").node == "node 3"
    assert ShardPlan(stage_dir="/mnt/stage", rank=3, blobs=[], node="hx-3").node == "hx-3"


@pytest.mark.parametrize("kw,error,said", [
    ({"rank": 0}, ValueError, "give include_pattern or blobs"),
    ({"rank": 0, "blobs": [], "include_pattern": "*_000.tfrecord*"}, ValueError, "give include_pattern or blobs"),
    ({"rank": 0, "blobs": [], "verify": "crc"}, ValueError, "verify must be one of size, checksum, got 'crc'"),
    ({"rank": -1, "blobs": []}, StageError,
     "node -1: the rank -1 is not a number 0 or above: pass the plan's shard (it carries it)."),
    ({"rank": True, "blobs": [], "node": "hx-0"}, StageError,
     "hx-0: the rank True is not a number 0 or above: pass the plan's shard (it carries it)."),
])
def test_a_plan_refuses_what_the_stage_refused_in_the_same_words(kw, error, said):
    with pytest.raises(error) as err:
        ShardPlan(stage_dir="/mnt/stage", **kw)
    assert str(err.value) == said


def test_a_stage_of_the_three_objects_refuses_a_relative_folder_naming_it(tmp_path):
    source = StageSource(azcopy="/nonexistent/azcopy", source_url=URL)
    plan = ShardPlan(stage_dir="stage", rank=0, expected=[ExpectedFile("a_000.tfrecord", 3)], blobs=["a_000.tfrecord"])
    with pytest.raises(StageError) as err:
        stage_shard(source, plan, StageWatch(limits=Limits(stall=5), lock_wait=0))
    assert str(err.value).startswith("node 0: the stage folder 'stage' cannot be used")


def test_a_stage_with_nothing_to_fetch_reports_it_with_the_default_watch(tmp_path):
    (tmp_path / "a_000.tfrecord").write_bytes(b"abc")
    out = stage_shard(StageSource(azcopy="/nonexistent/azcopy", source_url=URL),
                      ShardPlan(stage_dir=str(tmp_path), rank=0, blobs=["a_000.tfrecord"],
                                expected=[ExpectedFile("a_000.tfrecord", 3)], decompress=False))
    assert (out["files"], out["fetched"], out["skipped_existing"], out["changed"]) == (1, 0, 1, False)
