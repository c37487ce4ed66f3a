"""The azcopy_stage module's own checks (no azcopy run): SAS sentence, check mode, warnings."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import ansible.module_utils
import pytest
from ansible_compat import patch_module_args

ROOT = Path(__file__).resolve().parents[4]
# What AnsiballZ does for a module: the project's module_utils under ansible.module_utils.
if str(ROOT / "plugins" / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(ROOT / "plugins" / "module_utils"))
sys.path.insert(0, str(ROOT / "plugins" / "modules"))
azcopy_stage = importlib.import_module("azcopy_stage")

SAS_OK = "se=2099-01-01T00%3A00%3A00Z&sp=rl&sv=2026-10-06&sr=c&sig=FAKE-test-signature%3D%3D"
SAS_OLD = "se=2020-01-01T00%3A00%3A00Z&sp=rl&sv=2026-10-06&sr=c&sig=FAKE-test-signature%3D%3D"


def run(args: dict, capsys) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        azcopy_stage.main()
    return json.loads(capsys.readouterr().out)


def base(tmp_path, **kw) -> dict:
    args = {"account_url": "http://127.0.0.1:1/devstoreaccount1", "container": "c", "sas": SAS_OK,
            "dest": str(tmp_path), "rank": 0, "shard": {"mode": "suffix", "include_pattern": "*_000.tfrecord"},
            "azcopy": "/nonexistent/azcopy"}
    args.update(kw)
    return args


def test_expired_sas_fails_in_one_sentence_without_the_token(tmp_path, capsys):
    out = run(base(tmp_path, sas=SAS_OLD), capsys)
    assert out["failed"]
    assert out["msg"] == "The SAS token expired at 2020-01-01 00:00 UTC: generate a new one (read and list) and run again."
    assert "c2VjcmV0" not in json.dumps(out)


def test_check_mode_reports_a_pending_stage_and_runs_nothing(tmp_path, capsys):
    out = run(base(tmp_path, _ansible_check_mode=True), capsys)
    assert out["changed"] is True and not out.get("failed")
    assert list(tmp_path.iterdir()) == []


def test_missing_azcopy_is_named(tmp_path, capsys):
    out = run(base(tmp_path), capsys)
    assert out["failed"] and out["msg"] == "azcopy was not found at /nonexistent/azcopy: install it (role stage) or set its path"


def test_extra_permissions_are_warned(tmp_path, capsys):
    out = run(base(tmp_path, sas=SAS_OK.replace("sp=rl", "sp=rwdl"), _ansible_check_mode=True), capsys)
    assert any("grants more than read and list (sp=rwdl: also write, delete)" in w for w in out["sas_warnings"])


def test_identity_auth_needs_no_sas_and_a_service_principal_needs_its_secret(tmp_path, capsys):
    args = base(tmp_path, auth="managed_identity", _ansible_check_mode=True)
    del args["sas"]
    out = run(args, capsys)
    assert not out.get("failed") and out["sas_warnings"] == []
    args = base(tmp_path, auth="service_principal", tenant_id="t", client_id="c", _ansible_check_mode=True)
    del args["sas"]
    out = run(args, capsys)
    assert out["failed"] and "client_secret" in out["msg"]
    args = base(tmp_path)
    del args["sas"]
    out = run(args, capsys)
    assert out["failed"] and "sas" in out["msg"]


def test_prediction_sits_beside_the_measurement_in_the_summary():
    result = {"files": 96, "fetched": 96, "repaired": ["train/a_001.tfrecord (checksum)"], "repaired_count": 7,
              "gone": [], "gone_count": 0, "removed": 0, "seconds": 12.5, "bytes_over_wire": 10**9,
              "fetched_planned_bytes": 10**9, "fetched_planned_raw_bytes": 4 * 10**9}
    result["prediction"] = azcopy_stage.prediction_for(result, {"nodes": 4, "azcopy_mb_s": 100,
                                                                "decompress_mb_s": 200})
    pred = result["prediction"]
    assert pred["bottleneck"] == "decompression CPU" and pred["seconds"] == 20.0 and pred["nodes"] == 4
    assert azcopy_stage.summary_line(result) == (
        "96 files, 96 fetched (7 repaired), 0 gone (0 removed); 12.5 s measured, 20 s predicted "
        "(decompression CPU); repaired: train/a_001.tfrecord (checksum) and 6 more")
    assert azcopy_stage.prediction_for({**result, "fetched": 0}, {}) == {}


def test_the_stage_folder_is_made_0755_and_check_mode_makes_nothing(tmp_path, capsys):
    dest = tmp_path / "scratch" / "cosmoflow"
    out = run(base(tmp_path, dest=str(dest), _ansible_check_mode=True, _ansible_diff=True), capsys)
    assert out["changed"] is True and not out.get("failed"), out
    assert out["diff"] == {"before": {"path": str(dest), "state": "absent"},
                           "after": {"path": str(dest), "state": "directory"}}
    assert not (tmp_path / "scratch").exists()
    # a real run makes the folders (then fails on the missing azcopy, as before)
    old_umask = os.umask(0o077)  # the mode is set, whatever the umask
    try:
        out = run(base(tmp_path, dest=str(dest)), capsys)
    finally:
        os.umask(old_umask)
    assert out["failed"] and "azcopy was not found" in out["msg"]
    assert [oct(p.stat().st_mode & 0o777) for p in (tmp_path / "scratch", dest)] == ["0o755", "0o755"]
    dest.chmod(0o700)
    out = run(base(tmp_path, dest=str(dest), _ansible_check_mode=True, _ansible_diff=True), capsys)
    assert out["diff"] == {"before": {"path": str(dest), "mode": "0700"}, "after": {"path": str(dest), "mode": "0755"}}
    (tmp_path / "file").write_text("x")
    out = run(base(tmp_path, dest=str(tmp_path / "file")), capsys)
    assert out["failed"] and out["msg"] == f"The stage folder {tmp_path / 'file'}: {tmp_path / 'file'} exists and is not a folder"


def test_an_existing_0755_folder_with_its_shard_is_unchanged(tmp_path, capsys):
    dest = tmp_path / "d"
    dest.mkdir(mode=0o755)
    dest.chmod(0o755)
    shard = {"mode": "balanced", "expected": []}
    out = run(base(tmp_path, dest=str(dest), shard=shard, _ansible_check_mode=True, _ansible_diff=True), capsys)
    assert out["changed"] is False and "diff" not in out, out


# --- With ``version``: the stage role's probe in the same module run (one per node, not two) ---

def fake_azcopy(tmp_path, out: str, rc: int = 0) -> str:
    path = tmp_path / "azcopy"
    path.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo '{out}'; exit {rc}; fi\nexit 3\n")
    path.chmod(0o755)
    return str(path)


def test_a_missing_azcopy_stops_before_the_stage_and_asks_for_the_install(tmp_path, capsys):
    dest = tmp_path / "scratch"
    out = run(base(tmp_path, dest=str(dest), azcopy=str(tmp_path / "none"), version="10.32.2",
                   src="https://example.org/azcopy_linux_amd64_10.32.2.tar.gz"), capsys)
    assert not out.get("failed"), out
    assert (out["needed"], out["src_kind"], out["changed"]) == (True, "url-archive", False)
    assert out["probe"]["rc"] == 2 and "rc" not in out
    assert not dest.exists()  # nothing made before azcopy is there
    assert out["summary"] == "azcopy 10.32.2 is to be installed first"


def test_check_mode_with_azcopy_missing_still_reports_the_pending_stage(tmp_path, capsys):
    dest = tmp_path / "scratch"
    out = run(base(tmp_path, dest=str(dest), azcopy=str(tmp_path / "none"), version="10.32.2",
                   src=str(tmp_path / "azcopy_linux_amd64_10.32.2.tar.gz"), _ansible_check_mode=True), capsys)
    assert not out.get("failed"), out
    assert out["needed"] is True and out["src_kind"] == "file-archive"
    assert out["changed"] is True and not dest.exists()


def test_nothing_to_install_from_is_refused_by_the_stage_too(tmp_path, capsys):
    azcopy = fake_azcopy(tmp_path, "azcopy version 10.30.0")
    out = run(base(tmp_path, azcopy=azcopy, version="10.32.2"), capsys)
    assert out["failed"]
    assert out["msg"].startswith(f"azcopy 10.32.2 is not at {azcopy} (found: azcopy version 10.30.0) and stage_azcopy_src "
                                 "is empty")


def test_the_pinned_azcopy_goes_on_to_the_stage(tmp_path, capsys):
    dest = tmp_path / "d"
    dest.mkdir(mode=0o755)
    dest.chmod(0o755)
    out = run(base(tmp_path, dest=str(dest), shard={"mode": "balanced", "expected": [], "rank": 3},
                   azcopy=fake_azcopy(tmp_path, "azcopy version 10.32.2"), version="10.32.2", rank=None), capsys)
    assert not out.get("failed"), out
    assert (out["needed"], out["changed"], out["files"]) == (False, False, 0)
    assert out["probe"]["stdout"] == "azcopy version 10.32.2"


def test_a_shard_without_a_rank_and_no_rank_option_names_both_fixes(tmp_path, capsys):
    args = base(tmp_path)
    del args["rank"]
    out = run(args, capsys)
    assert out["failed"]
    assert out["msg"] == ("No rank for this node: the shard has none and the rank option is not set. Pass this node's "
                          "entry of the azcopy_shards plan as shard (shards[inventory_hostname]: it carries the "
                          "rank), or set rank.")
    assert list(tmp_path.iterdir()) == []


# --- The rerun's shell read (module_utils/amlhpc/staging/stage_read.py): the module's result, no module run ---

def staged_folder(tmp_path) -> tuple[Path, dict]:
    """A node-local stage folder holding exactly its shard (files in a subfolder, gzip blobs
    under their decompressed names), as a finished stage leaves it; and the shard."""
    dest = tmp_path / "stage"
    (dest / "train").mkdir(parents=True)
    dest.chmod(0o755)
    rows = []
    for i, size in enumerate((5, 17, 1024)):
        name = f"train/univ_{i:04d}_{i % 2:03d}.tfrecord"
        (dest / name).write_bytes(b"x" * size)
        rows.append({"name": f"{name}.gz", "raw_size": size, "gzip": True, "size": size // 2 + 1})
    return dest, {"mode": "balanced", "rank": 2, "expected": rows, "list_of_files": [r["name"] for r in rows]}


def read_args(tmp_path, dest: Path, shard: dict, **kw) -> dict:
    return base(tmp_path, dest=str(dest), shard=shard, rank=None, shared=False, version="10.32.2",
                azcopy=fake_azcopy(tmp_path, "azcopy version 10.32.2"), **kw)


def shell_read(args: dict, check_mode: bool = False, terminal: bool = False) -> dict | None:
    import subprocess
    import time

    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    from amlhpc.staging import stage_read

    p = ArgumentSpecValidator(stage_read.ARGUMENT_SPEC).validate(args).validated_parameters
    command = stage_read.read_command(p)
    if command is None:
        return None
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True).stdout
    if terminal:  # over ssh Ansible runs the command on a terminal: \r\n line ends
        out = out.replace("\n", "\r\n")
    return stage_read.unchanged_outcome(p, out, check_mode=check_mode, started=time.monotonic())


def without_timing(result: dict) -> dict:
    """A result without what differs by nature: the measured seconds, the invocation (the
    action adds it to the read's) and the warnings (the read's are checked against the
    module's sas_warnings: a module run in this process returns whatever warnings the
    process holds, in 2.21's structured form)."""
    out = {k: v for k, v in result.items() if k not in ("seconds", "invocation", "warnings")}
    if "summary" in result:
        out["summary"] = result["summary"].replace(f"{result['seconds']:g} s measured", "S s measured")
    return out


@pytest.mark.parametrize("sas", [SAS_OK, SAS_OK.replace("sp=rl", "sp=racwdl")])
def test_a_rerun_read_gives_the_module_result(tmp_path, capsys, sas):
    dest, shard = staged_folder(tmp_path)
    args = read_args(tmp_path, dest, shard, sas=sas)
    first = run(args, capsys)  # nothing to fetch; it writes the manifest
    assert (first["changed"], first["fetched"], first["files"]) == (False, 0, 3), first
    (dest / ".amlhpc-staged" / "2.progress.json").write_text("{}")  # what a fetch leaves
    module = run(args, capsys)
    read = shell_read(args)
    assert read is not None
    assert without_timing(read) == without_timing(module)
    assert read["summary"].startswith("3 files, 0 fetched (0 repaired), 0 gone (0 removed); ")
    wide = ["The SAS token grants more than read and list (sp=racwdl: also add, create, write, delete): a staging "
            "token should be sp=rl only."]
    assert read.get("warnings", []) == module["sas_warnings"] == (wide if "racwdl" in sas else [])
    assert shell_read(args, terminal=True) is not None
    check_module = run({**args, "_ansible_check_mode": True}, capsys)
    check_read = shell_read(args, check_mode=True)
    assert check_read is not None and without_timing(check_read) == without_timing(check_module)


@pytest.mark.parametrize("drift", [
    "a file missing", "a file of another size", "another data file", "another rank's manifest", "a file kept compressed",
    "a leftover staging folder", "the manifest edited", "no manifest", "the folder's mode", "another azcopy",
    "shared storage", "checksums", "a plan without sizes", "no stage folder",
])
def test_a_rerun_read_leaves_anything_else_to_the_module(tmp_path, capsys, drift):
    dest, shard = staged_folder(tmp_path)
    args = read_args(tmp_path, dest, shard)
    run(args, capsys)
    assert shell_read(args) is not None
    manifest = dest / ".amlhpc-staged" / "2.json"
    if drift == "a file missing":
        (dest / "train" / "univ_0001_001.tfrecord").unlink()
    elif drift == "a file of another size":
        (dest / "train" / "univ_0001_001.tfrecord").write_bytes(b"y" * 16)
    elif drift == "another data file":
        (dest / "univ_0009_009.tfrecord").write_bytes(b"z")
    elif drift == "another rank's manifest":
        (dest / ".amlhpc-staged" / "1.json").write_text('{"key": "listed", "files": {}}')
    elif drift == "a file kept compressed":
        (dest / "train" / "univ_0000_000.tfrecord").rename(dest / "train" / "univ_0000_000.tfrecord.gz")
    elif drift == "a leftover staging folder":
        (dest / ".amlhpc-staging" / "2").mkdir(parents=True)
    elif drift == "the manifest edited":  # same size, other content
        manifest.write_text(manifest.read_text().replace('"listed"', '"LISTED"'))
    elif drift == "no manifest":
        manifest.unlink()
    elif drift == "the folder's mode":
        dest.chmod(0o750)
    elif drift == "another azcopy":
        args["azcopy"] = fake_azcopy(tmp_path, "azcopy version 10.30.0")
    elif drift == "shared storage":
        args["shared"] = True
    elif drift == "checksums":
        args["verify"] = "checksum"
    elif drift == "a plan without sizes":
        args["shard"] = {**shard, "expected": [{**r, "raw_size": None} for r in shard["expected"]]}
    elif drift == "no stage folder":
        args["dest"] = str(tmp_path / "elsewhere")
    assert shell_read(args) is None


def test_check_mode_refuses_a_prune_of_most_of_the_folder_as_the_run_would(tmp_path, capsys):
    """Three files staged before, one of them still in the plan, the other two gone (the
    controller's handoff says so): a prune would remove two of three. Check mode says the run
    would refuse it (and that prune_most lets it go on)."""
    from amlhpc.staging.azcopy_sync import manifest_text
    dest = tmp_path / "d"
    (dest / "train").mkdir(parents=True)
    (dest / ".amlhpc-staged").mkdir()
    for name in ("a_000.tfrecord", "b_000.tfrecord", "c_000.tfrecord"):
        (dest / "train" / name).write_bytes(b"x")
    (dest / ".amlhpc-staged" / "0.json").write_text(manifest_text({f"train/{n}_000.tfrecord": 1 for n in "abc"}))
    shard = {"mode": "balanced", "expected": [{"name": "train/a_000.tfrecord", "raw_size": 1, "gzip": False}]}
    handoff = {"handed": [], "gone": ["train/b_000.tfrecord", "train/c_000.tfrecord"]}
    refused = run(base(tmp_path, dest=str(dest), shard=shard, prune=True, handoff=handoff, _ansible_check_mode=True),
                  capsys)
    assert refused["failed"] and refused["msg"].startswith(
        "node 0: stage_prune would remove 2 of the 3 files staged here, whose blobs http://127.0.0.1:1/devstoreaccount1/c "
        "no longer lists (train/b_000.tfrecord, train/c_000.tfrecord), so nothing was fetched or removed"), refused
    allowed = run(base(tmp_path, dest=str(dest), shard=shard, prune=True, prune_most=True, handoff=handoff,
                       _ansible_check_mode=True), capsys)
    assert not allowed.get("failed") and allowed["changed"] and allowed["gone_count"] == 2, allowed
    assert sorted(p.name for p in (dest / "train").iterdir()) == ["a_000.tfrecord", "b_000.tfrecord", "c_000.tfrecord"]


def test_an_unsafe_name_or_folder_is_refused_before_anything_changes(tmp_path, capsys):
    """Issue 40: the module refuses, before it makes the stage folder, a plan or handoff name that
    would leave it, a relative or root folder, a rank that is no number, a relative progress file."""
    dest = tmp_path / "new" / "stage"
    shard = {"mode": "balanced", "rank": 0, "list_of_files": ["/etc/passwd_000.tfrecord.gz"],
             "expected": [{"name": "/etc/passwd_000.tfrecord.gz", "raw_size": 5, "gzip": True}]}
    out = run(base(tmp_path, dest=str(dest), shard=shard, rank=None), capsys)
    assert out["failed"] and out["msg"].startswith(
        f"node 0: 1 name(s) of the plan would be staged or removed outside {dest}, or cannot be held by its file "
        "system: '/etc/passwd_000.tfrecord.gz' (it starts with '/', which would make it an absolute path)"), out
    ok = {"mode": "balanced", "rank": 0, "list_of_files": ["train/a_000.tfrecord"],
          "expected": [{"name": "train/a_000.tfrecord", "raw_size": 5, "gzip": False}]}
    out = run(base(tmp_path, dest=str(dest), shard=ok, rank=None,
                   handoff={"handed": ["../outside_000.tfrecord"], "gone": []}), capsys)
    assert out["failed"] and "'../outside_000.tfrecord' (it has a '.' or '..' path segment" in out["msg"], out
    out = run(base(tmp_path, dest="relative/stage", shard=ok, rank=None), capsys)
    assert out["failed"] and out["msg"] == ("node 0: the stage folder 'relative/stage' cannot be used: it is a "
                                            "relative path: give an absolute one."), out
    out = run(base(tmp_path, dest="/", shard=ok, rank=None), capsys)
    assert out["failed"] and "it is the root folder /" in out["msg"], out
    out = run(base(tmp_path, dest=str(dest), shard={**ok, "rank": "../x"}, rank=None), capsys)
    assert out["failed"] and out["msg"].startswith("The shard's rank '../x' is not a number 0 or above"), out
    out = run(base(tmp_path, dest=str(dest), shard=ok, rank=None, progress_file="p.json"), capsys)
    assert out["failed"] and "progress_file 'p.json' cannot be written" in out["msg"], out
    out = run(base(tmp_path, dest=str(dest), shard=ok, rank=None, handoff={"handed": "x"}), capsys)
    assert out["failed"] and out["msg"] == ("The handoff option handed is not a list of names: pass the stage "
                                            "role's stage_handoff entry for this node."), out
    assert not (tmp_path / "new").exists()
