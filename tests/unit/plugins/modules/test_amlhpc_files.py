"""amlhpc_files and ssh_trust_node: several files in one call, written only when they
differ, nothing written in check mode, diffs shown, removal and backup."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from ansible_compat import patch_module_args

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


def cluster_files(tmp_path: Path) -> tuple[Path, dict]:
    """A known_hosts with another line in it, and ssh_trust_node's arguments for a two-node cluster."""
    kh = tmp_path / "ssh" / "ssh_known_hosts"
    kh.parent.mkdir()
    kh.write_text("other ssh-rsa AAAAx\n")
    return kh, {"nodefile": str(tmp_path / "amlhpc" / "nodefile"), "nodefile_lines": ["10.0.0.4", "10.0.0.5"],
                "known_hosts": str(kh), "known_hosts_marker": "amlhpc ssh_trust: cluster gpu",
                "known_hosts_lines": ["10.0.0.4 ssh-ed25519 AAAA4", "10.0.0.5 ssh-ed25519 AAAA5"]}


@pytest.mark.skipif(os.getuid() != 0, reason="ssh_trust_node writes the nodefile and known_hosts as root:root")
def test_ssh_trust_node_writes_nodefile_and_block_once(tmp_path, capsys):
    kh, args = cluster_files(tmp_path)
    assert run(ssh_trust_node, args, capsys, check_mode=True)["changed"] is True
    assert not (tmp_path / "amlhpc").exists() and kh.read_text() == "other ssh-rsa AAAAx\n"
    first = run(ssh_trust_node, args, capsys)
    assert first["changed"] is True
    assert (tmp_path / "amlhpc" / "nodefile").read_text() == "10.0.0.4\n10.0.0.5\n"
    assert kh.read_text() == ("other ssh-rsa AAAAx\n# BEGIN amlhpc ssh_trust: cluster gpu\n10.0.0.4 ssh-ed25519 AAAA4\n"
                              "10.0.0.5 ssh-ed25519 AAAA5\n# END amlhpc ssh_trust: cluster gpu\n")
    assert run(ssh_trust_node, args, capsys)["changed"] is False


# The ssh_trust_node action's read (module_utils/amlhpc/nodes/file_state.py and ssh_trust.node_unchanged):
# one shell command; where the module would change nothing, no module run.

def shell_read(paths: list[str], users: list[str]) -> str:
    import subprocess

    from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.file_state import read_command
    return subprocess.run(["/bin/sh", "-c", read_command(paths, users)], capture_output=True, text=True,
                          check=True).stdout


def test_the_shell_read_gives_each_path_as_python_sees_it(tmp_path):
    from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.file_state import FileState, parse_read
    (tmp_path / "d").mkdir(mode=0o750)
    (tmp_path / "d").chmod(0o750)
    (tmp_path / "f").write_text("héllo\nworld\n")
    (tmp_path / "f").chmod(0o640)
    (tmp_path / "empty").write_text("")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    paths = [str(tmp_path / n) for n in ("d", "f", "empty", "dangling", "link", "absent")] + ["~root/.profile"]
    states, users = parse_read(shell_read(paths, ["root", "no-such-user-here"]), paths,
                               ["root", "no-such-user-here"])
    uid, gid = os.getuid(), os.getgid()
    assert states[paths[0]] == FileState("dir", uid, gid, 0o750)
    assert states[paths[1]] == FileState("file", uid, gid, 0o640, "héllo\nworld\n")
    assert states[paths[2]] == FileState("file", uid, gid, 0o644 & ~_umask(), "")
    assert states[paths[3]] == FileState("other") and states[paths[5]] == FileState("absent")
    assert states[paths[4]] == states[paths[1]]  # a symlink is read through, as open() and os.stat() do
    root = __import__("pwd").getpwnam("root")
    assert users == {"root": (0, root.pw_gid, root.pw_dir), "no-such-user-here": None}
    assert states[paths[6]].kind == ("file" if os.path.isfile(os.path.join(root.pw_dir, ".profile")) else "absent")
    assert parse_read("garbage\n", paths) is None and parse_read("", paths) is None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.skipif(os.getuid() != 0, reason="ssh_trust_node writes the nodefile and known_hosts as root:root")
def test_the_read_says_unchanged_exactly_where_the_module_changes_nothing(tmp_path, capsys):
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.trust.ssh_trust import (
        NODE_ARGUMENT_SPEC,
        node_read,
        node_unchanged,
    )
    kh, args = cluster_files(tmp_path)

    def unchanged(a: dict) -> bool:
        params = ArgumentSpecValidator(NODE_ARGUMENT_SPEC).validate(dict(a)).validated_parameters
        paths, users = node_read(params)
        return node_unchanged(params, shell_read(paths, users))

    assert not unchanged(args)  # nothing written yet
    run(ssh_trust_node, args, capsys)
    assert unchanged(args) and run(ssh_trust_node, args, capsys)["changed"] is False
    for change in ({"nodefile_lines": ["10.0.0.4"]}, {"known_hosts_lines": ["10.0.0.9 ssh-ed25519 AAAA9"]}):
        assert not unchanged({**args, **change}) and run(ssh_trust_node, {**args, **change}, capsys, check_mode=True)[
            "changed"] is True
    (tmp_path / "amlhpc" / "nodefile").chmod(0o600)  # a mode the module sets back
    assert not unchanged(args) and run(ssh_trust_node, args, capsys, check_mode=True)["changed"] is True
    run(ssh_trust_node, args, capsys)
    (tmp_path / "amlhpc").chmod(0o700)  # the nodefile's folder: owner and mode enforced
    assert not unchanged(args)
    run(ssh_trust_node, args, capsys)
    kh.parent.chmod(0o700)  # known_hosts' folder: only made when missing
    assert unchanged(args) and run(ssh_trust_node, args, capsys)["changed"] is False
    assert not unchanged({**args, "nodefile": "relative/nodefile"})


def test_the_read_of_a_trusted_key_follows_the_users_home_and_ownership(tmp_path):
    """The authorized_keys part, read from a stand-in home (the read's output is by position)."""
    from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.trust.ssh_trust import node_unchanged
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    keys = home / ".ssh" / "authorized_keys"
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHead amlhpc-ssh-trust"
    keys.write_text(f"ssh-rsa AAAAother me@laptop\n{key}\n")
    keys.chmod(0o600)
    (tmp_path / "amlhpc").mkdir(mode=0o755)
    (tmp_path / "amlhpc").chmod(0o755)
    (tmp_path / "amlhpc" / "nodefile").write_text("10.0.0.4\n")
    (tmp_path / "amlhpc" / "nodefile").chmod(0o644)
    kh = tmp_path / "known_hosts"
    kh.write_text("# BEGIN m\n10.0.0.4 ssh-ed25519 AAAA4\n# END m\n")
    kh.chmod(0o644)
    params = {"authorized_key": key, "replaces_comment": "amlhpc-ssh-trust", "user": "root",
              "nodefile": str(tmp_path / "amlhpc" / "nodefile"), "nodefile_lines": ["10.0.0.4"],
              "known_hosts": str(kh), "known_hosts_marker": "m", "known_hosts_lines": ["10.0.0.4 ssh-ed25519 AAAA4"]}
    paths = [str(home / ".ssh"), str(keys), str(tmp_path / "amlhpc"), str(tmp_path / "amlhpc" / "nodefile"),
             str(tmp_path), str(kh)]
    same_owner = os.getuid() == 0
    assert node_unchanged(params, shell_read(paths, ["root"])) is same_owner
    if same_owner:
        # an earlier head's key under the role's comment is replaced: a change
        other = {**params, "authorized_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINew amlhpc-ssh-trust"}
        assert not node_unchanged(other, shell_read(paths, ["root"]))
        keys.chmod(0o644)
        assert not node_unchanged(params, shell_read(paths, ["root"]))
        assert not node_unchanged(params, shell_read(paths, ["no-such-user-here"]).replace(
            "no-such-user-here", "root"))
