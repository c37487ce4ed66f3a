"""nccl_config: the nccl role's read, decide and write in one module call: check mode
writes nothing, a first run writes the three files, a second changes nothing, the facts
and the message come back in the result."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from ansible_compat import patch_module_args

ROOT = Path(__file__).resolve().parents[4]
SPEC = importlib.util.spec_from_file_location("nccl_config", ROOT / "plugins" / "modules" / "nccl_config.py")
nccl_config = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(nccl_config)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the module writes root-owned files, as the role does")


def run(args: dict, capsys, check_mode: bool = False) -> dict:
    args = dict(args, _ansible_diff=True, _ansible_check_mode=check_mode)
    with patch_module_args(args), pytest.raises(SystemExit):
        nccl_config.main()
    return json.loads(capsys.readouterr().out)


def test_check_then_write_then_nothing_to_do(tmp_path, capsys):
    etc = tmp_path / "etc"
    args = {"vm_size": "Standard_ND96asr_v4", "imds": True, "nvidia_smi": "amlhpc-no-such-nvidia-smi",
            "sharp_plugin_dirs": [str(tmp_path / "sharp")], "topo_file_dest": str(etc / "amlhpc" / "topo.xml"),
            "conf_path": str(etc / "nccl.conf"), "conf_settings": {"NCCL_IB_PCI_RELAXED_ORDERING": 1},
            "env_path": str(etc / "amlhpc" / "nccl.env"), "env": {"NCCL_DEBUG": "WARN"}}
    (tmp_path / "sharp").mkdir()
    (tmp_path / "sharp" / "libnccl-net.so").write_text("")
    etc.mkdir()
    check = run(args, capsys, check_mode=True)
    assert check["changed"] is True and os.listdir(etc) == []
    assert check["probe"]["imds"]["msg"] == "instance metadata not asked", "the inventory's size is enough"
    assert check["facts"]["nccl_pinning"]["source"] == "ndv4 table"
    first = run(args, capsys)
    assert first["changed_files"] == [str(etc / "amlhpc"), str(etc / "amlhpc" / "topo.xml"), str(etc / "nccl.conf"),
                                      str(etc / "amlhpc" / "nccl.env")]
    assert (etc / "nccl.conf").read_text().endswith(f"NCCL_TOPO_FILE={etc / 'amlhpc' / 'topo.xml'}\n")
    assert f"export LD_LIBRARY_PATH={tmp_path / 'sharp'}" in (etc / "amlhpc" / "nccl.env").read_text()
    assert first["msg"].startswith(f"NCCL_TOPO_FILE={etc / 'amlhpc' / 'topo.xml'} from ndv4 table; GPU order ")
    assert first["facts"] == check["facts"]
    again = run(args, capsys)
    assert again["changed"] is False and again["changed_files"] == []
    # The VM size changes to one without a topology: the stale file goes.
    later = run(dict(args, vm_size="Standard_D4s_v5", imds=False), capsys)
    assert str(etc / "amlhpc" / "topo.xml") in later["changed_files"] and not (etc / "amlhpc" / "topo.xml").exists()
    assert later["facts"]["nccl_topo_file_in_use"] == ""


def test_a_user_file_without_its_text_is_refused(tmp_path, capsys):
    res = run({"topo_file_src": "mine.xml", "conf_path": str(tmp_path / "nccl.conf")}, capsys)
    assert res["failed"] is True and "topo_file_content" in res["msg"]


# The action's read (module_utils/amlhpc/nodes/nccl_read.py): one shell command, decided on the
# controller; the module's own result where it would write nothing, else None (the module runs).

def read_outcome(args: dict) -> dict | None:
    import subprocess

    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.nccl_read import (
        CONFIG_ARGUMENT_SPEC,
        read_command,
        unchanged_outcome,
    )
    params = ArgumentSpecValidator(CONFIG_ARGUMENT_SPEC).validate(dict(args)).validated_parameters
    out = subprocess.run(["/bin/sh", "-c", read_command(params)], capture_output=True, text=True, check=True).stdout
    return unchanged_outcome(params, out)


def module_result(args: dict, capsys, check_mode: bool = False) -> dict:
    return {k: v for k, v in run(args, capsys, check_mode).items() if k != "invocation"}


@pytest.mark.parametrize("size", ["Standard_ND96asr_v4", "Standard_D4s_v5"])
def test_the_read_gives_the_modules_result_once_the_files_are_written(tmp_path, capsys, monkeypatch, size):
    etc, fixtures = tmp_path / "etc", ROOT / "tests" / "fixtures" / "nvidia-smi"
    state = tmp_path / "smi"
    state.mkdir()
    (state / "topo-m.txt").write_text((fixtures / "ndv4.topo-m.txt").read_text())
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(state))
    (tmp_path / "sharp").mkdir()
    (tmp_path / "sharp" / "libnccl-net.so").write_text("")
    args = {"vm_size": size, "nvidia_smi": str(fixtures / "fake-nvidia-smi"),
            "sharp_plugin_dirs": [str(tmp_path / "none"), str(tmp_path / "sharp")],
            "image_topo_files": [str(tmp_path / "image" / "{name}-topo.xml")],
            "topo_file_dest": str(etc / "amlhpc" / "topo.xml"), "conf_path": str(etc / "nccl.conf"),
            "conf_settings": {"NCCL_IB_PCI_RELAXED_ORDERING": 1}, "env_path": str(etc / "amlhpc" / "nccl.env"),
            "env": {"NCCL_DEBUG": "WARN"}}
    etc.mkdir()
    assert read_outcome(args) is None  # nothing written yet
    run(args, capsys)
    quick = read_outcome(args)
    assert quick == module_result(args, capsys) and quick["changed"] is False
    assert quick["probe"]["topo_m"]["rc"] == 0 and quick["probe"]["sharp_plugin_dirs_found"] == [str(tmp_path / "sharp")]
    # each thing the module would change makes the read hand over to it
    for change in ({"env": {"NCCL_DEBUG": "INFO"}}, {"conf_settings": {}}, {"sharp_plugin_dirs": []}):
        assert read_outcome({**args, **change}) is None and run({**args, **change}, capsys, True)["changed"] is True
    (etc / "nccl.conf").chmod(0o600)
    assert read_outcome(args) is None and run(args, capsys, True)["changed"] is True
    run(args, capsys)
    # the image's own topology file, where it exists, is the one in use (and ours goes)
    if size == "Standard_ND96asr_v4":
        (tmp_path / "image").mkdir()
        (tmp_path / "image" / "ndv4-topo.xml").write_text("<system/>\n")
        assert read_outcome(args) is None
        run(args, capsys)
        quick = read_outcome(args)
        assert quick == module_result(args, capsys) and quick["facts"]["nccl_topo_file_in_use"].endswith("ndv4-topo.xml")


def test_the_read_leaves_the_instance_metadata_and_failures_to_the_module(tmp_path, capsys):
    args = {"vm_size": "", "imds": True, "conf_path": str(tmp_path / "nccl.conf"),
            "topo_file_dest": str(tmp_path / "topo.xml"), "env_path": str(tmp_path / "nccl.env")}
    assert read_outcome(args) is None  # the VM size comes from the instance metadata: the module asks
    missing = {**args, "vm_size": "Standard_ND96asr_v4", "nvidia_smi": str(tmp_path / "bin" / "nvidia-smi")}
    assert read_outcome(missing) is None  # a path that cannot run: the module fails, naming it


def test_the_read_finds_no_nvidia_smi_as_the_module_does(tmp_path, capsys):
    args = {"vm_size": "Standard_ND96asr_v4", "nvidia_smi": "amlhpc-no-such-nvidia-smi",
            "conf_path": str(tmp_path / "nccl.conf"), "topo_file_dest": str(tmp_path / "a" / "topo.xml"),
            "env_path": str(tmp_path / "a" / "nccl.env")}
    run(args, capsys)
    quick = read_outcome(args)
    assert quick == module_result(args, capsys) and quick["probe"]["topo_m"] == {"rc": -1, "stdout": ""}
