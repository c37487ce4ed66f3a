"""azcopy_probe on the node: runs `<azcopy> --version` (also in check mode) and decides, with
the stage role's messages; a missing azcopy is a result (to be installed), not a failure."""

from __future__ import annotations

import json

import azcopy_probe
import pytest
from ansible_compat import patch_module_args


def run(args: dict, capsys) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        azcopy_probe.main()
    return json.loads(capsys.readouterr().out)


def fake_azcopy(tmp_path, out: str, rc: int = 0):
    path = tmp_path / "azcopy"
    path.write_text(f"#!/bin/sh\necho '{out}'\nexit {rc}\n")
    path.chmod(0o755)
    return str(path)


def test_the_pinned_version_needs_nothing_even_in_check_mode(tmp_path, capsys):
    out = run({"azcopy": fake_azcopy(tmp_path, "azcopy version 10.32.2"), "version": "10.32.2",
               "_ansible_check_mode": True}, capsys)
    assert not out.get("failed") and out["changed"] is False
    assert (out["needed"], out["src_kind"]) == (False, "file-binary")
    assert out["probe"] == {"rc": 0, "stdout": "azcopy version 10.32.2", "stderr": ""}
    assert "rc" not in out  # Ansible would fail a result whose rc is not 0


def test_a_missing_azcopy_is_to_be_installed_from_src(tmp_path, capsys):
    out = run({"azcopy": str(tmp_path / "none"), "version": "10.32.2",
               "src": "https://example.org/azcopy_linux_amd64_10.32.2.tar.gz"}, capsys)
    assert not out.get("failed"), out
    assert (out["needed"], out["src_kind"]) == (True, "url-archive")
    assert out["probe"]["rc"] == 2 and out["probe"]["stdout"] == ""


def test_nothing_to_install_from_is_refused_naming_what_runs(tmp_path, capsys):
    azcopy = fake_azcopy(tmp_path, "azcopy version 10.30.0")
    out = run({"azcopy": azcopy, "version": "10.32.2"}, capsys)
    assert out["failed"]
    assert out["msg"] == (f"azcopy 10.32.2 is not at {azcopy} (found: azcopy version 10.30.0) and stage_azcopy_src "
                          "is empty: set it to azcopy_linux_amd64_10.32.2.tar.gz (a path on the controller, or an "
                          "https URL with stage_azcopy_checksum).")


def test_install_off_refuses_an_azcopy_that_does_not_run(tmp_path, capsys):
    out = run({"azcopy": str(tmp_path / "none"), "version": "10.32.2", "install": False}, capsys)
    assert out["failed"]
    assert out["msg"] == f"azcopy does not run at {tmp_path / 'none'}:  (install it, or set stage_azcopy_install: true)."
