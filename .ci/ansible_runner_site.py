#!/usr/bin/env python3
"""Run the project's playbooks through ansible-runner, the way a CI pipeline would.

    .venv/bin/python .ci/ansible_runner_site.py [--playbook site.yml] [--inventory PATH]
        [--tags T1,T2] [--limit PATTERN] [--extra-vars-file FILE] [--private-data-dir DIR]
        [--project-dir DIR]

It prints a one-line summary per host and writes ``summary.json`` (status, rc, per-host
stats, failed tasks) into the artifacts folder of the run; the exit code is the
playbook's. Pass secrets with ``--extra-vars-file`` from a file the pipeline's secret store
writes, never on the command line. ``--project-dir`` names the project folder the run uses (its
``ansible.cfg``, playbooks and inventory; what the run writes, ``outputs/`` and ``.cache/``, goes
under it); by default the checkout that holds this script.

Nothing secret is written into the private data dir, however often it runs:

* the extra-vars file is handed to ansible-playbook as ``-e @<your file>`` (ansible-runner's
  ``cmdline``); it is neither copied into ``env/extravars`` (where ansible-runner would replay it
  on every later run) nor put on the argv that ``artifacts/<id>/command`` records;
* ansible-runner records the whole environment of the run (``AZURE_SECRET`` and the rest) in
  ``artifacts/<id>/command``: it writes its artifacts into a private temporary folder, and what
  is kept under ``artifacts/<id>`` is a copy without the environment, every file redacted
  (``azcopy_sas.redact``) of the extra vars' and the environment's secret values and of any SAS
  signature or account key; the temporary folder is removed;
* ``env/`` files are not written (``suppress_env_files``), and those a previous version left
  (``env/extravars``, ``env/envvars``, ``env/cmdline``) are removed, as are the environment and
  inline extra vars of the ``command`` files of its older runs.

The same from Python::

    outcome = run_playbook("site.yml", private_data_dir=".cache/runner", extravars_file="secrets.yml")
    print(outcome.status, outcome.rc, outcome.stats, outcome.artifact_dir)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from amlhpc.staging.azcopy_sas import redact  # noqa: E402  (the collection's one redaction)

# Names of variables (extra vars, the environment) whose values are secrets.
SECRET_NAME = re.compile(r"(?i)(secret|sas|key|token|password|passwd|credential|signature|connection_string)")
LEFT_BY_OLD_VERSIONS = ("extravars", "envvars", "cmdline", "passwords", "settings")
KEEP_RUNS = 5


@dataclass
class RunOutcome:
    """A finished run: what ansible-runner said, and where its (redacted) artifacts are."""

    status: str
    rc: int
    stats: dict[str, Any] | None
    events: list[dict[str, Any]] = field(default_factory=list)
    artifact_dir: str = ""


def secret_values(extravars: Any = None, environ: dict[str, str] | None = None) -> list[str]:
    """The values to keep out of the artifacts: every string of a secret-looking extra var (at
    any depth), any extra-var string that holds a SAS, and secret-looking environment values."""
    found: list[str] = []

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, secret or bool(SECRET_NAME.search(str(key))))
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, secret)
        elif isinstance(value, str) and (secret or "sig=" in value.lower()):
            found.append(value)

    walk(extravars or {}, False)
    for name, value in (environ or {}).items():
        if SECRET_NAME.search(name) and value:
            found.append(value)
    return [v for v in found if len(v) >= 8]


def clean_private_data_dir(pdd: Path, secrets: list[str]) -> None:
    """Remove what earlier versions of this entry left there: ``env/extravars`` (the extra-vars
    file copied in clear, replayed on every run), ``env/envvars``, ``env/cmdline``; and the
    environment and inline extra vars of older runs' ``command`` files."""
    for name in LEFT_BY_OLD_VERSIONS:
        (pdd / "env" / name).unlink(missing_ok=True)
    for command in (pdd / "artifacts").glob("*/command"):
        try:
            data = json.loads(command.read_text())
        except (OSError, ValueError):
            command.unlink(missing_ok=True)
            continue
        data.pop("env", None)
        argv = list(data.get("command") or [])
        data["command"] = [("REDACTED" if i and argv[i - 1] in ("-e", "--extra-vars") and not a.startswith("@")
                            else redact(a, secrets)) for i, a in enumerate(argv)]
        command.write_text(json.dumps(data))
    for path in (pdd / "artifacts").rglob("*"):
        if path.is_file() and path.name != "command":
            text = path.read_text(errors="replace")
            clean = redact(text, secrets)
            if clean != text:
                path.write_text(clean)


def _keep(raw: Path, kept: Path, secrets: list[str]) -> None:
    """Copy a run's artifacts without its environment, every text redacted."""
    kept.mkdir(parents=True, mode=0o700, exist_ok=True)
    for path in sorted(raw.rglob("*")):
        target = kept / path.relative_to(raw)
        if path.is_dir():
            target.mkdir(parents=True, mode=0o700, exist_ok=True)
            continue
        if path.name == "command" and path.parent == raw:
            data = json.loads(path.read_text())
            data.pop("env", None)
            data["command"] = [redact(a, secrets) for a in data.get("command") or []]
            text = json.dumps(data)
        else:
            text = redact(path.read_text(errors="replace"), secrets)
        target.write_text(text)
        os.chmod(target, 0o600)


def _rotate(artifacts: Path, keep: int = KEEP_RUNS) -> None:
    runs = sorted((p for p in artifacts.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for old in runs[:-keep] if keep else runs:
        shutil.rmtree(old, ignore_errors=True)


def run_playbook(playbook: str = "site.yml", inventory: str | None = None, tags: str | None = None,
                 limit: str | None = None, extravars: dict[str, Any] | None = None,
                 private_data_dir: str | None = None, quiet: bool = False,
                 extravars_file: str | None = None, project_dir: str | None = None) -> RunOutcome:
    """Run ``playbook`` with ansible-runner (module docstring): ``extravars_file`` is handed over
    by reference; ``extravars`` (a dict, from Python) through a private temporary file. The run
    uses ``project_dir`` (default: the checkout that holds this script): its ansible.cfg, its
    playbooks and inventory, and what the run writes lands under it."""
    import ansible_runner
    import yaml

    project = Path(project_dir).resolve() if project_dir else ROOT
    pdd = Path(private_data_dir or project / ".cache" / "runner").resolve()
    pdd.mkdir(parents=True, exist_ok=True)
    file_vars = yaml.safe_load(Path(extravars_file).read_text()) if extravars_file else {}
    secrets = secret_values({"file": file_vars, "inline": extravars}, dict(os.environ))
    clean_private_data_dir(pdd, secrets)
    bindir = str(Path(sys.executable).parent)
    envvars = {
        "ANSIBLE_CONFIG": str(project / "ansible.cfg"),
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONUNBUFFERED": "1",
    }
    scratch = Path(tempfile.mkdtemp(prefix="amlhpc-runner-"))  # 0700: the raw artifacts, the inline vars
    try:
        cmdline = []
        if extravars_file:
            cmdline += ["-e", "@" + str(Path(extravars_file).resolve())]
        if extravars:
            inline = scratch / "extravars.json"
            inline.write_text(json.dumps(extravars))
            os.chmod(inline, 0o600)
            cmdline += ["-e", f"@{inline}"]
        kwargs: dict[str, Any] = {
            "private_data_dir": str(pdd),
            "artifact_dir": str(scratch / "artifacts"),
            "project_dir": str(project),
            "playbook": playbook,
            "inventory": str(Path(inventory or project / "inventory" / "local").resolve()),
            "envvars": envvars,
            "quiet": quiet,
            "suppress_env_files": True,
        }
        if cmdline:
            kwargs["cmdline"] = shlex.join(cmdline)
        if tags:
            kwargs["tags"] = tags
        if limit:
            kwargs["limit"] = limit
        runner = ansible_runner.run(**kwargs)
        raw = Path(runner.config.artifact_dir)
        kept = pdd / "artifacts" / raw.name
        _keep(raw, kept, secrets)
        events = json.loads(redact(json.dumps(list(runner.events)), secrets))
        outcome = RunOutcome(status=runner.status, rc=int(runner.rc or 0), stats=runner.stats, events=events,
                             artifact_dir=str(kept))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _rotate(pdd / "artifacts")
    return outcome


def summarize(runner: RunOutcome) -> dict[str, Any]:
    """Status, rc, per-host stats and the failed tasks of a finished run (messages redacted)."""
    failed = [
        {"host": e["event_data"].get("host"), "task": e["event_data"].get("task"),
         "msg": redact(str((e["event_data"].get("res") or {}).get("msg")))}
        for e in runner.events if e.get("event") == "runner_on_failed"
        and not e["event_data"].get("ignore_errors")
    ]
    return {"status": runner.status, "rc": runner.rc, "stats": runner.stats, "failed_tasks": failed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--playbook", default="site.yml")
    parser.add_argument("--inventory")
    parser.add_argument("--tags")
    parser.add_argument("--limit")
    parser.add_argument("--extra-vars-file", help="YAML/JSON file of extra vars (e.g. written by the secret store); "
                                                  "handed to ansible-playbook as -e @FILE, never copied")
    parser.add_argument("--private-data-dir")
    parser.add_argument("--project-dir", help="the project folder (its ansible.cfg, playbooks, inventory; outputs/ and "
                                              ".cache/ written under it); default: the checkout holding this script")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    outcome = run_playbook(args.playbook, args.inventory, args.tags, args.limit, None,
                           args.private_data_dir, args.quiet, extravars_file=args.extra_vars_file,
                           project_dir=args.project_dir)
    summary = summarize(outcome)
    Path(outcome.artifact_dir, "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    for host in sorted({h for s in (outcome.stats or {}).values() if isinstance(s, dict) for h in s}):
        counts = {k: v.get(host, 0) for k, v in (outcome.stats or {}).items() if isinstance(v, dict)}
        print(f"{host}: ok={counts.get('ok', 0)} changed={counts.get('changed', 0)} "
              f"failed={counts.get('failures', 0)} unreachable={counts.get('dark', 0)} skipped={counts.get('skipped', 0)}")
    print(f"ansible-runner: {summary['status']} rc={summary['rc']} artifacts={outcome.artifact_dir}")
    return int(outcome.rc or 0)


if __name__ == "__main__":
    sys.exit(main())
