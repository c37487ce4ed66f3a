"""`.ci/sysdeps` as root while another apt run holds apt's lock: it waits, it does not fail.

apt-get here is a stand-in on PATH that records its arguments and, for `update`, runs the real
apt-get (/usr/bin/apt-get) on a throwaway lists folder, cache and empty source list: the lock it
meets is apt's own lock on that folder, held by this test with fcntl as another apt holds it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL_APT_GET = Path("/usr/bin/apt-get")

APT_GET = f"""#!/bin/sh
echo "$*" >> "$FAKE_SYSTEM/apt-get.log"
case " $* " in
  *' update '*) exec {REAL_APT_GET} "$@" -o Dir::State::Lists="$FAKE_SYSTEM/lists" -o Dir::Cache="$FAKE_SYSTEM/cache" \\
                  -o Dir::Etc::sourcelist="$FAKE_SYSTEM/sources.list" -o Dir::Etc::sourceparts="$FAKE_SYSTEM/sources.list.d" ;;
  *' install '*) touch "$FAKE_SYSTEM/libsecret" ;;
esac
"""

STUBS = {
    "apt-get": APT_GET,
    "id": "#!/bin/sh\necho 0\n",
    "node": "#!/bin/sh\nexit 0\n",
    "npm": "#!/bin/sh\nexit 0\n",
    "ldconfig": "#!/bin/sh\n[ -f \"$FAKE_SYSTEM/libsecret\" ] && echo '\tlibsecret-1.so.0 (libc6,x86-64) => /lib/libsecret-1.so.0'\nexit 0\n",
}

pytestmark = pytest.mark.skipif(not REAL_APT_GET.is_file(), reason="no apt-get on this machine (not Debian)")


def fake_system(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    system, bin_dir = tmp_path / "system", tmp_path / "bin"
    for folder in (system / "lists" / "partial", system / "cache" / "archives" / "partial",
                   system / "sources.list.d", bin_dir):
        folder.mkdir(parents=True)
    (system / "sources.list").write_text("")
    for name, text in STUBS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return system, dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin", FAKE_SYSTEM=str(system))


def hold_apt_lock(system: Path) -> int:
    """Take apt's lock on the lists folder as apt-get update does (an fcntl write lock)."""
    fd = os.open(system / "lists" / "lock", os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def sysdeps(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / ".ci" / "sysdeps"), "node"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_apt_get_waits_for_another_apt_holding_its_lock(tmp_path):
    system, env = fake_system(tmp_path)
    fd = hold_apt_lock(system)
    release = threading.Timer(4, os.close, (fd,))  # the other apt run ends 4 s from now
    release.start()
    started = time.monotonic()
    try:
        res = sysdeps(env)
    finally:
        release.join()
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - started >= 4
    assert "another apt holds its lock: waiting up to 600s (apt-get update)" in res.stderr
    calls = (system / "apt-get.log").read_text().splitlines()
    assert calls[0].endswith("update -qq") and calls[-1].endswith("install -y -qq --no-install-recommends libsecret-1-0")
    # apt waits by itself on dpkg's lock (install) with this option; update's retries are ours.
    assert all(call.startswith("-o DPkg::Lock::Timeout=600 ") for call in calls), calls


def test_a_lock_held_past_the_wait_fails_with_apts_message(tmp_path):
    system, env = fake_system(tmp_path)
    fd = hold_apt_lock(system)
    try:
        res = sysdeps(dict(env, APT_LOCK_WAIT="3"))
    finally:
        os.close(fd)
    assert res.returncode != 0
    assert f"Could not get lock {system}/lists/lock" in res.stderr
    assert "install" not in (system / "apt-get.log").read_text()
    assert not (system / "libsecret").exists()


def test_apt_get_runs_once_when_no_lock_is_held(tmp_path):
    system, env = fake_system(tmp_path)
    res = sysdeps(env)
    assert res.returncode == 0, res.stderr
    assert "waiting" not in res.stderr
    assert len((system / "apt-get.log").read_text().splitlines()) == 2
