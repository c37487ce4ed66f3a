"""The amlhpc_fs_bench module through Ansible's own argument handling."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ansible_compat import patch_module_args

import amlhpc
import amlhpc.health.fsbench

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "plugins" / "modules"))
# What AnsiballZ does for a module on a node: plugins/module_utils/amlhpc is importable as
# ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.
sys.modules.setdefault("ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc", amlhpc)
sys.modules.setdefault("ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.health.fsbench", amlhpc.health.fsbench)

import amlhpc_fs_bench  # noqa: E402


def run_module(args: dict, capsys) -> tuple[int, dict]:
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        amlhpc_fs_bench.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_measures_and_leaves_nothing(tmp_path, capsys):
    code, out = run_module({"path": str(tmp_path), "files": 3, "file_size_mb": 2, "parallel": 2,
                            "block_size_kb": 256}, capsys)
    assert code == 0
    assert out["changed"] is False
    assert out["bytes_written"] == out["bytes_read"] == 3 * 2 * 2**20
    assert out["errors"] == [] and out["write_mbps"] > 0 and out["read_mbps"] > 0
    assert list(tmp_path.iterdir()) == []


def test_check_mode_writes_nothing(tmp_path, capsys):
    code, out = run_module({"path": str(tmp_path), "_ansible_check_mode": True}, capsys)
    assert code == 0
    assert out["skipped_reason"] == "check mode: the benchmark writes files"
    assert list(tmp_path.iterdir()) == []


def test_missing_mount_fails_with_a_sentence(tmp_path, capsys):
    code, out = run_module({"path": str(tmp_path / "scratch")}, capsys)
    assert code == 1
    assert out["failed"] is True
    assert "is not a folder (is the shared file system mounted?)" in out["msg"]
