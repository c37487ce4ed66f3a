"""dataset_upload's action answers on the controller only where the module would run there and
has only to read (plugins/action/dataset_upload.py); everywhere else the module runs."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from amlhpc.data import dataset_prep  # the very module the action imports by its collection name (tests/conftest.py)
from amlhpc.staging.blob_rest import BlobRestError, ListedBlob

ROOT = Path(__file__).resolve().parents[4]


def _load(name: str, path: Path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_load("ansible_collections.amlhpc.azureml.plugins.plugin_utils.pipelined", ROOT / "plugins" / "plugin_utils" / "pipelined.py")
action_mod = _load("amlhpc_test_dataset_upload_action", ROOT / "plugins" / "action" / "dataset_upload.py")

KEY = "c2VjcmV0LWtleS1mb3ItdGhlLXRlc3Q="


def fake_action(transport="local", become=False, async_val=0, check_mode=False):
    return SimpleNamespace(_connection=SimpleNamespace(transport=transport), _play_context=SimpleNamespace(become=become),
                           _task=SimpleNamespace(async_val=async_val, check_mode=check_mode))


@pytest.fixture()
def prepared(tmp_path, monkeypatch):
    """A data set compressed once, and a container listing that holds every blob as uploaded."""
    src, work = tmp_path / "src", tmp_path / "work"
    (src / "train").mkdir(parents=True)
    for i in range(3):
        (src / "train" / f"f{i}.tfrecord").write_bytes(os.urandom(500) + b"\0" * 5000)
    blobs = dataset_prep.compress_all(str(src), str(work), prefix="v1", workers=1)
    listing = [ListedBlob(name=p.blob, size=p.size, content_md5=p.md5, content_encoding="gzip",
                          metadata=p.metadata) for p in blobs]
    calls = []

    def list_container(url, container, sas="", prefix=""):
        calls.append((url, container, prefix))
        assert KEY not in sas  # a container SAS made from the key, never the key
        return list(listing)
    monkeypatch.setattr(dataset_prep, "list_container", list_container)
    args = {"src": str(src), "work_dir": str(work), "account_url": "http://127.0.0.1:1/devstoreaccount1",
            "container": "c", "prefix": "v1", "account_key": KEY}
    return SimpleNamespace(src=src, work=work, listing=listing, calls=calls, args=args)


def test_a_rerun_with_nothing_to_do_is_answered_with_the_module_counts_and_no_secret(prepared):
    answer = action_mod.answered_here(fake_action(), prepared.args)
    assert answer is not None
    assert {k: answer[k] for k in ("changed", "files", "uploaded", "already_there", "compressed", "reused",
                                   "uploaded_bytes")} == {"changed": False, "files": 3, "uploaded": 0,
                                                          "already_there": 3, "compressed": 0, "reused": 3,
                                                          "uploaded_bytes": 0}
    assert answer["raw_bytes"] == 3 * 5500 and 0 < answer["ratio"] < 1
    assert answer["invocation"]["module_args"]["account_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert KEY not in repr(answer)


@pytest.mark.parametrize("where", [{"transport": "ssh"}, {"become": True}, {"async_val": 60}])
def test_the_module_runs_where_it_would_not_run_on_the_controller_as_this_user(prepared, where):
    assert action_mod.answered_here(fake_action(**where), prepared.args) is None
    assert prepared.calls == []


def test_anything_to_do_runs_the_module(prepared):
    prepared.listing.pop()  # a blob gone: the module uploads it
    assert action_mod.answered_here(fake_action(), prepared.args) is None
    prepared.listing.clear()
    os.utime(prepared.src / "train" / "f0.tfrecord")  # a source touched: compressed again, unlisted
    assert action_mod.answered_here(fake_action(), prepared.args) is None
    assert len(prepared.calls) == 1


def test_arguments_the_module_refuses_run_the_module(prepared):
    both = {**prepared.args, "sas": "sv=2026&sig=x"}  # sas and account_key are mutually exclusive
    assert action_mod.answered_here(fake_action(), both) is None
    assert action_mod.answered_here(fake_action(), {k: v for k, v in prepared.args.items() if k != "src"}) is None
    assert prepared.calls == []


def test_check_mode_counts_the_missing_blobs(prepared):
    prepared.listing.pop(0)
    answer = action_mod.answered_here(fake_action(check_mode=True), prepared.args)
    assert answer is not None and {k: answer[k] for k in ("changed", "files", "missing")} == {
        "changed": True, "files": 3, "missing": 1}


def test_an_error_reading_runs_the_module(prepared, monkeypatch):
    def refused(*_a, **_k):
        raise BlobRestError("AuthenticationFailed")
    monkeypatch.setattr(dataset_prep, "list_container", refused)
    assert action_mod.answered_here(fake_action(), prepared.args) is None


def test_no_files_runs_the_module(tmp_path, prepared):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert action_mod.answered_here(fake_action(), {**prepared.args, "src": str(empty)}) is None
    assert prepared.calls == []
