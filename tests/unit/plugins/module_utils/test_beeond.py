from __future__ import annotations

import pytest

from amlhpc.azure.autoscale import autoscale_refusal
from amlhpc.nodes.beeond import (
    build_start_argv,
    build_stop_argv,
    interpret_start,
    interpret_stop,
    is_beegfs_mounted,
    nodefile_problems,
    parse_status_file,
    parse_beegfs_net,
    rdma_connections,
    read_nodefile,
    start_decision,
    tcp_fallbacks,
)

# beegfs-net output on a BeeOND client of a healthy 3-node InfiniBand cluster: the
# management connection is TCP by design, every metadata and storage one is RDMA.
NET_RDMA = """
mgmt_nodes
=============
10.0.0.4 [ID: 1]
   Connections: TCP: 1 (10.0.0.4:9008);

meta_nodes
=============
10.0.0.4 [ID: 1]
   Connections: RDMA: 1 (172.16.1.4:9005);
10.0.0.5 [ID: 2]
   Connections: RDMA: 1 (172.16.1.5:9005);

storage_nodes
=============
10.0.0.4 [ID: 1]
   Connections: RDMA: 2 (172.16.1.4:9003);
10.0.0.5 [ID: 2]
   Connections: RDMA: 2 (172.16.1.5:9003);
10.0.0.6 [ID: 3]
   Connections: <none>

"""

# The same client after one storage server fell back to TCP, and a second mount whose
# metadata connection mixes both.
NET_FALLBACK = NET_RDMA.replace(
    "10.0.0.5 [ID: 2]\n   Connections: RDMA: 2 (172.16.1.5:9003);",
    "10.0.0.5 [ID: 2]\n   Connections: TCP: 1 (10.0.0.5:9003);",
) + """
           ###################

mgmt_nodes
=============
node-a [ID: 1]
   Connections: TCP: 1 (10.1.0.4:8008);

meta_nodes
=============
node-a [ID: 1]
   Connections: RDMA: 1 (172.16.2.4:8005); TCP: 2 (10.1.0.4:8005);

storage_nodes
=============
"""


def test_start_command_line_of_the_contract():
    assert build_start_argv("/etc/amlhpc/nodefile", "/mnt/resource_nvme/beeond", "/mnt/scratch",
                            metadata_servers=2) == [
        "beeond", "start", "-n", "/etc/amlhpc/nodefile", "-d", "/mnt/resource_nvme/beeond",
        "-c", "/mnt/scratch", "-m", "2", "-F", "-P"]


def test_start_command_line_options():
    argv = build_start_argv("/n", "/d", "/c", storage_servers=4, port_shift=2000, log_dir="/var/log/b",
                            clear_data=False, pdsh=False, extra_args=["-l"], executable="/opt/beeond")
    assert argv == ["/opt/beeond", "start", "-n", "/n", "-d", "/d", "-c", "/c", "-m", "1",
                    "-s", "4", "-p", "2000", "-L", "/var/log/b", "-l"]


@pytest.mark.parametrize("kwargs, words", [
    ({"nodefile": "nodefile"}, "nodefile must be an absolute path"),
    ({"mount_point": "/mnt/x/"}, "must differ"),
    ({"metadata_servers": 0}, "at least one metadata server"),
    ({"storage_servers": 0}, "at least one storage server"),
])
def test_start_command_line_refuses_nonsense(kwargs, words):
    args = {"nodefile": "/n", "data_dir": "/mnt/x", "mount_point": "/mnt/scratch", **kwargs}
    with pytest.raises(ValueError, match=words):
        build_start_argv(**args)


def test_stop_command_line_of_the_contract():
    assert build_stop_argv("/etc/amlhpc/nodefile") == [
        "beeond", "stop", "-n", "/etc/amlhpc/nodefile", "-L", "-d", "-P"]
    assert build_stop_argv("/n", delete_data=False, delete_logs=False, pdsh=False, cleanup=True) == [
        "beeond", "stop", "-n", "/n", "-c"]
    with pytest.raises(ValueError):
        build_stop_argv("relative")


# A status file as beeond start leaves it on the head of a 2-node session (pdsh mode): one
# line <host>,<service>,<data path>,<log file>,<pid file> per service, the client's line with
# the mount point as its data path (beeond's add_to_status_file).
STATUS = ("10.0.0.4,beegfs-mgmtd,/mnt/resource_nvme/beeond/beegfs-mgmtd,"
          "/var/log/beegfs-mgmtd_20261123-010203.log,/var/run/beegfs-mgmtd-20261123-010203.pid\n"
          "10.0.0.4,beegfs-meta,/mnt/resource_nvme/beeond/beegfs-meta,"
          "/var/log/beegfs-meta_20261123-010203.log,/var/run/beegfs-meta-20261123-010203.pid\n"
          "10.0.0.4,beegfs-storage,/mnt/resource_nvme/beeond/beegfs-storage,"
          "/var/log/beegfs-storage_20261123-010203.log,/var/run/beegfs-storage-20261123-010203.pid\n"
          "10.0.0.4,beegfs-helperd,-,/var/log/beegfs-client_20261123-010203.log,"
          "/var/run/beegfs-helperd-20261123-010203.pid\n"
          "10.0.0.4,beegfs-client,/mnt/scratch,/var/log/beegfs-client_20261123-010203.log,-\n")


def test_beeond_has_no_already_running_exit_code():
    # beeond exits 1 on every error; 111 was a provisioning script's convention, not beeond's.
    verdict = interpret_start(111, "", "")
    assert verdict["failed"] and not verdict["already_mounted"] and "exit 111" in verdict["msg"]
    assert interpret_start(0)["changed"] and not interpret_start(0)["failed"]


def test_status_file_lines_are_read_as_beeond_writes_them():
    entries = parse_status_file(STATUS + "\n")
    assert [e["service"] for e in entries] == ["beegfs-mgmtd", "beegfs-meta", "beegfs-storage",
                                               "beegfs-helperd", "beegfs-client"]
    assert entries[-1] == {"host": "10.0.0.4", "service": "beegfs-client", "data_path": "/mnt/scratch",
                           "log_file": "/var/log/beegfs-client_20261123-010203.log", "pid_file": "-"}


def test_running_session_is_decided_from_the_status_file_and_the_mount():
    running = start_decision(STATUS, True, "/mnt/scratch/")
    assert running["action"] == "none" and running["already_mounted"]
    assert "running (status file /tmp/beeond.tmp lists 5 service(s))" in running["msg"]
    # A BeeGFS mount with no status file is still not started twice.
    assert start_decision(None, True, "/mnt/scratch")["action"] == "none"
    assert start_decision(None, False, "/mnt/scratch") == {
        "action": "start", "already_mounted": False, "msg": "BeeOND is not running"}


def test_a_status_file_without_the_mount_is_a_half_shut_session():
    stale = start_decision(STATUS, False, "/mnt/scratch")
    assert stale["action"] == "refuse" and not stale["already_mounted"]
    assert "beegfs-client, beegfs-helperd, beegfs-meta" in stale["msg"] and "1 host(s)" in stale["msg"]
    assert "beeond stop -n <nodefile> -L -d -c" in stale["msg"]
    # check_statusfile touches the file first: an empty one is a start that stopped half-way.
    assert "is empty" in start_decision("", False, "/mnt/scratch")["msg"]


def test_start_failures_carry_the_output_and_a_hint():
    stale = interpret_start(1, "", "ERROR: Status file /tmp/beeond.tmp on host 10.0.0.5 already exists. "
                                   "Maybe a session is already running")
    assert stale["failed"] and "exit 1" in stale["msg"] and "beeond stop" in stale["msg"]
    ssh = interpret_start(1, "", "ERROR: Host is unreachable via ssh: 10.0.0.6")
    assert "ssh_trust" in ssh["msg"]
    assert interpret_start(2)["msg"].endswith("no output")


def test_stop_results():
    assert interpret_stop(0) == {"changed": True, "failed": False, "msg": "BeeOND stopped"}
    bad = interpret_stop(1, "", "ERROR: unmount failed")
    assert bad["failed"] and "unmount failed" in bad["msg"] and "stoplocal" in bad["msg"]


def test_mount_detection_reads_proc_mounts():
    mounts = ("/dev/md0 /mnt/resource_nvme xfs rw,noatime 0 0\n"
              "beegfs_ondemand /mnt/scratch beegfs rw,relatime,cfgFile=/tmp/c 0 0\n")
    assert is_beegfs_mounted(mounts, "/mnt/scratch")
    assert is_beegfs_mounted(mounts, "/mnt/scratch/")
    assert not is_beegfs_mounted(mounts, "/mnt/resource_nvme")
    assert not is_beegfs_mounted("tmpfs /mnt/scratch tmpfs rw 0 0\n", "/mnt/scratch")


def test_parse_beegfs_net():
    nodes = parse_beegfs_net(NET_RDMA)
    assert [(n["section"], n["id"]) for n in nodes] == [
        ("mgmt_nodes", 1), ("meta_nodes", 1), ("meta_nodes", 2),
        ("storage_nodes", 1), ("storage_nodes", 2), ("storage_nodes", 3)]
    assert nodes[3]["connections"] == [{"protocol": "RDMA", "count": 2, "endpoint": "172.16.1.4:9003"}]
    assert nodes[5]["connections"] == []


def test_healthy_cluster_has_no_fallback_and_counts_rdma():
    assert tcp_fallbacks(NET_RDMA) == []
    assert rdma_connections(NET_RDMA) == 6


def test_tcp_fallback_is_named_per_server_and_mount():
    problems = tcp_fallbacks(NET_FALLBACK)
    assert problems == [
        "storage server 10.0.0.5 [ID: 2] is reached over TCP (10.0.0.5:9003), not RDMA",
        "metadata server node-a [ID: 1] is reached over TCP (10.1.0.4:8005), not RDMA",
    ]
    assert parse_beegfs_net(NET_FALLBACK)[-1]["mount"] == 1


def test_tcp_only_cluster_has_no_rdma():
    tcp_only = NET_RDMA.replace("RDMA", "TCP")
    assert rdma_connections(tcp_only) == 0
    assert len(tcp_fallbacks(tcp_only)) == 4


@pytest.mark.parametrize("low, high, words", [
    (3, 3, ""),
    ("4", 4, ""),
    (0, 4, "cluster 'gpu' autoscales (min 0, max 4); BeeOND needs min_nodes == max_nodes"),
    (None, 4, "min/max node counts are unknown"),
    ("", "", "min/max node counts are unknown"),
])
def test_autoscale_refusal(low, high, words):
    msg = autoscale_refusal("gpu", low, high)
    if words:
        assert words in msg and "beeond_enabled: false" in msg
    else:
        assert msg == ""


def test_nodefile_reading_and_checks():
    text = "# rank order\n10.0.0.4\n\n10.0.0.5  # rank 1\n"
    assert read_nodefile(text) == ["10.0.0.4", "10.0.0.5"]
    assert nodefile_problems(text, ["10.0.0.4", "10.0.0.5"]) == []
    assert "ssh_trust" in nodefile_problems("", ["10.0.0.4"])[0]
    (wrong,) = nodefile_problems("10.0.0.5\n10.0.0.4\n", ["10.0.0.4", "10.0.0.5"])
    assert "rank order are 10.0.0.4, 10.0.0.5" in wrong
    (dupe,) = nodefile_problems("10.0.0.4\n10.0.0.4\n", ["10.0.0.4", "10.0.0.5"])
    assert "more than once" in dupe
