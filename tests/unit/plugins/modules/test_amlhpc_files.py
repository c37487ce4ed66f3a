"""amlhpc_files and ssh_trust_node: several files in one call, written only when they
differ, nothing written in check mode, diffs shown, removal and backup."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

ROOT = Path(__file__).resolve().parents[4]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "plugins" / "modules" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


amlhpc_files = load("amlhpc_files")
ssh_trust_node = load("ssh_trust_node")

OWNER = {"owner": __import__("pwd").getpwuid(os.getuid()).pw_name,
         "group": __import__("grp").getgrgid(os.getgid()).gr_name}


def run(module, args: dict, capsys, check_mode: bool = False) -> dict:
    args = dict(args, _ansible_diff=True)
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


def test_files_written_once_then_unchanged_and_check_mode_writes_nothing(tmp_path, capsys):
    conf, stale = tmp_path / "etc" / "nccl.conf", tmp_path / "etc" / "topo.xml"
    args = {"directories": [{"path": str(tmp_path / "etc"), "mode": "0755", **OWNER}],
            "files": [{"path": str(conf), "content": "A=1\n", **OWNER},
                      {"path": str(stale), "state": "absent"}]}
    check = run(amlhpc_files, args, capsys, check_mode=True)
    assert check["changed"] is True and not (tmp_path / "etc").exists()
    args["files"].append({"path": str(tmp_path / "etc" / "key"), "content": "k\n", "mode": "0600", **OWNER})
    first = run(amlhpc_files, args, capsys)
    assert oct((tmp_path / "etc" / "key").stat().st_mode & 0o7777) == "0o600"
    args["files"].pop()
    assert first["changed_files"][:2] == [str(tmp_path / "etc"), str(conf)]
    assert conf.read_text() == "A=1\n" and oct(conf.stat().st_mode & 0o7777) == "0o644"
    assert run(amlhpc_files, args, capsys)["changed"] is False
    # A stale file goes; a replaced content is shown as a diff and backed up when asked.
    stale.write_text("<system/>\n")
    args["files"][0].update(content="A=2\n", backup=True)
    third = run(amlhpc_files, args, capsys)
    assert third["changed_files"] == [str(conf), str(stale)] and not stale.exists()
    assert {"before": "A=1\n", "after": "A=2\n"}.items() <= third["diff"][0].items()
    assert Path(third["backups"][str(conf)]).read_text() == "A=1\n"
    # A mode that differs is set, content alone is not the only check.
    conf.chmod(0o600)
    assert run(amlhpc_files, args, capsys)["changed_files"] == [str(conf)]
    assert oct(conf.stat().st_mode & 0o7777) == "0o644"


@pytest.mark.skipif(os.getuid() != 0, reason="ssh_trust_node writes the nodefile and known_hosts as root:root")
def test_ssh_trust_node_writes_nodefile_and_block_once(tmp_path, capsys):
    kh = tmp_path / "ssh" / "ssh_known_hosts"
    kh.parent.mkdir()
    kh.write_text("other ssh-rsa AAAAx\n")
    args = {"nodefile": str(tmp_path / "amlhpc" / "nodefile"), "nodefile_lines": ["10.0.0.4", "10.0.0.5"],
            "known_hosts": str(kh), "known_hosts_marker": "amlhpc ssh_trust: cluster gpu",
            "known_hosts_lines": ["10.0.0.4 ssh-ed25519 AAAA4", "10.0.0.5 ssh-ed25519 AAAA5"]}
    assert run(ssh_trust_node, args, capsys, check_mode=True)["changed"] is True
    assert not (tmp_path / "amlhpc").exists() and kh.read_text() == "other ssh-rsa AAAAx\n"
    first = run(ssh_trust_node, args, capsys)
    assert first["changed"] is True
    assert (tmp_path / "amlhpc" / "nodefile").read_text() == "10.0.0.4\n10.0.0.5\n"
    assert kh.read_text() == ("other ssh-rsa AAAAx\n# BEGIN amlhpc ssh_trust: cluster gpu\n10.0.0.4 ssh-ed25519 AAAA4\n"
                              "10.0.0.5 ssh-ed25519 AAAA5\n# END amlhpc ssh_trust: cluster gpu\n")
    assert run(ssh_trust_node, args, capsys)["changed"] is False
