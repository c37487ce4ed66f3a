"""The amlhpc.azureml.template_cache callback in a real ansible-playbook run: the same output
with and without it, and the workers it forks compile none of a role's templates and
conditionals with it.

The run goes through a small launcher that counts, in each worker, the templates and
expressions Jinja compiles (it wraps Ansible's own compile steps before Ansible starts; the
cache calls them for what it does not have). Three hosts on the local connection, a role
whose defaults chain templates, a task argument that is a template, a keyword that is one,
a ``when`` and a ``register``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LAUNCHER = r'''
import os, sys, runpy
from ansible._internal._templating import _jinja_bits
from ansible.executor.process import worker
counts = {"n": 0}
compile_ = _jinja_bits.AnsibleEnvironment.compile
def counted(self, source, *args, **kwargs):
    if isinstance(source, str):
        counts["n"] += 1
    return compile_(self, source, *args, **kwargs)
_jinja_bits.AnsibleEnvironment.compile = counted
compile_expression_ = _jinja_bits.AnsibleEnvironment.compile_expression
def counted_expression(self, source, *args, **kwargs):
    counts["n"] += 1
    return compile_expression_(self, source, *args, **kwargs)
_jinja_bits.AnsibleEnvironment.compile_expression = counted_expression
run_ = worker.WorkerProcess.run
def run(self):
    counts["n"] = 0
    try:
        return run_(self)
    finally:
        with open(os.path.join(os.environ["COUNTS_DIR"], str(os.getpid())), "w") as out:
            out.write(f"{self._task.get_name()}\t{self._host.name}\t{counts['n']}\n")
worker.WorkerProcess.run = run
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''

PLAYBOOK = """
- name: Cache check
  hosts: nodes
  gather_facts: false
  roles:
    - role: probe
"""
DEFAULTS = """
probe_base: "{{ 'node' | upper }}"
probe_size: "{{ '16G' if 'h100' in probe_vm | lower else '8G' }}"
probe_vm: Standard_ND96isr_H100_v5
probe_line: "{{ probe_base }}-{{ inventory_hostname }}-{{ probe_size }}"
probe_check: "{{ probe_line is search('NODE') }}"
"""
TASKS = """
- name: Probe | Say what the node would get
  ansible.builtin.debug:
    msg: "{{ probe_line }} {{ probe_check | bool }} {{ probe_extra | default('none') | length }}"
  no_log: "{{ probe_quiet | default(false) | bool }}"
  when: probe_size != '0G' and probe_vm is string
  register: probe_said
"""


def run(tmp_path: Path, callbacks: str, name: str, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, int]]:
    project = tmp_path / "project"
    (project / "roles" / "probe" / "defaults").mkdir(parents=True, exist_ok=True)
    (project / "roles" / "probe" / "tasks").mkdir(parents=True, exist_ok=True)
    (project / "roles" / "probe" / "defaults" / "main.yml").write_text(DEFAULTS)
    (project / "roles" / "probe" / "tasks" / "main.yml").write_text(TASKS)
    (project / "site.yml").write_text(PLAYBOOK)
    (project / "hosts.yml").write_text(json.dumps({"nodes": {"hosts": {
        f"n{i}": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for i in range(3)}}}))
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    counts = tmp_path / name
    counts.mkdir()
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_CALLBACKS_ENABLED=callbacks,
               ANSIBLE_ROLES_PATH=str(project / "roles"), COUNTS_DIR=str(counts))
    playbook = Path(sys.executable).parent / "ansible-playbook"
    done = subprocess.run([sys.executable, str(launcher), str(playbook), "-i", str(project / "hosts.yml"),
                           str(project / "site.yml"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    compiled = {}
    for path in counts.iterdir():
        task, host, number = path.read_text().rstrip("\n").split("\t")
        compiled[f"{task}@{host}"] = int(number)
    return done, compiled


def messages(done: subprocess.CompletedProcess) -> dict[str, str]:
    report = json.JSONDecoder().raw_decode(done.stdout[done.stdout.index("{"):])[0]  # the timer's line follows
    task = report["plays"][0]["tasks"][0]
    return {host: result["msg"] for host, result in task["hosts"].items()}


def test_the_same_messages_and_no_compile_in_the_workers(tmp_path):
    plain, compiled_plain = run(tmp_path, "ansible.posix.timer", "plain")
    cached, compiled_cached = run(tmp_path, "ansible.posix.timer,amlhpc.azureml.template_cache", "cached")
    assert messages(plain) == messages(cached) == {
        f"n{i}": f"NODE-n{i}-16G True 4" for i in range(3)}
    assert len(compiled_plain) == len(compiled_cached) == 3  # one worker per node
    assert min(compiled_plain.values()) >= 6, compiled_plain  # without it every worker compiles them all
    assert set(compiled_cached.values()) == {0}, compiled_cached


def test_verbose_says_how_many_templates_the_main_process_compiled(tmp_path):
    done = run(tmp_path, "amlhpc.azureml.template_cache", "verbose", "-vvv")[0]
    assert "template_cache: " in done.stdout + done.stderr
    line = next(line for line in (done.stdout + done.stderr).splitlines() if "template_cache: " in line)
    assert int(line.split("template_cache: ")[1].split()[0]) >= 6, line
