"""The health check's probe as one shell command (module_utils/amlhpc/health/health_probe.py): the
command, run here by /bin/sh as the action sends it, gives the module's own result.

The tools are stand-in scripts that print recorded outputs in the real tools' shapes
(fixtures/health); the shared-mount test writes and reads real files.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from amlhpc.health import health
from amlhpc.health.health_probe import (
    ARGUMENT_SPEC,
    MARKER,
    MODULE_NAMES,
    module_result,
    node_side,
    probe,
    probe_command,
    read_outcome,
)

FIX = Path(__file__).parent / "fixtures" / "health"
SOURCES_DIR = Path(__file__).resolve().parents[4] / "plugins" / "module_utils" / "amlhpc" / "health"


def sources() -> list[tuple[str, str]]:
    """As the action reads them: each of MODULE_NAMES, under its import name."""
    return [(name, (SOURCES_DIR / (name.rpartition(".")[2] + ".py")).read_text()) for name in MODULE_NAMES]


def params(**over) -> dict:
    p = {k: v.get("default") for k, v in ARGUMENT_SPEC.items()}
    p.update(tools={"nvidia_smi": "nvidia-smi", "nvbandwidth": "nvbandwidth", "bandwidth_test": "bandwidthTest",
                    "all_reduce_perf": "all_reduce_perf", "alltoall_perf": "alltoall_perf", "elbencho": "",
                    "mpirun": "mpirun"},
             vm_size="Standard_ND96asr_v4", kernel_log_command=f"cat {FIX / 'dmesg_clean.txt'}")
    p.update(over)
    return p


@pytest.fixture()
def tools(tmp_path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    scripts = {
        "nvidia-smi": f'case "$*" in *--query-gpu=*) cat {FIX / "nvsmi_gpu_ndv4_ok.csv"} ;; '
                      f'*--query-remapped-rows=*) cat {FIX / "nvsmi_remap_ndv4_ok.csv"} ;; *) exit 2 ;; esac',
        "nvbandwidth": f"cat {FIX / 'nvbandwidth_ndv4_ok.txt'}",
        "all_reduce_perf": f"cat {FIX / 'all_reduce_ndv4_node_slow.txt'}",
    }
    for name, body in scripts.items():
        (folder / name).write_text("#!/bin/sh\n" + body + "\n")
        (folder / name).chmod(0o755)
    return folder


def shell(cmd: str) -> str:
    res = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=120, check=True)
    return res.stdout


def module_way(p: dict, check_mode: bool = False) -> dict:
    """What the module returns (less its invocation), computed here with its own functions."""
    return module_result(p, probe(p, check_mode), health.thresholds_for(p["vm_size"], p["thresholds"]), False,
                         check_mode)


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_command_gives_the_modules_result(tools, tmp_path, check_mode):
    p = params(tool_dirs=[str(tools)], cluster={"enabled": True, "nodes": 2, "nodefile": str(tmp_path / "none"),
                                                "mpirun_args": "", "args": ""})
    out = shell(probe_command(sys.executable, p, check_mode, sources()))
    got = read_outcome(p, out, check_mode)
    assert got == module_way(p, check_mode)
    statuses = {c["check"]: c["status"] for c in got["checks"]}
    assert statuses["nccl_all_reduce_node"] == "fail" and statuses["gpu_count"] == "pass"  # judged, not just run
    assert got["changed"] is False and got["facts"]["healthcheck_gpu_count"] == 8


@pytest.mark.parametrize("floor", ["ND96asr_v4", "this machine's own"])
def test_the_mount_test_runs_on_the_node_and_cleans_up(tools, tmp_path, floor):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    p = params(tool_dirs=[str(tools)], fs_path=str(scratch), fs_files=2, fs_file_size_mb=1, fs_parallel=2)
    if floor != "ND96asr_v4":  # a floor amid this machine's read speeds: two live reads may fall either side
        p = params(**{**p, "thresholds": {"default": {"fs_read_mbps": 200, "fs_write_mbps": 1}}})
    got = read_outcome(p, shell(probe_command(sys.executable, p, False, sources())), False)
    bench = got["facts"]["healthcheck_fs_bench_run"]
    assert bench["files"] == 2 and bench["write_mbps"] > 0 and bench["read_mbps"] > 0, bench
    assert {c["check"] for c in got["checks"]} >= {"fs_write", "fs_read"}
    assert list(scratch.iterdir()) == []
    # The same checks and statuses as the module's way, judged on the figures this run recorded:
    # a second live read would differ, and fall on the other side of a floor under load (issue 49).
    raw = probe({**p, "fs_path": ""}, False)  # the module's own probe, every tool but the mount test
    raw.update(fs_isdir=True, fs_bench=bench)
    limits = health.thresholds_for(p["vm_size"], p["thresholds"])
    statuses = [(c["check"], c["status"]) for c in module_result(p, raw, limits, False, False)["checks"]]
    assert [(c["check"], c["status"]) for c in got["checks"]] == statuses


def test_a_terminal_and_a_banner_around_the_answer_are_read(tools):
    p = params(tool_dirs=[str(tools)])
    out = shell(probe_command(sys.executable, p, False, sources()))
    noisy = "Last login: today\r\n" + out.replace("\n", "\r\n")
    assert read_outcome(p, noisy, False) == read_outcome(p, out, False) == module_way(p)


def test_no_answer_or_a_folder_to_create_leaves_it_to_the_module(tmp_path):
    p = params(fs_path=str(tmp_path / "missing"), fs_path_create=True)
    assert node_side(p, False) == {"module": True}
    assert read_outcome(p, "\n" + MARKER + '{"module": true}\n', False) is None
    assert read_outcome(p, "", False) is None
    assert read_outcome(p, MARKER + "{not json", False) is None
    refused = params(thresholds={"default": {"no_such_key": 1}})
    with pytest.raises(ValueError):
        health.thresholds_for(refused["vm_size"], refused["thresholds"])
    assert read_outcome(refused, MARKER + '{"raw": {"tools": {}}}', False) is None


def test_the_command_carries_no_quote_that_breaks_the_shell(tools):
    """The program is single-quoted as a whole: a parameter with quotes and $ travels inside
    the payload, not the shell's words."""
    p = params(tool_dirs=[str(tools)], node_name="it's $HOME \"n0\"")
    cmd = probe_command(sys.executable, p, False, sources())
    assert "$HOME" not in cmd and "it's" not in cmd
    assert read_outcome(p, shell(cmd), False) == module_way(p)


def test_infiniband_each_active_port_is_measured_from_its_gpu(tools, tmp_path):
    """ibstat lists a port down and the Ethernet NIC: ib_write_bw runs a server and a client
    (to localhost) on each active InfiniBand port only, HCA i from GPU i, on ports of their own."""
    log = tmp_path / "ib.log"
    (tools / "ibstat").write_text(f"#!/bin/sh\ncat {FIX / 'ibstat_ndv4_port_down.txt'}\n")
    (tools / "ib_write_bw").write_text(f"""#!/bin/sh
echo "$*" >> {log}
case "$*" in *" localhost") cat {FIX / 'ib_write_bw_hdr_mbsec.txt'} ;; esac
""")
    for name in ("ibstat", "ib_write_bw"):
        (tools / name).chmod(0o755)
    p = params(tool_dirs=[str(tools)], tools={**params()["tools"], "ibstat": "ibstat", "ib_write_bw": "ib_write_bw"})
    got = read_outcome(p, shell(probe_command(sys.executable, p, False, sources())), False)
    checks = {c["check"]: c for c in got["checks"]}
    assert checks["ib_ports"]["status"] == "fail" and "mlx5_ib3:1 (Down/Polling)" in checks["ib_ports"]["reason"]
    assert checks["ib_bw"]["status"] == "pass" and checks["ib_bw"]["value"].startswith("196.5 Gb/s (min of 7,")
    calls = sorted(log.read_text().splitlines())
    hcas = [f"mlx5_ib{i}" for i in range(8) if i != 3]
    args = "-s 8388608 -x 0 -F --report_gbits --perform_warm_up"
    assert calls == sorted([f"-d {hca} -i 1 -p {18510 + i} {args} --use_cuda={i}{end}"
                            for i, hca in enumerate(hcas) for end in ("", " localhost")])
    # where perftest has no CUDA: from host memory
    p["ib_bw_gdr"] = False
    log.unlink()
    shell(probe_command(sys.executable, p, False, sources()))
    assert not any("--use_cuda" in line for line in log.read_text().splitlines())


def test_gpu_to_gpu_copies_are_measured_where_the_size_has_a_figure(tools, tmp_path):
    log = tmp_path / "nvbw.log"
    (tools / "nvbandwidth").write_text(f"#!/bin/sh\necho \"$*\" >> {log}\ncat {FIX / 'nvbandwidth_h100_p2p_slow.txt'}\n")
    h100 = params(tool_dirs=[str(tools)], vm_size="Standard_ND96isr_H100_v5")
    got = read_outcome(h100, shell(probe_command(sys.executable, h100, False, sources())), False)
    assert log.read_text() == "-t host_to_device_memcpy_ce device_to_host_memcpy_ce device_to_device_memcpy_read_ce\n"
    assert {c["check"]: c["status"] for c in got["checks"]}["p2p_bandwidth"] == "fail"
    log.unlink()
    probe(params(tool_dirs=[str(tools)]), False)  # ND96asr_v4: aznhc has no P2P figure for it
    assert log.read_text() == "-t host_to_device_memcpy_ce device_to_host_memcpy_ce\n"
