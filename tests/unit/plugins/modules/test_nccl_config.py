"""nccl_config: the nccl role's read, decide and write in one module call: check mode
writes nothing, a first run writes the three files, a second changes nothing, the facts
and the message come back in the result."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

ROOT = Path(__file__).resolve().parents[4]
SPEC = importlib.util.spec_from_file_location("nccl_config", ROOT / "plugins" / "modules" / "nccl_config.py")
nccl_config = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(nccl_config)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the module writes root-owned files, as the role does")


def run(args: dict, capsys, check_mode: bool = False) -> dict:
    args = dict(args, _ansible_diff=True, _ansible_check_mode=check_mode)
    with patch_module_args(args), pytest.raises(SystemExit):
        nccl_config.main()
    return json.loads(capsys.readouterr().out)


def test_check_then_write_then_nothing_to_do(tmp_path, capsys):
    etc = tmp_path / "etc"
    args = {"vm_size": "Standard_ND96asr_v4", "imds": True, "nvidia_smi": "amlhpc-no-such-nvidia-smi",
            "sharp_plugin_dirs": [str(tmp_path / "sharp")], "topo_file_dest": str(etc / "amlhpc" / "topo.xml"),
            "conf_path": str(etc / "nccl.conf"), "conf_settings": {"NCCL_IB_PCI_RELAXED_ORDERING": 1},
            "env_path": str(etc / "amlhpc" / "nccl.env"), "env": {"NCCL_DEBUG": "WARN"}}
    (tmp_path / "sharp").mkdir()
    (tmp_path / "sharp" / "libnccl-net.so").write_text("")
    etc.mkdir()
    check = run(args, capsys, check_mode=True)
    assert check["changed"] is True and os.listdir(etc) == []
    assert check["probe"]["imds"]["msg"] == "instance metadata not asked", "the inventory's size is enough"
    assert check["facts"]["nccl_pinning"]["source"] == "ndv4 table"
    first = run(args, capsys)
    assert first["changed_files"] == [str(etc / "amlhpc"), str(etc / "amlhpc" / "topo.xml"), str(etc / "nccl.conf"),
                                      str(etc / "amlhpc" / "nccl.env")]
    assert (etc / "nccl.conf").read_text().endswith(f"NCCL_TOPO_FILE={etc / 'amlhpc' / 'topo.xml'}\n")
    assert f"export LD_LIBRARY_PATH={tmp_path / 'sharp'}" in (etc / "amlhpc" / "nccl.env").read_text()
    assert first["msg"].startswith(f"NCCL_TOPO_FILE={etc / 'amlhpc' / 'topo.xml'} from ndv4 table; GPU order ")
    assert first["facts"] == check["facts"]
    again = run(args, capsys)
    assert again["changed"] is False and again["changed_files"] == []
    # The VM size changes to one without a topology: the stale file goes.
    later = run(dict(args, vm_size="Standard_D4s_v5", imds=False), capsys)
    assert str(etc / "amlhpc" / "topo.xml") in later["changed_files"] and not (etc / "amlhpc" / "topo.xml").exists()
    assert later["facts"]["nccl_topo_file_in_use"] == ""


def test_a_user_file_without_its_text_is_refused(tmp_path, capsys):
    res = run({"topo_file_src": "mine.xml", "conf_path": str(tmp_path / "nccl.conf")}, capsys)
    assert res["failed"] is True and "topo_file_content" in res["msg"]
