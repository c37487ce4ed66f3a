"""nvidia-smi parsing and clock decisions, on output shaped like V100, A100 and H100 machines."""

from __future__ import annotations

from pathlib import Path

import pytest

from amlhpc.nodes.nvidia_smi import (
    NvidiaSmiParseError,
    normalize_bus_id,
    parse_clock_query,
    parse_cpu_list,
    parse_supported_clocks,
    parse_topo_matrix,
    pinning_facts,
    plan_pin,
    plan_reset,
    query_gpu_argv,
    reset_clocks_argv,
    set_clocks_argv,
    topology_pinning,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia-smi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_query_argv_names_the_nine_fields_in_order():
    argv = query_gpu_argv("/usr/bin/nvidia-smi")
    assert argv[0] == "/usr/bin/nvidia-smi"
    assert argv[1] == ("--query-gpu=index,pci.bus_id,name,clocks.max.graphics,clocks.max.memory,"
                       "clocks.applications.graphics,clocks.applications.memory,"
                       "clocks.default_applications.graphics,clocks.default_applications.memory")
    assert argv[2] == "--format=csv,noheader,nounits"


def test_set_and_reset_argv_take_memory_first():
    assert set_clocks_argv(3, 1215, 1410) == ["nvidia-smi", "-i", "3", "-ac", "1215,1410"]
    assert reset_clocks_argv(7) == ["nvidia-smi", "-i", "7", "-rac"]


@pytest.mark.parametrize(("raw", "want"), [
    ("00000001:00:00.0", "0001:00:00.0"),
    ("0000000D:00:00.0", "000d:00:00.0"),
    ("00000000:1E:00.0", "0000:1e:00.0"),
    ("0001:00:00.0", "0001:00:00.0"),
])
def test_bus_ids_from_nvidia_smi_and_lspci_compare_equal(raw, want):
    assert normalize_bus_id(raw) == want


def test_bus_id_garbage_is_refused():
    with pytest.raises(NvidiaSmiParseError):
        normalize_bus_id("GPU-1234")


def test_a100_query_parses_every_gpu():
    gpus = parse_clock_query(fixture("a100_ndv4.query.csv"))
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[4].bus_id == "000b:00:00.0"
    assert gpus[0].name == "NVIDIA A100-SXM4-40GB"
    assert (gpus[0].max_graphics, gpus[0].max_memory) == (1410, 1215)
    assert gpus[0].application == {"graphics": 1095, "memory": 1215}
    assert (gpus[0].default_graphics, gpus[0].default_memory) == (1095, 1215)


def test_units_are_tolerated_when_nounits_was_left_out():
    text = "0, 00000001:00:00.0, Tesla V100-SXM2-16GB, 1530 MHz, 877 MHz, 1312 MHz, 877 MHz, 1312 MHz, 877 MHz\n"
    gpu = parse_clock_query(text)[0]
    assert (gpu.max_graphics, gpu.app_graphics) == (1530, 1312)


def test_not_available_and_not_supported_read_as_none():
    gpus = parse_clock_query(fixture("h100_unsupported.query.csv"))
    assert gpus[0].max_graphics == 1980
    assert gpus[0].app_graphics is None and gpus[0].app_memory is None
    assert gpus[0].default_graphics is None


def test_a_short_row_is_refused_with_the_line():
    with pytest.raises(NvidiaSmiParseError, match="line 1: 3 values for 9 fields"):
        parse_clock_query("0, 00000001:00:00.0, NVIDIA A100-SXM4-40GB\n")


def test_a100_pin_plans_max_clocks_for_every_gpu_at_default():
    plans = plan_pin(parse_clock_query(fixture("a100_ndv4.query.csv")))
    assert {p.action for p in plans} == {"set"}
    assert plans[0].target == {"graphics": 1410, "memory": 1215}
    assert plans[0].reason == "1215,1095 -> 1215,1410"


def test_only_gpus_that_differ_are_set():
    text = fixture("a100_ndv4.query.csv").replace(
        "3, 00000004:00:00.0, NVIDIA A100-SXM4-40GB, 1410, 1215, 1095, 1215",
        "3, 00000004:00:00.0, NVIDIA A100-SXM4-40GB, 1410, 1215, 1410, 1215")
    plans = plan_pin(parse_clock_query(text))
    assert [p.gpu.index for p in plans if p.action == "set"] == [0, 1, 2, 4, 5, 6, 7]
    assert plans[3].action == "ok"


def test_v100_targets_its_own_maximum():
    plans = plan_pin(parse_clock_query(fixture("v100_sxm2.query.csv")))
    assert plans[0].target == {"graphics": 1530, "memory": 877}


def test_h100_already_at_maximum_needs_nothing():
    plans = plan_pin(parse_clock_query(fixture("h100_ndv5.query.csv")))
    assert {p.action for p in plans} == {"ok"}


def test_h100_without_application_clocks_is_skipped_with_reason():
    plans = plan_pin(parse_clock_query(fixture("h100_unsupported.query.csv")))
    assert [p.action for p in plans] == ["skip", "skip"]
    assert plans[0].reason.startswith("not supported")
    assert plans[0].result()["before"] == {"graphics": None, "memory": None}


def test_overrides_are_checked_against_supported_clocks():
    gpus = parse_clock_query(fixture("a100_ndv4.query.csv"))
    supported = parse_supported_clocks(fixture("a100_ndv4.supported.csv"))
    assert 1275 in supported["0001:00:00.0"][1215]
    ok = plan_pin(gpus, graphics_mhz=1275, supported=supported)
    assert ok[0].target == {"graphics": 1275, "memory": 1215}
    bad = plan_pin(gpus, graphics_mhz=1280, supported=supported)
    assert bad[0].action == "invalid"
    assert "graphics clock 1280 MHz is not supported with memory 1215 MHz (highest: 1410 MHz)" == bad[0].reason
    bad_mem = plan_pin(gpus, memory_mhz=1593, supported=supported)
    assert "memory clock 1593 MHz is not supported (supported: 1215)" == bad_mem[0].reason


def test_overrides_above_the_maximum_are_refused_without_a_supported_list():
    gpus = parse_clock_query(fixture("a100_ndv4.query.csv"))
    assert plan_pin(gpus, graphics_mhz=1500)[0].action == "invalid"


def test_indices_limit_the_plan():
    plans = plan_pin(parse_clock_query(fixture("a100_ndv4.query.csv")), indices=[1, 6])
    assert [p.gpu.index for p in plans] == [1, 6]


def test_reset_only_where_clocks_differ_from_default():
    text = fixture("a100_ndv4.query.csv").replace(
        "0, 00000001:00:00.0, NVIDIA A100-SXM4-40GB, 1410, 1215, 1095, 1215",
        "0, 00000001:00:00.0, NVIDIA A100-SXM4-40GB, 1410, 1215, 1410, 1215")
    plans = plan_reset(parse_clock_query(text))
    assert [p.gpu.index for p in plans if p.action == "set"] == [0]
    assert plans[0].target == {"graphics": 1095, "memory": 1215}
    assert [p.action for p in plan_reset(parse_clock_query(fixture("h100_unsupported.query.csv")))] == ["skip"] * 2


def test_supported_clocks_group_by_gpu_and_memory():
    table = parse_supported_clocks(fixture("a100_ndv4.supported.csv"))
    assert len(table) == 8
    assert max(table["000e:00:00.0"][1215]) == 1410
    assert min(table["000e:00:00.0"][1215]) == 210


# --- topo -m ---------------------------------------------------------------------------

def test_cpu_lists():
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("N/A") == []


def test_ndv4_topology_numa_and_nics():
    topo = parse_topo_matrix(fixture("ndv4.topo-m.txt"))
    assert [g.numa_node for g in topo.gpus] == [1, 1, 0, 0, 3, 3, 2, 2]
    assert topo.gpus[2].cpu_affinity == "0-23"
    assert topo.nics[:2] == ["mlx5_ib0", "mlx5_ib1"] and topo.nics[-1] == "mlx5_an0"
    assert topo.gpus[0].nearest_nics == ["mlx5_ib0", "mlx5_ib1"]
    assert topo.gpus[0].nic_link == "NODE"
    assert topo.links["GPU0"]["GPU5"] == "NV12"


def test_ndv4_pinning_orders_gpus_by_numa_node():
    facts = topology_pinning(fixture("ndv4.topo-m.txt"))
    assert facts["known"] is True
    assert facts["cuda_visible_devices"] == "2,3,0,1,6,7,4,5"
    assert facts["numa_by_local_rank"] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert facts["mpirun_bind_flags"] == "--map-by ppr:2:numa --bind-to numa"
    assert facts["numactl_by_local_rank"][2] == "numactl --cpunodebind=1 --membind=1"
    assert facts["cpus_by_local_rank"][0] == "0-23"
    # GPU2 shares NUMA node 0 with two HDR HCAs and the accelerated-networking NIC.
    assert facts["nearest_nics"]["2"] == ["mlx5_ib2", "mlx5_ib3", "mlx5_an0"]
    assert facts["nearest_nics"]["4"] == ["mlx5_ib4", "mlx5_ib5"]


def test_ndv5_pinning_has_four_gpus_per_numa_node():
    facts = topology_pinning(fixture("ndv5.topo-m.txt"))
    assert facts["cuda_visible_devices"] == "0,1,2,3,4,5,6,7"
    assert facts["mpirun_bind_flags"] == "--map-by ppr:4:numa --bind-to numa"
    assert facts["gpu_numa"]["7"] == 1


def test_numa_na_makes_the_facts_unknown():
    facts = topology_pinning(fixture("ndv4_no_numa.topo-m.txt"))
    assert facts["known"] is False
    assert "NUMA affinity not reported" in facts["reason"]


def test_old_space_separated_matrix_with_hca_names():
    topo = parse_topo_matrix(fixture("v100_ndv2.topo-m.txt"))
    assert [g.cpu_affinity for g in topo.gpus] == ["0-19"] * 4 + ["20-39"] * 4
    assert topo.nics == ["mlx5_0"]
    assert topo.gpus[0].nearest_nics == ["mlx5_0"] and topo.gpus[5].nic_link == "SYS"
    assert topo.links["GPU0"]["GPU3"] == "NV2"
    # No NUMA column in this driver's output: the facts say so instead of guessing.
    assert topology_pinning(fixture("v100_ndv2.topo-m.txt"))["known"] is False


def test_recorded_h100_matrix_with_an_underlined_head_row():
    """Recorded on an H100 (driver 580): the head row comes wrapped in ESC[4m ... ESC[0m."""
    text = fixture("h100_1gpu_driver580.topo-m.txt")
    assert "\x1b[4m" in text
    topo = parse_topo_matrix(text)
    assert [(g.index, g.cpu_affinity, g.numa_node) for g in topo.gpus] == [(0, "0-15", 0)]
    assert topo.nics == []
    facts = topology_pinning(text)
    assert facts["known"] is True
    assert facts["cuda_visible_devices"] == "0" and facts["numa_by_local_rank"] == [0]
    assert facts["cpus_by_local_rank"] == ["0-15"]


def test_recorded_h100_clocks_are_already_at_the_maximum():
    """The same machine's clock query: application clocks at max, so pinning changes nothing."""
    gpus = parse_clock_query(fixture("h100_1gpu_driver580.query.csv"))
    assert [(g.bus_id, g.name, g.app_graphics, g.app_memory) for g in gpus] == [
        ("0000:00:06.0", "NVIDIA H100 80GB HBM3", 1980, 2619)]
    supported = parse_supported_clocks(fixture("h100_1gpu_driver580.supported.csv"))
    assert max(supported["0000:00:06.0"][2619]) == 1980
    plans = plan_pin(gpus, None, None, supported)
    assert [(p.action, p.reason) for p in plans] == [("ok", "already at the target clocks")]


def test_not_a_matrix_is_refused():
    with pytest.raises(NvidiaSmiParseError):
        parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_uneven_numa_split_falls_back_to_plain_numa_binding():
    facts = pinning_facts({0: 0, 1: 0, 2: 1})
    assert facts["cuda_visible_devices"] == "0,1,2"
    assert facts["mpirun_bind_flags"] == "--bind-to numa"
