"""Where a run writes when the user sets no `amlhpc_project_dir`: the folder of the ansible.cfg
Ansible read (the project, as docs/ansible.cfg.example is copied into it), else `amlhpc/` in
Ansible's home (as the inventory's known_hosts); never the collection's own folder, which for an
installed collection (an execution environment's) is someone else's and may be read-only. Red on
2.1.0, whose defaults were the folder above the playbooks or the roles."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")
# What each role and the report derive from the project folder.
DERIVED = {
    "roles/healthcheck/defaults/main.yml": "healthcheck_verdict_file",
    "roles/submit/defaults/main.yml": "submit_output_dir",
    "roles/node_loss/defaults/main.yml": "node_loss_run_dir",
    "roles/local_blob/defaults/main.yml": "local_blob_project_dir",
}


def _run(tmp_path: Path, project: Path, config: Path | None) -> dict[str, str]:
    book = tmp_path / "show.yml"
    tasks = [{"ansible.builtin.include_vars": str(ROOT / f)} for f in DERIVED]
    tasks.append({"ansible.builtin.debug": {"msg": {v: f"{{{{ {v} }}}}" for v in DERIVED.values()}}})
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    # The test's own config and home; what else the environment holds stays (ansible-test's
    # injector needs its variables).
    env = {k: v for k, v in os.environ.items() if k not in ("ANSIBLE_CONFIG", "ANSIBLE_HOME")}
    env.update(HOME=str(tmp_path / "home"), ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               ANSIBLE_LOCALHOST_WARNING="false")
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(ROOT / ".cache" / "collections"))
    if config:
        env["ANSIBLE_CONFIG"] = str(config)
    (tmp_path / "home").mkdir(exist_ok=True)
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", str(book)], cwd=project, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    out = yaml.safe_load(res.stdout)
    return out["plays"][0]["tasks"][-1]["hosts"]["localhost"]["msg"]


def test_a_project_with_an_ansible_cfg_gets_what_the_run_writes(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "ansible.cfg").write_text((ROOT / "docs" / "ansible.cfg.example").read_text())
    got = _run(tmp_path, project, project / "ansible.cfg")
    for name, path in got.items():
        assert Path(path).resolve().is_relative_to(project.resolve()), (name, path)


def test_without_an_ansible_cfg_ansible_s_home_gets_it(tmp_path):
    project = tmp_path / "elsewhere"
    project.mkdir()
    got = _run(tmp_path, project, None)
    home = (tmp_path / "home" / ".ansible" / "amlhpc").resolve()
    for name, path in got.items():
        assert Path(path).resolve().is_relative_to(home), (name, path)
        assert not Path(path).resolve().is_relative_to(ROOT), (name, path)
