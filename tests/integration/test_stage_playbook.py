"""playbooks/stage.yml on the local default against Azurite: plan, install check, stage, rerun."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from project_copy import project_env
from staging_helpers import ROOT, assert_identical_subset, staged_files, upload_dataset

from amlhpc.data.cosmoflow_data import generate


@pytest.fixture(scope="module")
def pb_dataset(azurite, tmp_path_factory):
    base = tmp_path_factory.mktemp("pb")
    generate(str(base / "raw"), train_universes=1, val_universes=1, cube=8)
    return upload_dataset(azurite, base / "raw", base / "gz", "pbdata", "cosmoflow/v07")


def run_playbook(project: Path, playbook: str, extra: dict, env_extra: dict, *args: str) -> subprocess.CompletedProcess:
    """``playbook`` run in the test's own project folder (tests/project_copy.py): its report pages
    and outputs/<run> land there, never in the checkout's."""
    env = project_env(project, ANSIBLE_FORCE_COLOR="0", ANSIBLE_STDOUT_CALLBACK="default", **env_extra)
    cmd = [str(project / ".venv" / "bin" / "ansible-playbook"), str(project / playbook), "-e", json.dumps(extra), *args]
    return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=240, check=False)


def recap(out: str) -> dict[str, int]:
    m = re.search(r"local-0\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out)
    assert m, out[-3000:]
    return {"ok": int(m[1]), "changed": int(m[2]), "failed": int(m[4])}


def test_stage_playbook_stages_reruns_clean_and_never_shows_the_sas(azurite, pb_dataset, tmp_path, project):
    sas = azurite.container_sas(pb_dataset.container, "rl")
    signature = re.search(r"sig=([^&]+)", sas)[1]
    stage_dir = tmp_path / "stage"
    extra = {"stage_account_url": azurite.endpoint, "stage_container": pb_dataset.container,
             "stage_prefix": pb_dataset.prefix, "stage_mode": "balanced", "stage_dir": str(stage_dir),
             "stage_sas": "{{ lookup('ansible.builtin.env', 'TEST_STAGE_SAS') }}"}
    env = {"TEST_STAGE_SAS": sas}

    check = run_playbook(project, "playbooks/stage.yml", extra, env, "--check")
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    assert not stage_dir.joinpath(".amlhpc-staged").exists()

    first = run_playbook(project, "playbooks/stage.yml", extra, env, "-v")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert recap(first.stdout)["changed"] >= 1
    assert "balanced mode: 128 files" in first.stdout and "imbalance 1.0" in first.stdout
    assert "128 files" in first.stdout and "0 already there" in first.stdout
    assert sorted(assert_identical_subset(stage_dir, pb_dataset)) == pb_dataset.names

    second = run_playbook(project, "playbooks/stage.yml", extra, env)
    assert second.returncode == 0, second.stdout[-3000:]
    assert recap(second.stdout)["changed"] == 0

    # A prefix typo with pruning on: the plan is refused in one sentence, nothing is removed.
    typo = run_playbook(project, "playbooks/stage.yml", {**extra, "stage_prefix": "nothing-here", "stage_prune": True}, env)
    said = " ".join(typo.stdout.split())
    assert typo.returncode != 0, typo.stdout[-3000:]
    assert (f"container '{pb_dataset.container}' has no blobs under prefix 'nothing-here', so every node's shard "
            "would be empty and nothing was staged or removed: check stage_container and stage_prefix, or set "
            "stage_allow_empty: true if an empty data set is what you mean.") in said, typo.stdout[-3000:]
    assert sorted(assert_identical_subset(stage_dir, pb_dataset)) == pb_dataset.names
    for out in (check, first, second, typo):
        assert signature not in out.stdout + out.stderr


def test_stage_playbook_refuses_an_expired_sas_in_one_sentence(azurite, pb_dataset, tmp_path, project):
    expired = azurite.container_sas(pb_dataset.container, "rl", hours=-0.05, start_offset_hours=-1)
    extra = {"stage_account_url": azurite.endpoint, "stage_container": pb_dataset.container,
             "stage_prefix": pb_dataset.prefix, "stage_dir": str(tmp_path / "s"),
             "stage_sas": "{{ lookup('ansible.builtin.env', 'TEST_STAGE_SAS') }}", "amlhpc_no_log": False}
    out = run_playbook(project, "playbooks/stage.yml", extra, {"TEST_STAGE_SAS": expired})
    assert out.returncode != 0
    assert re.search(r"The SAS token expired at \d{4}-\d\d-\d\d \d\d:\d\d UTC: generate a new one \(read and list\) "
                     r"and run again\.", out.stdout), out.stdout[-3000:]


def two_nodes(azurite, data, tmp_path, **group_vars) -> tuple[Path, dict, dict]:
    """Two nodes on the local connection, each its own stage folder; the inventory, the extra
    variables and the environment (the SAS) of a playbooks/stage.yml run."""
    python = os.path.realpath(str(ROOT / ".venv" / "bin" / "python"))
    node_vars = {"ansible_connection": "local", "ansible_python_interpreter": python, "stage_become": False,
                 "stage_azcopy_install": False, "stage_azcopy_path": str(ROOT / ".tools" / "bin" / "azcopy"),
                 **group_vars}
    hosts = {f"local-{i}": {"aml_node_rank": i, "stage_dir": str(tmp_path / f"s{i}")} for i in range(2)}
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"all": {"vars": node_vars, "children": {"aml_nodes": {"hosts": hosts}}}}))
    extra = {"stage_account_url": azurite.endpoint, "stage_container": data.container, "stage_prefix": data.prefix,
             "stage_mode": "balanced", "stage_sas": "{{ lookup('ansible.builtin.env', 'TEST_STAGE_SAS') }}"}
    return inv, extra, {"TEST_STAGE_SAS": azurite.container_sas(data.container, "rl")}


def test_a_rerun_costs_each_node_four_host_tasks(azurite, pb_dataset, tmp_path, project):
    """Controller CPU goes per host-task, a node's CPU per module run (docs/performance.md): on
    a run with nothing to do the role is Ansible's check of its variables, one shell command
    per node that lists its stage folder (for the exact handoff, decided on the controller),
    one task per node that probes azcopy and stages in one module run, and the set_fact that
    keeps its answer; the role then ends for the node in the strategy (meta end_role: no
    install task to skip); the plan, the handoff and the report table are run once."""
    inv, extra, env = two_nodes(azurite, pb_dataset, tmp_path)
    first = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(inv))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    second = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(inv))
    assert second.returncode == 0, second.stdout[-3000:]
    tail = second.stdout[second.stdout.index("PLAY RECAP"):]
    counts = {}
    for host in ("local-0", "local-1"):
        m = re.search(rf"^{host}\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0\s+skipped=(\d+)", tail, re.M)
        assert m, tail
        counts[host] = (int(m[1]) + int(m[3]), int(m[2]))
    # local-1 runs the role's four; local-0 also the run-once ones (plan, show, handoff, report,
    # and the check-mode line, skipped)
    tasks = re.findall(r"^TASK \[(.*)\]", second.stdout, re.M)
    assert counts["local-1"][0] == 4 and counts["local-0"][0] <= counts["local-1"][0] + 5, (counts, tasks)
    assert "Install azcopy, then copy" not in second.stdout, second.stdout[-3000:]
    assert second.stdout.count("TASK [amlhpc.azureml.stage : Stage | Report every node's stage]") == 1
    assert counts["local-0"][1] == counts["local-1"][1] == 0, counts
    # each node's line, in one table
    for i in range(2):
        assert re.search(rf"local-{i}: \d+ files, 0 fetched .*GB on disk.*already there", second.stdout), \
            second.stdout[-3000:]
    assert re.search(r"sig=", second.stdout + second.stderr) is None


def test_a_rerun_reads_each_node_with_one_shell_command_not_a_module_run(azurite, pb_dataset, tmp_path, project):
    """On a rerun the stage's action reads each node with one shell command (azcopy --version
    and one digest of the stage folder, plugins/module_utils/amlhpc/staging/stage_read.py) and,
    where the folder holds exactly the node's shard, returns the module's result without
    running it. A node whose folder drifted runs the module, which repairs it; a SAS
    warning is still shown."""
    inv, extra, env = two_nodes(azurite, pb_dataset, tmp_path)
    python = os.path.realpath(str(ROOT / ".venv" / "bin" / "python"))

    def module_runs(out: str) -> int:
        return len(re.findall(rf"EXEC /bin/sh -c '?{re.escape(python)}", out))  # pipelined: unquoted

    first = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(inv), "-vvv")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert module_runs(first.stdout) == 2
    second = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(inv), "-vvv")
    assert second.returncode == 0, second.stdout[-3000:]
    assert re.findall(r"^local-\d\s+: ok=\d+\s+changed=(\d+)", second.stdout, re.M) == ["0", "0"]
    assert module_runs(second.stdout) == 0, second.stdout[-3000:]
    for i in range(2):
        assert re.search(rf"local-{i}: \d+ files, 0 fetched \(0 repaired\), 0 gone .*already there", second.stdout)

    gone = sorted((tmp_path / "s1").rglob("*.tfrecord"))[0]
    gone.unlink()
    third = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(inv), "-vvv")
    assert third.returncode == 0, third.stdout[-3000:]
    assert module_runs(third.stdout) == 1  # local-1's, which fetches the file again
    assert re.findall(r"^local-\d\s+: ok=\d+\s+changed=(\d+)", third.stdout, re.M) == ["0", "1"]
    assert gone.is_file()

    wide = {"TEST_STAGE_SAS": azurite.container_sas(pb_dataset.container, "racwdl")}
    fourth = run_playbook(project, "playbooks/stage.yml", extra, wide, "-i", str(inv), "-vvv")
    assert fourth.returncode == 0, fourth.stdout[-3000:]
    assert module_runs(fourth.stdout) == 0
    assert "The SAS token grants more than read and list" in fourth.stdout + fourth.stderr
    for out in (first, second, third, fourth):
        assert re.search(r"sig=[^&'\s]", out.stdout + out.stderr) is None


def test_a_wrong_variable_stops_every_node_before_it_acts(azurite, pb_dataset, tmp_path, project):
    """The role's argument check, inside its first task (the role is imported without
    Ansible's own), names the variable, and nothing is staged."""
    inv, extra, env = two_nodes(azurite, pb_dataset, tmp_path)
    out = run_playbook(project, "playbooks/stage.yml", {**extra, "stage_verify": "maybe"}, env, "-i", str(inv))
    assert out.returncode != 0
    assert "Validation of arguments failed" in out.stdout and "stage_verify" in out.stdout, out.stdout[-3000:]
    for host in ("local-0", "local-1"):
        assert re.search(rf"^{host}\s+: .*changed=0 .*failed=1 ", out.stdout, re.M), out.stdout[-2000:]
    assert not (tmp_path / "s0").exists() and not (tmp_path / "s1").exists()


def test_no_azcopy_and_nothing_to_install_it_from_is_refused_by_name(azurite, pb_dataset, tmp_path, project):
    missing = tmp_path / "bin" / "azcopy"
    inv, extra, env = two_nodes(azurite, pb_dataset, tmp_path, stage_azcopy_install=True,
                                stage_azcopy_path=str(missing))
    out = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(inv), "--check")
    assert out.returncode != 0
    assert (f"azcopy 10.32.2 is not at {missing} (found: nothing) and stage_azcopy_src is empty: set it to "
            "azcopy_linux_amd64_10.32.2.tar.gz (a path on the controller, or an https URL with "
            "stage_azcopy_checksum).") in out.stdout, out.stdout[-3000:]
    assert not (tmp_path / "s0").exists()


def test_check_mode_makes_no_stage_folder_and_diff_names_it(azurite, pb_dataset, tmp_path, project):
    inv, extra, env = two_nodes(azurite, pb_dataset, tmp_path)
    out = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(inv), "--check", "--diff")
    assert out.returncode == 0, out.stdout[-3000:]
    assert not (tmp_path / "s0").exists() and not (tmp_path / "s1").exists()
    for i in range(2):
        assert f'"path": "{tmp_path / f"s{i}"}",\n-    "state": "absent"\n+    "state": "directory"' in out.stdout, \
            out.stdout[-3000:]
    assert "Report every node's stage" in out.stdout and "GB on disk" not in out.stdout


def nodes_inventory(path: Path, hosts: dict[str, tuple[int, Path]], **group_vars) -> Path:
    """An inventory of local-connection nodes, each ``host: (aml_node_rank, stage_dir)``."""
    python = os.path.realpath(str(ROOT / ".venv" / "bin" / "python"))
    node_vars = {"ansible_connection": "local", "ansible_python_interpreter": python, "stage_become": False,
                 "stage_azcopy_install": False, "stage_azcopy_path": str(ROOT / ".tools" / "bin" / "azcopy"),
                 **group_vars}
    path.write_text(json.dumps({"all": {"vars": node_vars, "children": {"aml_nodes": {"hosts": {
        host: {"aml_node_rank": rank, "stage_dir": str(folder)} for host, (rank, folder) in hosts.items()}}}}}))
    return path


def host_recap(out: str, host: str) -> dict[str, int]:
    m = re.search(rf"^{host}\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M)
    assert m, out[-3000:]
    return {"ok": int(m[1]), "changed": int(m[2]), "failed": int(m[4])}


@pytest.mark.parametrize("mode", ["suffix", "balanced"])
def test_node_local_stages_hold_only_their_new_shard_after_a_node_is_removed(azurite, pb_dataset, tmp_path, project, mode):
    """Nodes replaced between runs, on node-local storage (BeeOND off): three nodes stage, the
    first leaves the cluster and the other two move up a rank. Each then holds its new shard
    and nothing of the other's: node-scope training refuses a file held by two nodes
    (workload/cosmoflow/partition.py), so a file handed to another node goes."""
    _unused, extra, env = two_nodes(azurite, pb_dataset, tmp_path)
    extra["stage_mode"] = mode
    folders = {f"aml-{i}": tmp_path / f"s{i}" for i in range(3)}
    three = nodes_inventory(tmp_path / "three.json", {h: (i, f) for i, (h, f) in enumerate(folders.items())})
    first = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(three))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    before = {h: set(staged_files(f)) for h, f in folders.items()}
    assert sum(map(len, before.values())) == len(pb_dataset.names)

    two = nodes_inventory(tmp_path / "two.json", {"aml-1": (0, folders["aml-1"]), "aml-2": (1, folders["aml-2"])})
    second = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(two), "-v")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
    held = {h: set(assert_identical_subset(folders[h], pb_dataset)) for h in ("aml-1", "aml-2")}
    assert not held["aml-1"] & held["aml-2"], sorted(held["aml-1"] & held["aml-2"])[:5]
    assert held["aml-1"] | held["aml-2"] == set(pb_dataset.names)
    handed = before["aml-1"] - held["aml-1"]
    assert handed, "the test needs the shrink to move files off aml-1"
    assert host_recap(second.stdout, "aml-1")["changed"] == 1
    assert re.search(rf"aml-1: .*{len(handed)} handed to other nodes \(removed\)", second.stdout), second.stdout[-3000:]

    third = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(two))
    assert third.returncode == 0, third.stdout[-3000:]
    assert host_recap(third.stdout, "aml-1")["changed"] == host_recap(third.stdout, "aml-2")["changed"] == 0


def test_a_shared_stage_keeps_every_file_when_the_nodes_change(azurite, pb_dataset, tmp_path, project):
    """On shared storage (BeeOND: every node stages into the same folder) a file another node's
    shard holds now is that node's file: nothing is removed when the cluster grows. The
    inventory says BeeOND is on, and stage_shared follows it."""
    _unused, extra, env = two_nodes(azurite, pb_dataset, tmp_path)
    extra["stage_mode"] = "balanced"
    shared = tmp_path / "shared"
    two = nodes_inventory(tmp_path / "two.json", {f"aml-{i}": (i, shared) for i in range(2)}, beeond_enabled=True)
    first = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(two))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    three = nodes_inventory(tmp_path / "three.json", {f"aml-{i}": (i, shared) for i in range(3)}, beeond_enabled=True)
    second = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(three))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
    assert sorted(assert_identical_subset(shared, pb_dataset)) == pb_dataset.names
    for host in ("aml-0", "aml-1"):
        assert host_recap(second.stdout, host)["changed"] == 0, second.stdout[-3000:]
    assert "handed to other nodes" not in second.stdout


def test_the_report_names_every_node_when_one_node_installs_azcopy(azurite, pb_dataset, tmp_path, project):
    """A node without the pinned azcopy gets it from the controller (a bare binary) and then
    stages; the per-node report still runs once, after the install, with every node's line
    and the SAS warning (before, both of its imports were skipped on such a run)."""
    inv, extra, env = two_nodes(azurite, pb_dataset, tmp_path)
    data = json.loads(inv.read_text())
    data["all"]["children"]["aml_nodes"]["hosts"]["local-1"].update(
        stage_azcopy_install=True, stage_azcopy_src=str(ROOT / ".tools" / "bin" / "azcopy"),
        stage_azcopy_install_dir=str(tmp_path / "opt-azcopy"), stage_azcopy_path=str(tmp_path / "bin" / "azcopy"),
        stage_azcopy_packages=[])
    inv.write_text(json.dumps(data))
    (tmp_path / "bin").mkdir()
    out = run_playbook(project, "playbooks/stage.yml", extra, env, "-i", str(inv))
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert (tmp_path / "bin" / "azcopy").is_symlink()
    blocks = [b.split("\nPLAY RECAP")[0] for b in out.stdout.split("\nTASK [")
              if b.startswith("amlhpc.azureml.stage : Stage | Report every node's stage]")]
    ran = [b for b in blocks if "ok: [" in b]
    assert len(blocks) == 2 and len(ran) == 1, blocks
    report = ran[0]
    for i in range(2):
        assert re.search(rf"local-{i}: \d+ files, \d+ fetched", report), report
