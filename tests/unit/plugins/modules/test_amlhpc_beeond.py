"""The amlhpc_beeond module, run in-process with patched arguments and a fake beeond."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import ansible.module_utils
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

ROOT = Path(__file__).resolve().parents[4]
MODULE_UTILS = ROOT / "plugins" / "module_utils"

# The module imports ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.*, as AnsiballZ provides it on a node.
if str(MODULE_UTILS) not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(MODULE_UTILS))

_spec = importlib.util.spec_from_file_location("amlhpc_beeond",
                                               ROOT / "plugins" / "modules" / "amlhpc_beeond.py")
beeond_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(beeond_module)


class FakeBeeond:
    def __init__(self, rc=0, out="", err=""):
        self.rc, self.out, self.err = rc, out, err
        self.calls = []

    def __call__(self, module, argv, **kwargs):
        self.calls.append(list(argv))
        return self.rc, self.out, self.err


def run(monkeypatch, capsys, args, mounted=False, beeond=None):
    beeond = beeond or FakeBeeond()
    monkeypatch.setattr(beeond_module, "_mounted", lambda mount_point: mounted)
    # A function binds as a method (the module comes in as self); the FakeBeeond instance would not.
    monkeypatch.setattr(basic.AnsibleModule, "run_command",
                        lambda self, argv, **kw: beeond(self, argv, **kw))  # pylint: disable=unnecessary-lambda
    with patch_module_args(args), pytest.raises(SystemExit):
        beeond_module.main()
    return json.loads(capsys.readouterr().out), beeond.calls


@pytest.fixture
def nodefile(tmp_path):
    path = tmp_path / "nodefile"
    path.write_text("10.0.0.4\n10.0.0.5\n")
    return str(path)


def start_args(nodefile, **extra):
    return {"nodefile": nodefile, "data_dir": "/mnt/resource_nvme/beeond", "mount_point": "/mnt/scratch",
            "metadata_servers": 2, **extra}


def test_start_runs_the_contract_command(monkeypatch, capsys, nodefile):
    result, calls = run(monkeypatch, capsys, start_args(nodefile))
    assert calls == [["beeond", "start", "-n", nodefile, "-d", "/mnt/resource_nvme/beeond",
                      "-c", "/mnt/scratch", "-m", "2", "-F", "-P"]]
    assert result["changed"] and not result.get("failed") and result["rc"] == 0


def test_start_when_mounted_runs_nothing(monkeypatch, capsys, nodefile):
    result, calls = run(monkeypatch, capsys, start_args(nodefile), mounted=True)
    assert calls == [] and not result["changed"] and result["already_mounted"]


def test_exit_111_is_already_mounted(monkeypatch, capsys, nodefile):
    result, _unused = run(monkeypatch, capsys, start_args(nodefile), beeond=FakeBeeond(rc=111))
    assert not result["changed"] and result["already_mounted"] and result["rc"] == 111
    # Said explicitly: without it Ansible fails any result whose rc is not 0.
    assert result["failed"] is False


def test_start_failure_fails_with_the_output(monkeypatch, capsys, nodefile):
    result, _unused = run(monkeypatch, capsys, start_args(nodefile),
                          beeond=FakeBeeond(rc=1, err="ERROR: Host is unreachable via ssh: 10.0.0.5"))
    assert result["failed"] and "exit 1" in result["msg"] and "10.0.0.5" in result["msg"]


def test_check_mode_reports_and_runs_nothing(monkeypatch, capsys, nodefile):
    result, calls = run(monkeypatch, capsys, start_args(nodefile, _ansible_check_mode=True))
    assert calls == [] and result["changed"] and result["cmd"][1] == "start"


def test_missing_nodefile_names_ssh_trust(monkeypatch, capsys, tmp_path):
    result, calls = run(monkeypatch, capsys, start_args(str(tmp_path / "absent")))
    assert calls == [] and result["failed"] and "ssh_trust" in result["msg"]


def test_stop_when_nothing_runs_is_a_no_op(monkeypatch, capsys, nodefile, tmp_path):
    args = {"state": "stopped", "nodefile": nodefile, "mount_point": "/mnt/scratch",
            "status_file": str(tmp_path / "beeond.tmp")}
    result, calls = run(monkeypatch, capsys, args)
    assert calls == [] and not result["changed"]


def test_stop_with_a_status_file_runs_the_contract_command(monkeypatch, capsys, nodefile, tmp_path):
    status = tmp_path / "beeond.tmp"
    status.write_text("10.0.0.4,beegfs-mgmtd,/d,-,-\n")
    args = {"state": "stopped", "nodefile": nodefile, "mount_point": "/mnt/scratch",
            "status_file": str(status)}
    result, calls = run(monkeypatch, capsys, args)
    assert calls == [["beeond", "stop", "-n", nodefile, "-L", "-d", "-P"]] and result["changed"]


def test_bad_arguments_fail_before_running(monkeypatch, capsys, nodefile):
    result, calls = run(monkeypatch, capsys, start_args(nodefile, metadata_servers=0))
    assert calls == [] and result["failed"] and "metadata server" in result["msg"]
