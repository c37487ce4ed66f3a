"""NCCL topology selection, the topology files, nccl.conf and the env file."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from amlhpc.nodes.nccl import (
    TOPOLOGIES,
    choose_pinning,
    known_pinning,
    nccl_conf_content,
    nccl_env_content,
    render_topology_xml,
    topology_for_vm_size,
)
from amlhpc.nodes.nvidia_smi import topology_pinning

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-smi"
SHIPPED = ROOT / "roles" / "nccl" / "files"


@pytest.mark.parametrize(("size", "name"), [
    ("Standard_ND96asr_v4", "ndv4"),
    ("standard_nd96amsr_a100_v4", "ndv4"),
    ("Standard_ND96isr_H100_v5", "ndv5"),
    ("Standard_ND40rs_v2", "ndv2"),
])
def test_vm_sizes_pick_their_topology(size, name):
    assert topology_for_vm_size(size).name == name


@pytest.mark.parametrize("size", ["Standard_NC24ads_A100_v4", "", None])
def test_other_sizes_have_no_topology(size):
    assert topology_for_vm_size(size) is None


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_shipped_topology_files_are_the_table_rendered(name):
    """The files the role ships and the pinning table cannot drift apart."""
    assert (SHIPPED / f"{name}-topo.xml").read_text() == render_topology_xml(TOPOLOGIES[name])


def test_ndv4_xml_is_what_nccl_expects():
    root = ET.fromstring(render_topology_xml(TOPOLOGIES["ndv4"]))
    assert root.tag == "system" and root.get("version") == "1"
    cpus = root.findall("cpu")
    assert [c.get("numaid") for c in cpus] == ["0", "1", "2", "3"]
    assert cpus[0].get("affinity") == "00000000,00000000,00ffffff"
    gpus = {p.get("busid"): c.get("numaid") for c in cpus for p in c.iter("pci") if p.get("class") == "0x030200"}
    hcas = [p.get("busid") for p in root.iter("pci") if p.get("class") == "0x020700"]
    assert gpus == {"0003:00:00.0": "0", "0004:00:00.0": "0", "0001:00:00.0": "1", "0002:00:00.0": "1",
                    "000d:00:00.0": "2", "000e:00:00.0": "2", "000b:00:00.0": "3", "000c:00:00.0": "3"}
    assert len(hcas) == 8


def test_ndv4_affinity_masks_cover_the_cpus_of_each_numa_node():
    for dom in TOPOLOGIES["ndv4"].domains:
        mask = int(dom.affinity.replace(",", ""), 16)
        low, high = (int(x) for x in dom.cpus.split("-"))
        assert mask == ((1 << (high + 1)) - 1) ^ ((1 << low) - 1)


def test_table_pinning_matches_the_measured_ndv4_matrix():
    measured = topology_pinning((FIXTURES / "ndv4.topo-m.txt").read_text())
    table = known_pinning("Standard_ND96asr_v4")
    for key in ("cuda_visible_devices", "numa_by_local_rank", "mpirun_bind_flags", "cpus_by_local_rank"):
        assert table[key] == measured[key], key
    assert table["source"] == "ndv4 table"


def test_choose_pinning_prefers_measurement_and_falls_back_to_table():
    measured = topology_pinning((FIXTURES / "ndv5.topo-m.txt").read_text())
    assert choose_pinning(measured, "Standard_ND96asr_v4")["source"] == "nvidia-smi topo -m"
    unknown = topology_pinning((FIXTURES / "ndv4_no_numa.topo-m.txt").read_text())
    chosen = choose_pinning(unknown, "Standard_ND96asr_v4")
    assert chosen["source"] == "ndv4 table" and chosen["cuda_visible_devices"] == "2,3,0,1,6,7,4,5"
    nothing = choose_pinning(unknown, "Standard_D4s_v5")
    assert nothing["known"] is False
    assert "NUMA affinity not reported" in nothing["reason"] and "Standard_D4s_v5" in nothing["reason"]


def test_nccl_conf_lines():
    text = nccl_conf_content({"NCCL_IB_PCI_RELAXED_ORDERING": 1, "NCCL_IGNORE_CPU_AFFINITY": True,
                              "NCCL_NET_GDR_LEVEL": None}, topo_file="/etc/amlhpc/nccl/topo.xml")
    lines = text.splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == ["NCCL_IB_PCI_RELAXED_ORDERING=1", "NCCL_IGNORE_CPU_AFFINITY=1",
                         "NCCL_TOPO_FILE=/etc/amlhpc/nccl/topo.xml"]


@pytest.mark.parametrize("bad", [{"1BAD": 1}, {"A-B": 1}, {"X": "a\nb"}])
def test_nccl_conf_refuses_what_nccl_cannot_read(bad):
    with pytest.raises(ValueError):
        nccl_conf_content(bad)


def test_env_file_is_valid_shell_and_sets_what_it_says(tmp_path):
    pinning = known_pinning("Standard_ND96asr_v4")
    text = nccl_env_content({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NCCL_SOCKET_IFNAME": "eth0",
                             "NCCL_DEBUG": "WARN", "NCCL_IB_AR_THRESHOLD": 0, "OMPI_MCA_coll_hcoll_enable": 0,
                             "WEIRD": "a b'c"},
                            ld_library_path=["/usr/local/nccl-rdma-sharp-plugins/lib"], pinning=pinning,
                            topo_file="/etc/amlhpc/nccl/topo.xml")
    env_file = tmp_path / "nccl.env"
    env_file.write_text(text)
    script = (f". {env_file}; printf '%s\\n' \"$CUDA_DEVICE_ORDER\" \"$NCCL_IB_AR_THRESHOLD\" \"$WEIRD\" "
              "\"$LD_LIBRARY_PATH\" \"$AMLHPC_GPU_ORDER\" \"$AMLHPC_MPIRUN_BIND_FLAGS\" \"$NCCL_TOPO_FILE\" "
              "\"$AMLHPC_NUMA_BY_LOCAL_RANK\"")
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/x"}).stdout.splitlines()
    assert out == ["PCI_BUS_ID", "0", "a b'c", "/usr/local/nccl-rdma-sharp-plugins/lib:/opt/x",
                   "2,3,0,1,6,7,4,5", "--map-by ppr:2:numa --bind-to numa", "/etc/amlhpc/nccl/topo.xml",
                   "0 0 1 1 2 2 3 3"]
    # Without LD_LIBRARY_PATH set in the job, no stray colon.
    out = subprocess.run(["sh", "-c", f". {env_file}; echo \"$LD_LIBRARY_PATH\""], capture_output=True,
                         text=True, check=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    assert out == "/usr/local/nccl-rdma-sharp-plugins/lib"


def test_env_file_without_plugin_or_pinning_leaves_them_out():
    text = nccl_env_content({"NCCL_DEBUG": "WARN"}, pinning={"known": False})
    assert "LD_LIBRARY_PATH" not in text and "AMLHPC_" not in text


def test_job_settings_carry_the_env_file_and_files_into_the_container():
    from amlhpc.nodes.nccl import job_settings, nccl_env_content
    text = nccl_env_content({"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN", "NCCL_IB_AR_THRESHOLD": 0},
                            ["/usr/local/nccl-rdma-sharp-plugins/lib"], None, "/etc/amlhpc/nccl-topo.xml")
    job = job_settings(text, "/etc/nccl.conf", "/etc/amlhpc/nccl.env")
    assert job["environment_variables"] == {"NCCL_DEBUG": "WARN", "NCCL_IB_AR_THRESHOLD": "0",
                                            "NCCL_SOCKET_IFNAME": "eth0",
                                            "NCCL_TOPO_FILE": "/etc/amlhpc/nccl-topo.xml"}
    assert job["mounts"] == ["/etc/nccl.conf:/etc/nccl.conf", "/etc/amlhpc/nccl.env:/etc/amlhpc/nccl.env",
                             "/etc/amlhpc/nccl-topo.xml:/etc/amlhpc/nccl-topo.xml"]
    # A value with spaces survives the shell quoting; no env file on the node: nothing to pass.
    spaced = nccl_env_content({"AMLHPC_MPIRUN_BIND_FLAGS": "--bind-to numa --map-by ppr:8:node"})
    assert job_settings(spaced, "/etc/nccl.conf", "/e")["environment_variables"] == {
        "AMLHPC_MPIRUN_BIND_FLAGS": "--bind-to numa --map-by ppr:8:node"}
    assert job_settings(None, "/etc/nccl.conf", "/e") == {"environment_variables": {}, "mounts": []}


def test_ndv4_topology_matches_the_azure_hpc_image():
    """roles/nccl/files/ndv4-topo.xml is byte for byte the file Azure/azhpc-images ships as
    topology/ndv4-topo.xml (checked against that repository); GPUs in PCI bus order sit on
    NUMA nodes 1,1,0,0,3,3,2,2, as Azure documents for ND A100 v4."""
    from amlhpc.nodes.nccl import TOPOLOGIES, render_topology_xml
    shipped = (Path(ROOT) / "roles" / "nccl" / "files" / "ndv4-topo.xml").read_text()
    assert render_topology_xml(TOPOLOGIES["ndv4"]) == shipped
    assert TOPOLOGIES["ndv4"].numa_of_gpu() == {0: 1, 1: 1, 2: 0, 3: 0, 4: 3, 5: 3, 6: 2, 7: 2}


# ---------------------------------------------------------------------------------------
# node_plan: what the nccl role decides for one node from its probe (nccl_config)

def _probe(**over):
    probe = {"imds": {"status": -1, "msg": "instance metadata not asked"}, "sharp_plugin_dirs_found": [],
             "topo_m": {"rc": -1, "stdout": ""}, "image_topo_file": ""}
    probe.update(over)
    return probe


def test_node_plan_unknown_size_writes_no_topology_and_says_why():
    from amlhpc.nodes.nccl import node_plan
    plan = node_plan(_probe(imds={"status": -1, "msg": "Status code was -1: timed out"}),
                     conf_settings={"NCCL_IB_PCI_RELAXED_ORDERING": 1}, env={"NCCL_DEBUG": "WARN"})
    assert plan["facts"]["nccl_vm_size_found"] == ""
    assert plan["facts"]["nccl_vm_size_source"] == "unknown (Status code was -1: timed out)"
    assert plan["facts"]["nccl_topo_file_in_use"] == "" and plan["facts"]["nccl_topology"] is None
    assert not plan["facts"]["nccl_pinning"]["known"]
    assert [f["state"] for f in plan["files"] if f["path"] == "/etc/amlhpc/nccl-topo.xml"] == ["absent"]
    assert "NCCL_TOPO_FILE" not in plan["files"][1]["content"] and plan["files"][1]["backup"] is True
    assert plan["directories"] == [{"path": "/etc/amlhpc"}]
    assert plan["msg"].startswith("no topology file: VM size unknown (unknown (Status code was -1: timed out)) has none")
    assert "no pinning facts: no nvidia-smi topo -m output" in plan["msg"]


def test_node_plan_size_from_metadata_measured_pinning_and_plugin():
    from amlhpc.nodes.nccl import node_plan
    topo_m = (FIXTURES / "ndv4.topo-m.txt").read_text()
    plan = node_plan(_probe(imds={"status": 200, "json": {"compute": {"vmSize": "Standard_ND96asr_v4"}}, "msg": "OK"},
                            topo_m={"rc": 0, "stdout": topo_m},
                            sharp_plugin_dirs_found=["/usr/local/nccl-rdma-sharp-plugins/lib", "/other"]),
                     env={"NCCL_DEBUG": "WARN"})
    facts = plan["facts"]
    assert (facts["nccl_vm_size_found"], facts["nccl_vm_size_source"]) == ("Standard_ND96asr_v4", "instance metadata")
    assert facts["nccl_topology"] == {"name": "ndv4", "gpu": TOPOLOGIES["ndv4"].gpu}
    assert facts["nccl_topo_file_in_use"] == "/etc/amlhpc/nccl-topo.xml"
    assert facts["nccl_pinning"] == topology_pinning(topo_m)
    topo, conf, env = plan["files"]
    assert topo == {"path": "/etc/amlhpc/nccl-topo.xml", "state": "present",
                    "content": (SHIPPED / "ndv4-topo.xml").read_text()}
    assert "NCCL_TOPO_FILE=/etc/amlhpc/nccl-topo.xml\n" in conf["content"]
    assert env["content"] == nccl_env_content({"NCCL_DEBUG": "WARN"}, ["/usr/local/nccl-rdma-sharp-plugins/lib"],
                                              topology_pinning(topo_m), "/etc/amlhpc/nccl-topo.xml")
    # The env file as written is a fact too: the submit role hands it to the job without a read.
    assert facts["nccl_env_file"] == {"path": "/etc/amlhpc/nccl.env", "content": env["content"]}
    assert plan["msg"].startswith("NCCL_TOPO_FILE=/etc/amlhpc/nccl-topo.xml from ndv4 table; GPU order ")
    assert "(from nvidia-smi topo -m)" in plan["msg"]


def test_node_plan_image_file_then_user_file_win():
    from amlhpc.nodes.nccl import node_plan
    image = node_plan(_probe(image_topo_file="/opt/microsoft/ndv4/topo.xml"), vm_size="Standard_ND96asr_v4")
    assert image["facts"]["nccl_topo_file_in_use"] == "/opt/microsoft/ndv4/topo.xml"
    assert image["files"][0]["state"] == "absent", "no copy beside the image's own file"
    assert image["facts"]["nccl_vm_size_source"] == "inventory"
    assert image["msg"].startswith("NCCL_TOPO_FILE=/opt/microsoft/ndv4/topo.xml from the image; GPU order 2,3,0,1,6,7,4,5")
    assert "(from ndv4 table)" in image["msg"]
    user = node_plan(_probe(image_topo_file="/opt/microsoft/ndv4/topo.xml"), vm_size="Standard_D4s_v5",
                     topo_file_src="my-topo.xml", topo_file_content="<system/>\n")
    assert user["facts"]["nccl_topo_file_in_use"] == "/etc/amlhpc/nccl-topo.xml"
    assert user["files"][0] == {"path": "/etc/amlhpc/nccl-topo.xml", "state": "present", "content": "<system/>\n"}
    assert user["msg"].startswith("NCCL_TOPO_FILE=/etc/amlhpc/nccl-topo.xml from my-topo.xml; no pinning facts")


def test_node_plan_refuses_a_bad_setting():
    from amlhpc.nodes.nccl import node_plan
    with pytest.raises(ValueError, match="not an environment variable name"):
        node_plan(_probe(), conf_settings={"BAD KEY": 1})
