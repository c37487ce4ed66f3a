"""The ssh_trust scan's read of the head's key (amlhpc.trust.ssh_trust HEAD_KEY_READ, head_key_state).

Real keys from ssh-keygen and the real command run by /bin/sh with a stand-in ssh-keyscan on
PATH. tests/unit/test_ssh_trust_head_key_module.py holds the read against
community.crypto.openssh_keypair itself (it runs the ansible CLI, which ansible-test's
module_utils context does not have).
"""

from __future__ import annotations

import getpass
import grp
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from amlhpc.trust.ssh_trust import head_key_command, head_key_state, known_hosts_block, public_key_bits

USER = getpass.getuser()
GROUP = grp.getgrgid(os.getgid()).gr_name
COMMENT = "amlhpc-head@gpu"
# What a real ssh-keyscan prints on stdout for one node (its comment lines go to stderr).
SCAN_LINE = "10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5"

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")


def make_key(folder: Path, key_type: str = "rsa", bits: int = 2048, comment: str = COMMENT,
             passphrase: str = "") -> Path:
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)
    key = folder / f"id_{key_type}"
    args = ["-b", str(bits)] if key_type != "ed25519" else []
    subprocess.run(["ssh-keygen", "-q", "-t", key_type, *args, "-N", passphrase, "-C", comment, "-f", str(key)],
                   check=True)
    key.chmod(0o600)
    key.with_suffix(".pub").chmod(0o600)
    return key


def read(key: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """The scan's command as the role runs it, with a stand-in ssh-keyscan that prints one key
    line and its argv (so the test sees what reached it)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "ssh-keyscan"
    fake.write_text(f'#!/bin/sh\necho "{SCAN_LINE}"\necho "args: $*" >&2\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    return subprocess.run(head_key_command(str(key), ["-T", "10", "-t", "ed25519", "10.0.0.5"]),
                          capture_output=True, text=True, env=env, check=False)


def state(output: str, key_type: str = "rsa", bits: int | None = 2048, comment: str = COMMENT) -> dict:
    return head_key_state(output, key_type, bits, comment, owner=USER, group=GROUP)


def test_a_key_as_asked_is_ready_and_its_public_half_is_the_modules(tmp_path):
    key = make_key(tmp_path / "ssh")
    res = read(key, tmp_path)
    assert res.returncode == 0, res.stderr
    got = state(res.stdout)
    assert got == {"ready": True, "why": "", "public_key": " ".join(key.with_suffix(".pub").read_text().split()[:2])}
    # The read's lines are comments to the scan's parser: the known_hosts block is the scan's.
    assert known_hosts_block(res.stdout, ["10.0.0.5"], ["ed25519"]) == {"lines": [SCAN_LINE], "missing": []}
    assert "args: -T 10 -t ed25519 10.0.0.5" in res.stderr


def test_a_key_with_a_passphrase_is_not_the_roles(tmp_path):
    key = make_key(tmp_path / "ssh", passphrase="secret-words")
    got = state(read(key, tmp_path).stdout)
    assert got == {"ready": False, "public_key": "", "why": "the private key cannot be read without a passphrase"}


def test_an_unread_key_is_not_ready():
    """Output of a head where the read did not run (an older command, a scan alone)."""
    assert state(SCAN_LINE + "\n")["ready"] is False
    assert head_key_state("", "rsa", 4096, COMMENT)["why"] == "the head's key was not read"


def test_a_key_of_another_owner_is_not_as_asked(tmp_path):
    """The role's owner is root; the key made here is this user's, so asked for another
    owner (root where this test does not run as root) it is not ready."""
    key = make_key(tmp_path / "ssh")
    other = "root" if USER != "root" else "nobody"
    got = head_key_state(read(key, tmp_path).stdout, "rsa", 2048, COMMENT, owner=other, group=GROUP)
    assert got["why"] == f"the folder is directory 700 {USER}:{GROUP}, not directory 700 {other}:{GROUP}"


def test_public_key_bits(tmp_path):
    for key_type, bits in (("rsa", 2048), ("rsa", 3072), ("ecdsa", 384), ("ed25519", 256)):
        key = make_key(tmp_path / f"{key_type}{bits}", key_type, bits)
        name, data = key.with_suffix(".pub").read_text().split()[:2]
        assert public_key_bits(name, data) == bits, (key_type, bits)
    assert public_key_bits("ssh-rsa", "not base64!") is None
    assert public_key_bits("ssh-rsa", "AAAAC3NzaC1lZDI1NTE5AAAAIB5") is None  # an ed25519 blob
