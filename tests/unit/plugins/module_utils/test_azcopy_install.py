"""The stage role's checks before it touches a node, and whether azcopy needs installing
(amlhpc.staging.azcopy_install): the decisions the role made with assert and set_fact tasks, in the
role's own words."""

from __future__ import annotations

import pytest

from amlhpc.staging.azcopy_install import install_decision, probe_install, src_kind, stage_input_error

SHARD = {"rank": 1, "mode": "balanced"}


def test_a_node_with_a_shard_and_a_sas_can_start():
    assert stage_input_error("n1", SHARD, "sas", True) is None
    assert stage_input_error("n1", SHARD, "managed_identity", False) is None


def test_a_missing_sas_is_named_before_a_missing_shard():
    msg = ("stage_sas is empty: set it from a vault or the environment, or stage with an identity "
           "(stage_auth: managed_identity).")
    assert stage_input_error("n1", SHARD, "sas", False) == msg
    assert stage_input_error("n1", None, "sas", False) == msg


@pytest.mark.parametrize("shard", [None, {}, "x"])
def test_a_node_without_a_shard_is_told_to_run_the_playbook(shard):
    msg = stage_input_error("n1", shard if shard != {} else None, "service_principal", False)
    assert msg == ("No shard planned for n1: run the role through playbooks/stage.yml, which plans the shards "
                   "(azcopy_shards) first.")


@pytest.mark.parametrize(("src", "kind"), [
    ("", "file-binary"),
    ("/srv/azcopy", "file-binary"),
    ("/srv/azcopy_linux_amd64_10.32.2.tar.gz", "file-archive"),
    ("https://example.org/azcopy.tgz", "url-archive"),
    ("http://example.org/azcopy", "url-binary"),
    ("files/https://x", "file-binary"),
])
def test_src_kind(src, kind):
    assert src_kind(src) == kind


def decide(**kw):
    args = {"install": True, "version": "10.32.2", "src": "/srv/azcopy", "path": "/usr/local/bin/azcopy",
            "rc": 0, "stdout": "azcopy version 10.32.2", "stderr": ""}
    args.update(kw)
    return install_decision(**args)


def test_the_pinned_version_running_needs_nothing():
    assert decide() == {"needed": False, "src_kind": "file-binary", "error": None}
    assert decide(src="") == {"needed": False, "src_kind": "file-binary", "error": None}


@pytest.mark.parametrize(("rc", "stdout"), [(0, "azcopy version 10.30.0"), (2, ""), (1, "azcopy version 10.32.2")])
def test_another_version_or_none_is_installed_from_src(rc, stdout):
    assert decide(rc=rc, stdout=stdout) == {"needed": True, "src_kind": "file-binary", "error": None}


def test_nothing_to_install_from_is_refused_with_what_was_found():
    assert decide(src="", stdout="azcopy version 10.30.0")["error"] == (
        "azcopy 10.32.2 is not at /usr/local/bin/azcopy (found: azcopy version 10.30.0) and stage_azcopy_src is "
        "empty: set it to azcopy_linux_amd64_10.32.2.tar.gz (a path on the controller, or an https URL with "
        "stage_azcopy_checksum).")
    assert "(found: nothing)" in decide(src="", rc=2, stdout="")["error"]


def test_install_off_takes_any_version_that_runs_and_refuses_one_that_does_not():
    assert decide(install=False, src="", stdout="azcopy version 10.1.0") == {
        "needed": False, "src_kind": "file-binary", "error": None}
    out = decide(install=False, rc=1, stdout="", stderr="  cannot execute binary file\n")
    assert out["needed"] is False
    assert out["error"] == ("azcopy does not run at /usr/local/bin/azcopy: cannot execute binary file "
                            "(install it, or set stage_azcopy_install: true).")


def test_probe_install_runs_azcopy_once_and_returns_the_decision_with_what_it_found():
    calls = []

    def run_command(argv, **kw):
        calls.append(argv)
        return 0, "azcopy version 10.30.0\n", ""
    decision, found = probe_install(run_command, azcopy="/opt/azcopy", install=True, version="10.32.2",
                                    src="/srv/azcopy_linux_amd64_10.32.2.tar.gz")
    assert calls == [["/opt/azcopy", "--version"]]
    assert decision == {"needed": True, "src_kind": "file-archive", "error": None}
    assert found == {"rc": 0, "stdout": "azcopy version 10.30.0", "stderr": ""}


def test_probe_install_of_an_azcopy_that_cannot_start_names_the_path():
    def run_command(argv, **kw):
        raise FileNotFoundError(2, "No such file or directory")
    decision, found = probe_install(run_command, azcopy="/opt/azcopy", install=False, version="10.32.2", src="")
    assert found == {"rc": 2, "stdout": "", "stderr": ""}
    assert decision["error"].startswith("azcopy does not run at /opt/azcopy")
