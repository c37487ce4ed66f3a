"""The ssh_trust scan's read of the head's key against community.crypto.openssh_keypair itself.

Real keys from ssh-keygen, the role's command run by /bin/sh, and the module in check mode,
with the role's arguments, as the judge: where the read says "ready" the module would change
nothing, and where it does not, the module would change something or refuse the key.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_cli import ansible_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "unit" / "plugins" / "module_utils"))

from test_ssh_trust_head_key import COMMENT, GROUP, USER, make_key, read, state  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")


def module_would_act(key: Path, key_type: str = "rsa", bits: int = 2048, comment: str = COMMENT) -> bool:
    """openssh_keypair's own answer, in check mode, with the role's arguments: it would change
    something, or it refuses (a private key that others may read, which ssh-keygen will not load)."""
    args = {"path": str(key), "type": key_type, "comment": comment, "owner": USER, "group": GROUP, "mode": "0600"}
    if key_type != "ed25519":
        args["size"] = bits
    res = subprocess.run([ansible_cli("ansible"), "localhost", "-C", "-m", "community.crypto.openssh_keypair",
                          "-a", json.dumps(args), "-e", f"ansible_python_interpreter={sys.executable}"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0 or "Unable to read the key" in res.stdout, res.stdout + res.stderr
    return res.returncode != 0 or '"changed": true' in res.stdout


def test_a_key_as_asked_is_ready_and_the_module_agrees(tmp_path):
    key = make_key(tmp_path / "ssh")
    assert state(read(key, tmp_path).stdout)["ready"]
    assert not module_would_act(key)


@pytest.mark.slow
@pytest.mark.parametrize("drift, why", [
    ("folder 0755", "the folder is directory 755"),
    ("key 0644", "the key is regular file 644"),
    ("pub 0644", "the public key is regular file 644"),
    ("comment", "the .pub file's comment differs"),
    ("other pub", "the .pub file is not the private key's public half"),
    ("no pub", "the public key is missing"),
    ("no key", "the key is missing"),
    ("bits", "the key has 2048 bits, not 3072"),
    ("type", "the key is ssh-ed25519, not rsa"),
])
def test_each_drift_is_not_ready_and_the_module_agrees(tmp_path, drift, why):
    folder = tmp_path / "ssh"
    key = make_key(folder, "ed25519" if drift == "type" else "rsa")
    if drift == "type":
        key = key.rename(folder / "id_rsa")
        key.with_name("id_ed25519.pub").rename(folder / "id_rsa.pub")
    pub = key.with_suffix(".pub")
    bits = 3072 if drift == "bits" else 2048
    if drift == "folder 0755":
        folder.chmod(0o755)
    elif drift == "key 0644":
        key.chmod(0o644)
    elif drift == "pub 0644":
        pub.chmod(0o644)
    elif drift == "comment":
        pub.write_text(pub.read_text().replace(COMMENT, "someone@else"))
    elif drift == "other pub":
        other = make_key(tmp_path / "other")
        pub.write_text(other.with_suffix(".pub").read_text())
    elif drift == "no pub":
        pub.unlink()
    elif drift == "no key":
        key.unlink()
    got = state(read(key, tmp_path).stdout, bits=bits)
    assert not got["ready"] and got["public_key"] == ""
    assert got["why"].startswith(why), got
    if drift != "folder 0755":  # the folder is the file module's, not openssh_keypair's
        assert module_would_act(key, bits=bits)
