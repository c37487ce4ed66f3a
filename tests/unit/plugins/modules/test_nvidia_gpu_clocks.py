"""nvidia_gpu_clocks against a fake nvidia-smi that replays recorded output and keeps state.

The fake records every call, so the tests can say exactly which commands ran: `-ac` only
for GPUs whose clocks differ, nothing that changes state in check mode, `-rac` on reset.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from ansible_compat import patch_module_args

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-smi"
spec = importlib.util.spec_from_file_location("nvidia_gpu_clocks", ROOT / "plugins" / "modules" / "nvidia_gpu_clocks.py")
nvidia_gpu_clocks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nvidia_gpu_clocks)


class FakeSmi:
    def __init__(self, root: Path):
        self.dir = root / "state"
        self.bin = root / "bin"
        self.dir.mkdir()
        self.bin.mkdir()
        shutil.copy(FIXTURES / "fake-nvidia-smi", self.bin / "nvidia-smi")

    def load(self, query: str, supported: str | None = None, state_text: str | None = None) -> None:
        (self.dir / "state.csv").write_text(state_text or (FIXTURES / query).read_text())
        if supported:
            shutil.copy(FIXTURES / supported, self.dir / "supported.csv")

    def calls(self) -> list[list[str]]:
        log = self.dir / "calls.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def changing_calls(self) -> list[list[str]]:
        return [c for c in self.calls() if "-ac" in c or "-rac" in c]

    def clear_log(self) -> None:
        (self.dir / "calls.log").unlink(missing_ok=True)

    def state(self) -> list[list[str]]:
        return [[c.strip() for c in line.split(",")] for line in (self.dir / "state.csv").read_text().splitlines()]


@pytest.fixture()
def smi(tmp_path, monkeypatch) -> FakeSmi:
    fake = FakeSmi(tmp_path)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(fake.dir))
    monkeypatch.setenv("PATH", f"{fake.bin}:/usr/bin:/bin")
    return fake


def run(args: dict, capsys, check_mode: bool = False, diff: bool = False) -> dict:
    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        nvidia_gpu_clocks.main()
    return json.loads(capsys.readouterr().out)


def test_pins_every_a100_then_second_run_changes_nothing(smi, capsys):
    smi.load("a100_ndv4.query.csv", "a100_ndv4.supported.csv")
    first = run({}, capsys)
    assert first["changed"] is True
    assert [r["after"] for r in first["gpus"]] == [{"graphics": 1410, "memory": 1215}] * 8
    assert [r["before"] for r in first["gpus"]] == [{"graphics": 1095, "memory": 1215}] * 8
    assert [c[-4:] for c in smi.changing_calls()] == [["-i", str(i), "-ac", "1215,1410"] for i in range(8)]
    assert first["gpus"][4]["bus_id"] == "000b:00:00.0"
    smi.clear_log()
    second = run({}, capsys)
    assert second["changed"] is False and second["commands"] == []
    assert smi.changing_calls() == []
    assert {r["action"] for r in second["gpus"]} == {"ok"}


def test_only_gpus_that_differ_get_ac(smi, capsys):
    text = (FIXTURES / "a100_ndv4.query.csv").read_text().splitlines()
    text[2] = text[2].replace("1410, 1215, 1095, 1215", "1410, 1215, 1410, 1215")
    text[5] = text[5].replace("1410, 1215, 1095, 1215", "1410, 1215, 1410, 1215")
    smi.load("a100_ndv4.query.csv", "a100_ndv4.supported.csv", state_text="\n".join(text) + "\n")
    result = run({}, capsys)
    assert sorted(int(c[c.index("-i") + 1]) for c in smi.changing_calls()) == [0, 1, 3, 4, 6, 7]
    assert [r["changed"] for r in result["gpus"]] == [True, True, False, True, True, False, True, True]


def test_check_mode_reports_but_runs_nothing_that_changes_state(smi, capsys):
    smi.load("a100_ndv4.query.csv", "a100_ndv4.supported.csv")
    before = smi.state()
    result = run({}, capsys, check_mode=True, diff=True)
    assert result["changed"] is True
    assert len(result["commands"]) == 8
    assert smi.changing_calls() == []
    assert smi.state() == before
    assert "GPU0: memory 1215 MHz, graphics 1095 MHz" in result["diff"]["before"]
    assert "GPU0: memory 1215 MHz, graphics 1410 MHz" in result["diff"]["after"]


def test_reset_runs_rac_only_where_needed(smi, capsys):
    smi.load("a100_ndv4.query.csv", "a100_ndv4.supported.csv")
    run({"gpus": [1, 2]}, capsys)
    smi.clear_log()
    reset = run({"state": "reset"}, capsys)
    assert reset["changed"] is True
    assert [c[-3:] for c in smi.changing_calls()] == [["-i", "1", "-rac"], ["-i", "2", "-rac"]]
    assert [r["after"] for r in reset["gpus"]] == [{"graphics": 1095, "memory": 1215}] * 8
    smi.clear_log()
    again = run({"state": "reset"}, capsys)
    assert again["changed"] is False and smi.changing_calls() == []


def test_override_outside_supported_clocks_fails_with_the_choices(smi, capsys):
    smi.load("a100_ndv4.query.csv", "a100_ndv4.supported.csv")
    result = run({"graphics_mhz": 1412}, capsys)
    assert result["failed"] is True
    assert "GPU 0 (NVIDIA A100-SXM4-40GB): graphics clock 1412 MHz is not supported with memory 1215 MHz" \
        in result["msg"]
    assert smi.changing_calls() == []


def test_override_inside_supported_clocks_is_set(smi, capsys):
    smi.load("a100_ndv4.query.csv", "a100_ndv4.supported.csv")
    result = run({"graphics_mhz": 1275, "gpus": [0]}, capsys)
    assert result["gpus"][0]["after"] == {"graphics": 1275, "memory": 1215}
    assert smi.changing_calls()[0][-2:] == ["-ac", "1215,1275"]


def test_h100_without_application_clocks_is_reported_not_failed(smi, capsys):
    smi.load("h100_unsupported.query.csv")
    result = run({}, capsys)
    assert result["changed"] is False and "failed" not in result
    assert [r["reason"] for r in result["gpus"]] == ["not supported: application clocks read N/A; skipped"] * 2
    assert smi.changing_calls() == []


def test_clocks_that_do_not_take_are_reported_per_gpu(smi, capsys):
    """nvidia-smi can print a warning, exit 0 and leave the clocks alone: read back, don't trust."""
    smi.load("a100_ndv4.query.csv", "a100_ndv4.supported.csv")
    supported = (smi.dir / "supported.csv").read_text().splitlines()
    (smi.dir / "supported.csv").write_text("\n".join(l for l in supported if not l.startswith("00000002")) + "\n")
    result = run({"check_supported": False}, capsys)
    gpu1 = result["gpus"][1]
    assert gpu1["changed"] is False and gpu1["reason"].startswith("not supported: nvidia-smi accepted -i 1 -ac")
    assert result["gpus"][0]["changed"] is True


def test_unknown_gpu_index_fails(smi, capsys):
    smi.load("v100_sxm2.query.csv")
    result = run({"gpus": [9]}, capsys)
    assert result["failed"] is True and "no GPU with index 9" in result["msg"]


def test_no_nvidia_smi_skips_with_a_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run({"nvidia_smi": "nvidia-smi-not-here"}, capsys)
    assert result["skipped"] is True and result["changed"] is False
    assert "not found on PATH" in result["skip_reason"]


def test_nvidia_smi_failure_fails_with_its_message(tmp_path, monkeypatch, capsys):
    broken = tmp_path / "nvidia-smi"
    broken.write_text("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\n"
                      "exit 9\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    result = run({}, capsys)
    assert result["failed"] is True and "couldn't communicate with the NVIDIA driver" in result["msg"]


# The action's read (module_utils/amlhpc/nodes/gpu_clocks.py): one shell command, decided on the
# controller. Where nothing is to change it gives the module's own result; everywhere else
# None, and the module runs.

def probe(args: dict) -> dict | None:
    """The action's way, on this machine: the shell read, then the decision."""
    import os
    import subprocess

    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.gpu_clocks import (
        ARGUMENT_SPEC,
        probe_command,
        unchanged_outcome,
    )
    params = ArgumentSpecValidator(ARGUMENT_SPEC).validate(dict(args)).validated_parameters
    read = subprocess.run(["/bin/sh", "-c", probe_command(params["nvidia_smi"], params["state"],
                                                          params["check_supported"])],
                          capture_output=True, text=True, env=dict(os.environ), check=True)
    return unchanged_outcome(params, read.stdout)


def without_invocation(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "invocation"}


@pytest.mark.parametrize("args", [{}, {"check_supported": False}, {"gpus": [2, 5]}, {"graphics_mhz": 1410}])
def test_the_read_gives_the_modules_result_once_the_clocks_are_pinned(smi, capsys, args):
    smi.load("a100_ndv4.query.csv", "a100_ndv4.supported.csv")
    assert probe(args) is None  # clocks to set: the module runs
    run(args, capsys)
    smi.clear_log()
    quick = probe(args)
    assert quick == without_invocation(run(args, capsys))
    assert quick["changed"] is False and quick["commands"] == []
    reads = [c for c in smi.calls() if any(a.startswith("--query-gpu") for a in c)]
    assert len(reads) == 2  # one read by the probe, one by the module run it was compared with


def test_the_read_gives_the_modules_result_on_reset_and_unsupported_gpus(smi, capsys):
    smi.load("a100_ndv4.query.csv", "a100_ndv4.supported.csv")
    assert probe({"state": "reset"}) == without_invocation(run({"state": "reset"}, capsys))
    smi.load("h100_unsupported.query.csv")
    assert probe({}) == without_invocation(run({}, capsys))


def test_the_read_leaves_refusals_and_failures_to_the_module(smi, tmp_path, monkeypatch, capsys):
    smi.load("a100_ndv4.query.csv", "a100_ndv4.supported.csv")
    run({}, capsys)
    assert probe({"graphics_mhz": 1412}) is None  # not supported: the module fails, naming the choices
    assert probe({"gpus": [9]}) is None  # no such GPU
    assert probe({"nvidia_smi": str(tmp_path / "missing" / "nvidia-smi")}) is None  # a path: the module fails
    broken = tmp_path / "broken" / "nvidia-smi"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed'\nexit 9\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{broken.parent}:/usr/bin:/bin")
    assert probe({}) is None


def test_the_read_finds_no_nvidia_smi_as_the_module_does(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    args = {"nvidia_smi": "nvidia-smi-not-here"}
    assert probe(args) == without_invocation(run(args, capsys))
