"""CI pipelines run the project through ansible-runner (.ci/ansible_runner_site.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import free_port
from project_copy import project_env
from report_reader import decode_svg, image_bytes, read_report, table_dicts

from amlhpc.azure import job_spec

ROOT = Path(__file__).resolve().parents[2]


def load_entry_point():
    spec = importlib.util.spec_from_file_location("ansible_runner_site", ROOT / ".ci" / "ansible_runner_site.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_local_default_through_ansible_runner(tmp_path, project):
    entry = load_entry_point()
    port = free_port()  # the local blob store's port: others may run the local default meanwhile
    runner = entry.run_playbook("site.yml", private_data_dir=str(tmp_path / "runner"), quiet=True,
                                extravars={"local_blob_port": port}, project_dir=str(project))
    summary = entry.summarize(runner)
    assert summary["status"] == "successful", json.dumps(summary, default=str)[:4000]
    assert summary["rc"] == 0 and summary["failed_tasks"] == []

    stats = runner.stats
    assert stats["failures"] == {} and stats["dark"] == {}
    assert stats["ok"]["local-0"] > 0 and stats["ok"]["localhost"] > 0

    events = list(runner.events)
    plays = [e["event_data"]["play"] for e in events if e["event"] == "playbook_on_play_start"]
    assert plays[:5] == ["Check the controller", "Check every role variable before anything changes",
                         "Cluster | Make sure the AmlCompute cluster exists at its fixed size",
                         "Validate that the inventory has cluster nodes",
                         "Validate the inventory and variables"]
    assert plays[-1] == "Report"
    ok_tasks = {e["event_data"]["task"] for e in events if e["event"] == "runner_on_ok"}
    assert "Stage | Check the inputs, probe azcopy and copy this node's shard" in ok_tasks
    assert "Submit | Run the training job (local)" in ok_tasks

    # The report is an event too: skipped phases with the switch that turned each off (the
    # local default's group_vars), the staging, the losses.
    report = next(e for e in events if e["event"] == "runner_on_ok"
                  and e["event_data"]["task"] == "Report | Summarise the run")
    lines = report["event_data"]["res"]["msg"]
    assert [line for line in lines if " skipped on " in line] == [
        "cluster: skipped on localhost: aml_cluster_manage is false",
        "ssh_trust: skipped on local-0: ssh_trust_enabled is false",
        "nvme_raid: skipped on local-0: nvme_raid_enabled is false",
        "gpu_clocks: skipped on local-0: gpu_clocks_enabled is false",
        "nccl: skipped on local-0: nccl_enabled is false",
        "beeond: skipped on local-0: beeond_enabled is false"]
    # A switched-off role sends no task to the node: no per-host "skipped because" line.
    role_tasks_on_node = {e["event_data"]["task"] for e in events
                          if e["event"] in ("runner_on_ok", "runner_on_skipped")
                          and e["event_data"].get("host") == "local-0"
                          and e["event_data"].get("role", "").rsplit(".", 1)[-1] in (
                              "ssh_trust", "nvme_raid", "gpu_clocks", "nccl", "beeond")}
    assert all(t.startswith("Validating arguments against arg spec") for t in role_tasks_on_node), \
        role_tasks_on_node
    assert any(line.startswith("stage: ") and " files, " in line for line in lines)
    assert any(line.startswith("training loss per epoch: ") for line in lines)

    # The HTML report: every section there, with a plot or the reason it has none.
    where = next(e for e in events if e["event"] == "runner_on_ok"
                 and e["event_data"]["task"] == "Report | Say where the HTML report is")
    page_path = Path(where["event_data"]["res"]["msg"].removeprefix("report: ").split(" (this run: ")[0])
    assert page_path == project / "outputs" / "cosmoflow-local" / "report.html"
    check_report(project, page_path.read_text(), lines, events)
    assert "nccl: skipped on local-0: nccl_enabled is false" in page_path.read_text()

    # No SAS signature anywhere in what the runner kept, nor in the report.
    artifacts = Path(runner.artifact_dir)
    for path in [*artifacts.rglob("*"), page_path]:
        if path.is_file():
            assert "sig=" not in path.read_text(errors="replace"), path

    # After that run, a second run changes nothing, on the node nor on the controller (Azurite,
    # the local default's scaffolding, starts and stops inside the run: no change left behind);
    # and check mode goes through the whole site.yml and changes nothing either.
    for extra in ([], ["--check", "--diff"]):
        again = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "site.yml", *extra,
                                "-e", f"local_blob_port={port}"],
                               cwd=project, env=project_env(project), capture_output=True, text=True, timeout=600,
                               check=False)
        assert again.returncode == 0, again.stdout[-4000:]
        recap = again.stdout.split("PLAY RECAP")[-1]
        for host in ("local-0", "localhost"):
            counts = re.search(rf"^{host}\s+: (.*)$", recap, re.M).group(1)
            assert "changed=0" in counts and "failed=0" in counts, (extra, host, counts, changed_tasks(again.stdout))


def changed_tasks(stdout: str) -> list[str]:
    """The tasks a run reported changed (TASK banners followed by a "changed:" line)."""
    found, task = [], ""
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith("changed:"):
            found.append(f"{task} {line}")
    return found


def check_report(project: Path, page: str, summary_lines: list[str], events: list[dict]) -> None:
    """report.html of the local default run in ``project`` against what the run measured."""
    sections = read_report(page)["sections"]
    for sid in ("staging", "health", "nccl", "fsbench", "training"):
        assert sid in sections, sid
        for src in sections[sid]["images"]:
            assert decode_svg(image_bytes(src))[0] > 0, sid

    # Staging: files and bytes on disk are the stage manifest's; seconds and what was already
    # there as in the text summary; a plot when azcopy fetched anything in this run.
    manifest = json.loads((project / ".scratch" / "cosmoflow" / ".amlhpc-staged" / "0.json").read_text())
    row = table_dicts(sections["staging"]["tables"][0])[0]
    assert (row["node"], int(row["files"]), int(row["bytes on disk"])) == (
        "local-0", len(manifest["files"]), sum(manifest["files"].values()))
    stage_line = next(line for line in summary_lines if line.startswith("stage: "))
    # The table and the line round the same measurement differently (2.15 s -> '2.15' and '2.2').
    line_seconds = float(re.search(r" in ([0-9.]+) s: ", stage_line).group(1))
    assert abs(float(row["seconds"]) - line_seconds) <= 0.051, (row, stage_line)
    already = re.search(r"; (\d+) file\(s\) were already there", stage_line)
    assert int(row["already there"]) == (int(already.group(1)) if already else 0)
    if int(row["bytes over the wire"]) > 0:
        assert len(sections["staging"]["images"]) == 1
    else:
        assert any("azcopy fetched nothing in this run" in s for s in sections["staging"]["summary"])

    # Health: one row per check of the node, shown against its threshold; the plot counts them.
    health = table_dicts(sections["health"]["tables"][0])
    assert {r["check"] for r in health} >= {"gpu_count", "nccl_all_reduce_node", "fs_write", "fs_read"}
    assert len(sections["health"]["images"]) == 1

    # NCCL: no GPU here, and the section says so.
    assert not sections["nccl"]["images"]
    assert sections["nccl"]["nodata"][0].startswith("No data: no NCCL test ran: no GPU")

    # Shared mount: the figures the project's reader returned inside the node's health check
    # (healthcheck_node: its result carries the raw run it judged).
    bench = next(e["event_data"]["res"]["facts"]["healthcheck_fs_bench_run"] for e in events
                 if e["event"] == "runner_on_ok"
                 and e["event_data"]["task"].startswith("Health check | Measure and judge this node"))
    fs = table_dicts(sections["fsbench"]["tables"][0])[0]
    assert (float(fs["write"]), float(fs["read"])) == (pytest.approx(bench["write_mbps"], abs=0.05),
                                                       pytest.approx(bench["read_mbps"], abs=0.05))
    assert len(sections["fsbench"]["images"]) == 1

    # Training: loss and validation MAE of every epoch in the job's metrics.jsonl.
    epochs = job_spec.read_metrics(str(project / "outputs" / "cosmoflow-local"))["epochs"]
    rows = table_dicts(sections["training"]["tables"][0])
    assert len(rows) == len(epochs) >= 3
    for r, e in zip(rows, epochs):
        assert (float(r["train_loss"]), float(r["val_mae"])) == (pytest.approx(e["train_loss"], abs=5e-5),
                                                                 pytest.approx(e["val_mae"], abs=5e-5))
    assert len(sections["training"]["images"]) == 1


SECRET_SIG = "RunnerSECRETsig0123456789abcdefghijklmnopqrs%3D"


def _files_holding(root: Path, needles: list[str]) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            hits += [f"{path.relative_to(root)}: {n[:12]}..." for n in needles if n in text]
    return hits


def test_the_runner_entry_writes_no_secret_into_its_private_data_dir(tmp_path, project, monkeypatch, capsys):
    """Issue 40 item 5 (red on 2.1.0): over repeated runs the entry copies no extra var into
    env/extravars (nor replays one), puts none on the argv it records in artifacts/<id>/command,
    and records no AZURE_SECRET of the environment; what a previous version left is cleaned."""
    entry = load_entry_point()
    sas = f"sv=2026-10-06&sr=c&sp=rl&se=2099-01-01T00%3A00%3A00Z&sig={SECRET_SIG}"
    env_secret = "EnvSECRETvalue-0123456789-abcdefghijkl"
    extra = tmp_path / "secrets.yml"
    extra.write_text(f"submit_sas: '{sas}'\nstage_client_secret: ClientSECRET-abcdef-0123456789\n")
    monkeypatch.setenv("AZURE_SECRET", env_secret)
    pdd = tmp_path / "runner"
    # What 2.1.0 left: the extra-vars file copied in clear, an old run's command with the secret env.
    (pdd / "env").mkdir(parents=True)
    (pdd / "env" / "extravars").write_text(json.dumps({"submit_sas": sas}))
    (pdd / "artifacts" / "old-run").mkdir(parents=True)
    (pdd / "artifacts" / "old-run" / "command").write_text(json.dumps(
        {"command": ["ansible-playbook", "-e", json.dumps({"submit_sas": sas})], "env": {"AZURE_SECRET": env_secret}}))
    needles = [SECRET_SIG, env_secret, "ClientSECRET-abcdef-0123456789"]
    for _run in range(2):
        rc = entry.main(["--playbook", "playbooks/validate.yml", "--extra-vars-file", str(extra),
                         "--private-data-dir", str(pdd), "--project-dir", str(project), "--quiet"])
        assert rc == 0, capsys.readouterr().out[-3000:]
        assert _files_holding(pdd, needles) == []
    assert not (pdd / "env" / "extravars").exists()
    argv = [json.loads(p.read_text())["command"] for p in (pdd / "artifacts").glob("*/command")
            if p.parent.name != "old-run"]
    assert len(argv) == 2 and all(a[a.index("-e") + 1] == f"@{extra}" for a in argv), argv
    old = json.loads((pdd / "artifacts" / "old-run" / "command").read_text())
    assert "env" not in old and old["command"] == ["ansible-playbook", "-e", "REDACTED"]
    assert "summary.json" in {p.name for p in (pdd / "artifacts").glob("*/*")}
    assert SECRET_SIG not in capsys.readouterr().out


def test_no_sas_reaches_an_artifact_a_report_or_outputs_over_two_real_runs(tmp_path, project, monkeypatch, capsys):
    """Issue 40 item 5, the runner entry run for real twice with ansible-runner: the stage phase
    against Azurite (the local default), with a working SAS signed from Azurite's key, in two
    shapes (its fields in another order, the signature first or last), an AZURE_SECRET in the
    environment and a secret extra var. No part of either signature, nor the other secrets, is in
    the private data dir (artifacts, summary.json), what the entry printed, the report pages or
    any file under outputs/ and the stage folder."""
    from datetime import datetime, timedelta, timezone
    from urllib.parse import unquote

    from amlhpc.staging.azcopy_sas import container_sas

    entry = load_entry_point()
    key = yaml.safe_load((ROOT / "inventory" / "local" / "group_vars" / "all.yml").read_text())[
        "prepare_dataset_account_key"]
    port = free_port()
    now = datetime.now(timezone.utc).replace(microsecond=0)
    pdd = tmp_path / "runner"
    monkeypatch.setenv("AZURE_SECRET", "EnvSECRET-for-the-runner-0123456789")
    signatures = []
    before = set((project / "outputs").rglob("*")) if (project / "outputs").exists() else set()
    for shape in range(2):
        sas = container_sas("devstoreaccount1", "cosmoflow", key, permission="rl", start=now - timedelta(minutes=5),
                            expiry=now + timedelta(hours=1, minutes=shape))
        fields = sas.split("&")
        sig = next(f for f in fields if f.startswith("sig="))
        rest = [f for f in fields if f is not sig]
        sas = "&".join([sig, *reversed(rest)] if shape == 0 else [*rest[1:], rest[0], sig])
        signatures.append(sig.removeprefix("sig="))
        extra = tmp_path / f"secrets-{shape}.yml"
        extra.write_text(yaml.safe_dump({"stage_sas": sas, "local_blob_port": port,
                                         "amlhpc_ci_token": "ExtraSECRET-token-0123456789"}))
        rc = entry.main(["--playbook", "site.yml", "--tags", "stage,prepare_dataset", "--extra-vars-file", str(extra),
                         "--private-data-dir", str(pdd), "--project-dir", str(project), "--quiet"])
        printed = capsys.readouterr().out
        assert rc == 0, printed[-3000:]
        summary = json.loads(next((pdd / "artifacts").glob("*/summary.json")).read_text())
        assert summary["status"] == "successful"
    needles = [n for s in signatures for n in (s, unquote(s), s[:16], unquote(s)[-16:])]
    needles += ["EnvSECRET-for-the-runner-0123456789", "ExtraSECRET-token-0123456789"]
    assert _files_holding(pdd, needles) == []
    assert not any(n in printed for n in needles)
    written = [p for p in (project / "outputs").rglob("*") if p not in before] + list((project / ".scratch").rglob("*.json"))
    assert any(p.name.endswith(".html") for p in written), written
    for path in written:
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not [n for n in needles if n in text], path
