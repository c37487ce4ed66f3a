"""The amlhpc_beeond module, run in-process with patched arguments and a fake beeond."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import ansible.module_utils
from ansible.module_utils import basic
from ansible_compat import patch_module_args

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


def run(monkeypatch, capsys, args, mounted=False, beeond=None, status=None, tmp_path=None):
    """Run the module; ``status`` is the head's beeond status file content (None: no file)."""
    beeond = beeond or FakeBeeond()
    monkeypatch.setattr(beeond_module, "_mounted", lambda mount_point: mounted)
    # A function binds as a method (the module comes in as self); the FakeBeeond instance would not.
    monkeypatch.setattr(basic.AnsibleModule, "run_command",
                        lambda self, argv, **kw: beeond(self, argv, **kw))  # pylint: disable=unnecessary-lambda
    if "status_file" not in args and tmp_path is not None:
        status_file = tmp_path / "beeond.tmp"
        if status is not None:
            status_file.write_text(status)
        args = {**args, "status_file": str(status_file)}
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


STATUS = ("10.0.0.4,beegfs-mgmtd,/mnt/resource_nvme/beeond/beegfs-mgmtd,/var/log/beegfs-mgmtd_20261123-010203.log,"
          "/var/run/beegfs-mgmtd-20261123-010203.pid\n"
          "10.0.0.4,beegfs-client,/mnt/scratch,/var/log/beegfs-client_20261123-010203.log,-\n")


def test_start_when_mounted_runs_nothing(monkeypatch, capsys, nodefile, tmp_path):
    result, calls = run(monkeypatch, capsys, start_args(nodefile), mounted=True, status=STATUS, tmp_path=tmp_path)
    assert calls == [] and not result["changed"] and result["already_mounted"]
    assert "running (status file" in result["msg"]


def test_start_on_a_fresh_head_runs_beeond(monkeypatch, capsys, nodefile, tmp_path):
    result, calls = run(monkeypatch, capsys, start_args(nodefile), tmp_path=tmp_path)
    assert len(calls) == 1 and result["changed"]


def test_status_file_without_a_mount_is_refused_before_beeond_runs(monkeypatch, capsys, nodefile, tmp_path):
    result, calls = run(monkeypatch, capsys, start_args(nodefile), status=STATUS, tmp_path=tmp_path)
    assert calls == [] and result["failed"] and "not shut down properly" in result["msg"]
    assert str(tmp_path / "beeond.tmp") in result["msg"]


def test_beeond_exit_status_is_not_read_as_already_mounted(monkeypatch, capsys, nodefile, tmp_path):
    # beeond itself exits 1 when its status file exists; no exit status means "already running".
    err = ("ERROR: Status file /tmp/beeond.tmp on host 10.0.0.5 already exists. Maybe a session is already "
           "running or the previous session was not properly shut down.")
    result, _unused = run(monkeypatch, capsys, start_args(nodefile), beeond=FakeBeeond(rc=1, err=err), tmp_path=tmp_path)
    assert result["failed"] and not result["already_mounted"] and "beeond stop" in result["msg"]
    result, _unused = run(monkeypatch, capsys, start_args(nodefile), beeond=FakeBeeond(rc=111), tmp_path=tmp_path)
    assert result["failed"] and result["rc"] == 111


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
    # A status file other than beeond's default is passed on with -i.
    assert calls == [["beeond", "stop", "-n", nodefile, "-i", str(status), "-L", "-d", "-P"]] and result["changed"]


def test_bad_arguments_fail_before_running(monkeypatch, capsys, nodefile):
    result, calls = run(monkeypatch, capsys, start_args(nodefile, metadata_servers=0))
    assert calls == [] and result["failed"] and "metadata server" in result["msg"]
