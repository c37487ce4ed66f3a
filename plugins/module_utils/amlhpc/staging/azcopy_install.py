# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The stage role's checks before it touches a node, and whether azcopy needs installing.

What ``roles/stage`` decided with an assert, a set_fact and a second assert per node, as
plain functions: the ``azcopy_probe`` action and module call them inside the role's one
first task. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any


def stage_input_error(host: str, shard: Any, auth: str, has_sas: bool) -> str | None:
    """Why the stage cannot start on ``host`` (no shard in the plan, or auth sas without a
    SAS), in the role's words; None when it can."""
    if isinstance(shard, dict) and (auth != "sas" or has_sas):
        return None
    if auth == "sas" and not has_sas:
        return ("stage_sas is empty: set it from a vault or the environment, or stage with an identity "
                "(stage_auth: managed_identity).")
    return (f"No shard planned for {host}: run the role through playbooks/stage.yml, "
            "which plans the shards (azcopy_shards) first.")


def run_version(run_command: Callable[..., tuple[int, str, str]], azcopy: str) -> tuple[int, str, str]:
    """``<azcopy> --version`` through ``run_command`` (AnsibleModule's): exit status and output,
    as ansible.builtin.command returns them (trailing newlines stripped); one that cannot be
    started gives its error number and no output."""
    try:
        rc, out, err = run_command([azcopy, "--version"], handle_exceptions=False, errors="surrogate_or_replace")
    except OSError as exc:
        return exc.errno or 1, "", ""
    return rc, out.rstrip("\r\n"), err.rstrip("\r\n")


def src_kind(src: str) -> str:
    """``url-`` or ``file-``, then ``archive`` (.tar.gz, .tgz) or ``binary``: which install
    tasks ``stage_azcopy_src`` takes."""
    return (("url-" if re.match(r"https?://", src) else "file-")
            + ("archive" if re.search(r"\.(tar\.gz|tgz)$", src) else "binary"))


def install_decision(*, install: bool, version: str, src: str, path: str, rc: int, stdout: str,
                     stderr: str) -> dict[str, Any]:
    """From ``<path> --version``'s exit status and output: ``needed`` (azcopy is to be
    installed: install is on and the pinned version does not run there), ``src_kind`` and
    ``error``, the reason to refuse (nothing to install it from, or it does not run and
    install is off), else None."""
    needed = bool(install) and (rc != 0 or f"version {version}" not in stdout)
    error = None
    if not ((needed and src) or (not needed and rc == 0)):
        if install:
            error = (f"azcopy {version} is not at {path} (found: {stdout or 'nothing'}) and stage_azcopy_src is "
                     f"empty: set it to azcopy_linux_amd64_{version}.tar.gz (a path on the controller, or an "
                     "https URL with stage_azcopy_checksum).")
        else:
            error = f"azcopy does not run at {path}: {stderr.strip()} (install it, or set stage_azcopy_install: true)."
    return {"needed": needed, "src_kind": src_kind(src), "error": error}


def probe_install(run_command: Callable[..., tuple[int, str, str]], *, azcopy: str, install: bool, version: str,
                  src: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``<azcopy> --version`` and the install decision on it, as the stage role takes them:
    the decision (``install_decision``) and what was found (``rc``, ``stdout``, ``stderr``, to
    return as ``probe``: not at the top of a result, where Ansible fails an ``rc`` not 0)."""
    rc, out, err = run_version(run_command, azcopy)
    decision = install_decision(install=install, version=version, src=src, path=azcopy, rc=rc, stdout=out,
                                stderr=err)
    return decision, {"rc": rc, "stdout": out, "stderr": err}
