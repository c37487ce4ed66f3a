#!/usr/bin/env python3
"""Run the project's playbooks through ansible-runner, the way a CI pipeline would.

    .venv/bin/python .ci/ansible_runner_site.py [--playbook site.yml] [--inventory PATH]
        [--tags T1,T2] [--limit PATTERN] [--extra-vars-file FILE] [--private-data-dir DIR]

It prints a one-line summary per host and writes ``summary.json`` (status, rc, per-host
stats, failed tasks) into the artifacts folder of the run; the exit code is the
playbook's. Secrets stay out of the artifacts because the modules that take one declare it
``no_log`` (Ansible masks it in every result) and redact it from their messages; pass them with ``--extra-vars-file`` from a file
the pipeline's secret store writes, never on the command line.

The same from Python::

    import ansible_runner
    r = ansible_runner.run(private_data_dir=".cache/runner", project_dir=".", playbook="site.yml",
                           inventory="inventory/local", envvars={"ANSIBLE_CONFIG": "ansible.cfg"})
    print(r.status, r.rc, r.stats)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_playbook(playbook: str = "site.yml", inventory: str | None = None, tags: str | None = None,
                 limit: str | None = None, extravars: dict[str, Any] | None = None,
                 private_data_dir: str | None = None, quiet: bool = False):
    """Run ``playbook`` with ansible-runner; return the Runner (``.status``, ``.rc``, ``.events``, ``.stats``)."""
    import ansible_runner

    pdd = Path(private_data_dir or ROOT / ".cache" / "runner")
    pdd.mkdir(parents=True, exist_ok=True)
    bindir = str(Path(sys.executable).parent)
    envvars = {
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONUNBUFFERED": "1",
    }
    kwargs: dict[str, Any] = {
        "private_data_dir": str(pdd),
        "project_dir": str(ROOT),
        "playbook": playbook,
        "inventory": str(Path(inventory or ROOT / "inventory" / "local").resolve()),
        "envvars": envvars,
        "quiet": quiet,
        "rotate_artifacts": 5,
    }
    if tags:
        kwargs["tags"] = tags
    if limit:
        kwargs["limit"] = limit
    if extravars:
        kwargs["extravars"] = extravars
    return ansible_runner.run(**kwargs)


def summarize(runner) -> dict[str, Any]:
    """Status, rc, per-host stats and the failed tasks of a finished run."""
    failed = [
        {"host": e["event_data"].get("host"), "task": e["event_data"].get("task"),
         "msg": (e["event_data"].get("res") or {}).get("msg")}
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
    parser.add_argument("--extra-vars-file", help="YAML/JSON file of extra vars (e.g. written by the secret store)")
    parser.add_argument("--private-data-dir")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    extravars = None
    if args.extra_vars_file:
        import yaml
        extravars = yaml.safe_load(Path(args.extra_vars_file).read_text())
    runner = run_playbook(args.playbook, args.inventory, args.tags, args.limit, extravars,
                          args.private_data_dir, args.quiet)
    summary = summarize(runner)
    Path(runner.config.artifact_dir, "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    for host in sorted({h for s in (runner.stats or {}).values() if isinstance(s, dict) for h in s}):
        counts = {k: v.get(host, 0) for k, v in (runner.stats or {}).items() if isinstance(v, dict)}
        print(f"{host}: ok={counts.get('ok', 0)} changed={counts.get('changed', 0)} "
              f"failed={counts.get('failures', 0)} unreachable={counts.get('dark', 0)} skipped={counts.get('skipped', 0)}")
    print(f"ansible-runner: {summary['status']} rc={summary['rc']} artifacts={runner.config.artifact_dir}")
    return int(runner.rc or 0)


if __name__ == "__main__":
    sys.exit(main())
