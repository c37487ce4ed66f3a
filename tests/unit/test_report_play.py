"""The report play writes into the project folder (amlhpc_project_dir), never next to the
playbooks: from an installed collection (an execution environment's, read-only) those lie
inside the collection."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_cli import ansible_cli

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """A project folder of a user's and an inventory of the controller only that points at it."""
    project = tmp_path / "project"
    project.mkdir()
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"amlhpc_project_dir": str(project), "local_blob_enabled": False}}}))
    return project, inv


def test_a_run_without_a_job_writes_its_report_into_the_project_folder(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"amlhpc_project_dir": str(project)}}}))
    before = set((ROOT / "outputs").rglob("*")) if (ROOT / "outputs").exists() else set()
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), str(ROOT / "playbooks" / "report.yml")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (project / "outputs" / "cosmoflow" / "report.html").is_file()
    assert f"report: {project}/outputs/cosmoflow/report.html" in res.stdout
    after = set((ROOT / "outputs").rglob("*")) if (ROOT / "outputs").exists() else set()
    assert after == before


def test_the_page_is_written_by_the_action_with_no_module_run_and_not_in_check_mode(tmp_path):
    project, inv = _project(tmp_path)

    def play(*args: str) -> subprocess.CompletedProcess:
        res = subprocess.run([ANSIBLE_PLAYBOOK, "-vvv", "-i", str(inv), str(ROOT / "playbooks" / "report.yml"), *args],
                             cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        return res

    page = project / "outputs" / "cosmoflow" / "report.html"
    check = play("--check")
    assert not page.parent.exists()
    # Check mode names no page it did not write (issue 47: it said "report: <page>" all the same).
    assert f"report: {page}" not in check.stdout
    assert "report: none written in check mode" in check.stdout
    run = play()
    assert page.is_file() and page.read_text().startswith("<!DOCTYPE html>")
    # No module went anywhere: the folder and the page are the action's (no file, stat or copy run).
    # (-vvv names each module file Ansible sends, pipelined or not.)
    assert "Using module file" not in check.stdout + run.stdout, [
        line for line in (check.stdout + run.stdout).splitlines() if "Using module file" in line][:5]


def test_the_page_is_refused_off_the_controller(tmp_path):
    playbook = tmp_path / "p.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "connection": "ssh",
                                         "tasks": [{"amlhpc.azureml.report_file": {
                                             "dest": str(tmp_path / "r.html"), "content": "x"}}]}]))
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", str(playbook)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0
    assert "report_file writes on the controller" in res.stdout and "connection is 'ssh'" in res.stdout, res.stdout
    assert not (tmp_path / "r.html").exists()


def test_each_invocation_keeps_its_page_and_report_html_points_at_the_latest(tmp_path):
    """A partial run (--tags stage) writes a page of its own: the whole run's page stays, and
    the stable path report.html follows the latest."""
    project, inv = _project(tmp_path)

    def play(*args: str) -> subprocess.CompletedProcess:
        res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), str(ROOT / "playbooks" / "report.yml"), *args],
                             cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        return res

    run_dir = project / "outputs" / "cosmoflow"
    whole = play()
    partial = play("--tags", "stage")
    pages = sorted(p.name for p in (run_dir / "reports").iterdir())
    assert len(pages) == 2 and pages[0].endswith("-all.html") != pages[1].endswith("-all.html"), pages
    (whole_page,) = [p for p in pages if p.endswith("-all.html")]
    (partial_page,) = [p for p in pages if p.endswith("-stage.html")]
    assert (run_dir / "report.html").is_symlink()
    assert (run_dir / "report.html").resolve() == (run_dir / "reports" / partial_page).resolve()
    assert f"report: {run_dir}/report.html (this run: reports/{whole_page})" in whole.stdout
    assert f"(this run: reports/{partial_page})" in partial.stdout
    assert (run_dir / "reports" / whole_page).read_text().startswith("<!DOCTYPE html>")


def test_two_runs_in_the_same_second_keep_two_pages(tmp_path):
    """Issue 40 item 7: two report plays started together (the same second, the same tags) each
    keep a page of their own; on 2.1.0 the second replaced the first (named by the second)."""
    project, inv = _project(tmp_path)
    cmd = [ANSIBLE_PLAYBOOK, "-i", str(inv), str(ROOT / "playbooks" / "report.yml")]
    runs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _run in range(3)]
    outs = [r.communicate(timeout=300)[0] for r in runs]
    assert all(r.returncode == 0 for r in runs), outs
    pages = sorted((project / "outputs" / "cosmoflow" / "reports").iterdir())
    assert len(pages) == 3, [p.name for p in pages]
    said = sorted(re.search(r"this run: reports/(\S+)\)", out).group(1) for out in outs)
    assert said == [p.name for p in pages]


def _failing_stage(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    project = _project(tmp_path)[0]
    extra = tmp_path / "x.yml"
    # The local default, its stage pointed at a port where nothing answers: the stage phase fails
    # on the only node, which ends the run before the Report play.
    extra.write_text(yaml.safe_dump({"amlhpc_project_dir": str(project), "local_blob_enabled": False,
                                     "stage_account_url": "http://127.0.0.1:9/devstoreaccount1",
                                     "stage_list": True}))
    res = subprocess.run([ANSIBLE_PLAYBOOK, "site.yml", "--tags", "stage", "-e", f"@{extra}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    return res, project / "outputs" / "cosmoflow-local"  # the local default's submit_name


def test_a_failed_run_gets_a_page_that_says_where_it_failed(tmp_path):
    res, run_dir = _failing_stage(tmp_path)
    assert res.returncode != 0, res.stdout[-3000:]
    assert "PLAY [Report]" not in res.stdout  # the run ended at the stage: the Report play never ran
    page = (run_dir / "report.html").read_text()
    assert "failed at stage" in page and "Stage | Plan each node" in page, page[:3000]
    assert "local-0" in page
    assert re.search(r"report: \S+/report\.html \(this run: reports/\S+\.html\)", res.stdout), res.stdout[-3000:]
