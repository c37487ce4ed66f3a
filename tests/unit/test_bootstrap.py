"""`.ci/bootstrap node` (make setup, so make run) on a fresh Debian machine without libsecret.

azcopy needs Debian's libsecret-1-0. As root, `make run` installs it as `make test` does
(`.ci/sysdeps`); otherwise it stops printing the apt-get line to run. apt-get, npm and the
tools are stand-ins on PATH that record what they were asked to do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

NPM = """#!/bin/sh
# Stand-in npm: lays out what the pinned packages install.
prefix=$3
mkdir -p "$prefix/node_modules/@azure-tools/azcopy-linux/dist/bin" "$prefix/node_modules/.bin"
cat > "$prefix/node_modules/@azure-tools/azcopy-linux/dist/bin/azcopy_linux_amd64" <<'SH'
#!/bin/sh
# azcopy exits at start-up without libsecret-1.so.0.
[ -f "$FAKE_SYSTEM/libsecret" ] || { echo "error while loading shared libraries: libsecret-1.so.0" >&2; exit 127; }
echo "azcopy version 10.32.2"
SH
printf '#!/bin/sh\\nexit 0\\n' > "$prefix/node_modules/.bin/azurite-blob"
chmod +x "$prefix/node_modules/.bin/azurite-blob"
"""

STUBS = {
    "npm": NPM,
    "node": "#!/bin/sh\nexit 0\n",
    "id": "#!/bin/sh\necho \"$FAKE_UID\"\n",
    "ldconfig": "#!/bin/sh\n[ -f \"$FAKE_SYSTEM/libsecret\" ] && echo '\tlibsecret-1.so.0 (libc6,x86-64) => /lib/libsecret-1.so.0'\nexit 0\n",
    "apt-get": "#!/bin/sh\necho \"$*\" >> \"$FAKE_SYSTEM/apt-get.log\"\n"
               "case \" $* \" in *' libsecret-1-0 '*) touch \"$FAKE_SYSTEM/libsecret\";; esac\n",
}


def bootstrap(tmp_path: Path, uid: int) -> tuple[subprocess.CompletedProcess, Path]:
    project, system, bin_dir = tmp_path / "project", tmp_path / "system", tmp_path / "bin"
    (project / ".ci").mkdir(parents=True)
    for name in ("bootstrap", "sysdeps", "node-packages.txt"):
        shutil.copy2(ROOT / ".ci" / name, project / ".ci" / name)
    system.mkdir()
    bin_dir.mkdir()
    for name, text in STUBS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin", FAKE_SYSTEM=str(system), FAKE_UID=str(uid))
    res = subprocess.run([str(project / ".ci" / "bootstrap"), "node"], cwd=project, env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    return res, system


def test_as_root_bootstrap_installs_libsecret_and_azcopy_runs(tmp_path):
    res, system = bootstrap(tmp_path, 0)
    assert res.returncode == 0, res.stderr
    log = (system / "apt-get.log").read_text()
    assert "install -y -qq --no-install-recommends libsecret-1-0" in log
    assert (tmp_path / "project" / ".tools" / ".bootstrap-stamp").is_file()


def test_not_root_bootstrap_prints_the_apt_line_and_installs_nothing(tmp_path):
    res, system = bootstrap(tmp_path, 1000)
    assert res.returncode != 0
    assert "sudo apt-get install -y libsecret-1-0" in res.stderr
    assert not (system / "apt-get.log").exists()
