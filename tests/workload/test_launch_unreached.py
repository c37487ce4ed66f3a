"""Issue 42, item 5: a node the gate or the last look before submit could not reach got no verdict
file; AzureML's docker then mounts an empty folder in its place. Its launcher ends without training
(exit code 0) instead of failing the job."""

from __future__ import annotations

import subprocess
import sys

from conftest import WORKLOAD


def test_a_folder_in_place_of_the_verdict_means_no_verdict(tmp_path):
    folder = tmp_path / "health-verdict.json"
    folder.mkdir()  # what docker -v makes of a missing file
    garbage = tmp_path / "garbage.json"
    garbage.write_text("[1, 2")
    for path in (folder, garbage):
        res = subprocess.run([sys.executable, str(WORKLOAD / "launch.py"), "--verdict", str(path), "--verdict-id",
                              "abc", "--", "train.py"], capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode == 0, res.stderr
        assert "[launch] no health verdict at" in res.stdout and "does not train" in res.stdout, res.stdout
