"""The controller's known_hosts for AmlCompute nodes, with real sshd and real ssh-keyscan.

Two sshd containers stand in for the nodes (one address, a NAT port each). Host key checking
stays on (ansible.cfg); the azureml_compute plugin keeps the known_hosts file:

* first run: no prompt (stdin closed, nothing answers a question), every node reached;
* AmlCompute replaced a node (a new container, new host keys, the same port, a new node id):
  a warning names the node and the run reaches it;
* the host key changed while the node id did not (what a man in the middle looks like): ssh
  refuses the node;
* the same after known_hosts was edited by hand (the node's lines deleted, the file emptied):
  the pin in the plugin's record decides, the refusal names the node and the fix, and the fix
  (AMLHPC_KNOWN_HOSTS_REPIN) lets a node the operator knows was re-imaged in;
* a node AmlCompute replaced behind a NAT rule that drops the old connection's packets is
  reached at once, through a new ssh master (an ansible_control_path of its own node id).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from project_copy import make_project_copy, project_env  # noqa: E402
from twin.cluster import ADMIN_USER, Twin, free_base_port  # noqa: E402
from twin.nat import NatRule  # noqa: E402

ANSIBLE = str(Path(sys.executable).parent / "ansible")


@pytest.fixture()
def cluster(tmp_path):
    c = Twin(2, tmp_path / "cluster", prefix="inv-kh", base_port=free_base_port(2))
    try:
        yield c.start()
    finally:
        c.stop()


def write_inventory(tmp_path: Path, cluster: Twin, node_ids: dict[int, str] | None = None,
                    empty: bool = False) -> Path:
    """The twin's list_nodes(); ``node_ids`` (slot -> id) makes a node claim another id;
    ``empty``: the answer AmlCompute gives for a cluster scaled to 0, or a transient one."""
    payload = [] if empty else cluster.list_nodes()
    for node, record in zip(cluster.nodes, payload):
        record["nodeId"] = (node_ids or {}).get(node.slot, record["nodeId"])
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "nodes.json").write_text(json.dumps(payload))
    # What a user writes: the plugin file and the key to log in with. Nothing about host keys.
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump({"ansible_ssh_private_key_file": str(cluster.key)}))
    config = inv / "kh.azureml_compute.yml"
    config.write_text(yaml.safe_dump({"plugin": "amlhpc.azureml.azureml_compute", "source": "nodes_file", "cluster": "kh",
                                      "nodes_file": "nodes.json", "admin_user": ADMIN_USER,
                                      "known_hosts_file": str(tmp_path / "controller_known_hosts")}))
    return config


def short_dir(tmp_path: Path) -> Path:
    """A folder of this test's with a short path, for ssh's control sockets: a Unix socket's path
    holds 108 bytes, and pytest-xdist's popen-gwN/ in tmp_path took the test past them."""
    return Path(tempfile.gettempdir()) / f"kh-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:10]}"


@pytest.fixture(autouse=True)
def _short_dir_removed(tmp_path):
    yield
    shutil.rmtree(short_dir(tmp_path), ignore_errors=True)


def ansible_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Ansible's environment in the test's project folder (tmp_path/project: run it with that cwd)."""
    project = make_project_copy(tmp_path / "project")
    return project_env(project, ANSIBLE_FORCE_COLOR="0", ANSIBLE_SSH_CONTROL_PATH_DIR=str(short_dir(tmp_path) / "cp"),
                       **extra)


def ping(tmp_path: Path, config: Path, **extra: str) -> subprocess.CompletedProcess:
    # stdin closed: a host key prompt would fail the run (under ansible-runner it hangs).
    return subprocess.run([ANSIBLE, "-i", str(config), "aml_nodes", "-m", "ansible.builtin.ping"], cwd=tmp_path / "project",
                          env=ansible_env(tmp_path, **extra), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=180, check=False)


def test_host_keys_follow_the_nodes_with_checking_on(tmp_path, cluster):
    known = tmp_path / "controller_known_hosts"
    node1 = cluster.ranked()[1]  # kh-1

    first = ping(tmp_path, write_inventory(tmp_path, cluster))
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count("SUCCESS") == 2, first.stdout + first.stderr
    assert "Are you sure you want to continue connecting" not in first.stdout + first.stderr
    for node in cluster.nodes:
        assert f"[127.0.0.1]:{node.port} ssh-ed25519 " in known.read_text()
    old_line = [line for line in known.read_text().splitlines() if f":{node1.port} ssh-ed25519" in line]

    # AmlCompute replaced node 1: a new machine (new host keys) at the same port, a new node id.
    new = cluster.replace_node(node1.slot)
    second = ping(tmp_path, write_inventory(tmp_path, cluster))
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.count("SUCCESS") == 2, second.stdout + second.stderr
    assert (f"node kh-1 at [127.0.0.1]:{new.port} was replaced by AmlCompute "
            f"(node id {node1.node_id} -> {new.node_id})") in " ".join((second.stderr + second.stdout).split())
    assert old_line[0] not in known.read_text()

    # The key changes again but the node id stays: that is not AmlCompute, ssh refuses the node.
    newer = cluster.replace_node(new.slot)
    third = ping(tmp_path, write_inventory(tmp_path, cluster, {newer.slot: new.node_id}))
    out = third.stdout + third.stderr
    assert third.returncode != 0, out
    assert "kh-0 | SUCCESS" in out and "kh-1 | UNREACHABLE" in out, out
    # OpenSSH's words, or Ansible's when Mitogen for Ansible runs the connection.
    refusals = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "Host key verification failed",
                "SSH reported an unrecognized or mismatching host key")
    assert any(said in out for said in refusals), out

    # A read that lists no node at all (a cluster scaled to 0, a transient answer) forgets no
    # pinned key: after it, the same key change under the same node id is refused still.
    pinned = known.read_text()
    empty = subprocess.run([ANSIBLE.replace("/ansible", "/ansible-inventory"), "-i",
                            str(write_inventory(tmp_path, cluster, empty=True)), "--list"], cwd=tmp_path / "project",
                           env=ansible_env(tmp_path), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=180, check=False)
    assert "has no nodes" in " ".join((empty.stdout + empty.stderr).split()), empty.stdout + empty.stderr
    assert known.read_text() == pinned
    fourth = ping(tmp_path, write_inventory(tmp_path, cluster, {newer.slot: new.node_id}))
    out = fourth.stdout + fourth.stderr
    assert fourth.returncode != 0 and "kh-0 | SUCCESS" in out and "kh-1 | UNREACHABLE" in out, out
    assert any(said in out for said in refusals), out
    assert known.read_text() == pinned


def masters_for(control_dir: Path) -> list[int]:
    """Pids of the ssh ControlPersist masters whose sockets live in ``control_dir``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if args.startswith("ssh: ") and str(control_dir) in args and "[mux]" in args:
                pids.append(int(proc.name))
    return pids


def test_a_replaced_node_behind_a_nat_rule_is_not_reached_through_the_old_connection(tmp_path, cluster):
    """A load balancer drops the packets of a connection to a VM it no longer routes to, and
    closes nothing. The controller's ControlPersist master to the old node would wait for
    its keepalives to fail (minutes) before ssh tried the new node; the inventory gives every
    host a ControlPath of its own node id, so the new node gets a new master."""
    node = cluster.ranked()[0]
    rule = NatRule((cluster.public_address, node.port))
    try:
        def inventory() -> Path:
            config = write_inventory(tmp_path, cluster)
            nodes = json.loads((config.parent / "nodes.json").read_text())
            for record in nodes:
                if record["nodeId"] == cluster.ranked()[0].node_id:
                    record["port"] = rule.port  # kh-0 reached through the NAT rule
            (config.parent / "nodes.json").write_text(json.dumps(nodes))
            return config

        first = ping(tmp_path, inventory())
        assert first.returncode == 0, first.stdout + first.stderr
        old_masters = masters_for(short_dir(tmp_path) / "cp")
        assert len(old_masters) == 2, old_masters  # one per node, kept for the next run
        assert rule.drop_flows() == 1  # the master to kh-0; AmlCompute replaces the VM behind it
        cluster.replace_node(node.slot)

        # The old master stays until its keepalives fail (about two minutes), but kh-0 now has
        # another node id, hence another ControlPath: the next run does not go through it.
        started = time.monotonic()
        second = ping(tmp_path, inventory())
        took = time.monotonic() - started
        assert second.returncode == 0 and second.stdout.count("SUCCESS") == 2, second.stdout + second.stderr
        # Through the dead master it took about two minutes (keepalives); 75 s leaves a loaded
        # 2-core machine room for the inventory read, the new node's scan and the two pings.
        assert took < 75, took
        assert len(set(masters_for(short_dir(tmp_path) / "cp")) - set(old_masters)) == 1  # kh-0's new master
    finally:
        rule.close()


def test_a_key_change_after_editing_known_hosts_is_refused(tmp_path, cluster):
    """The reviewer's case on real sshd: delete one node's lines from known_hosts, then change
    that node's key under the same node id; then empty the file. The pin in the plugin's record
    decides: the node is refused each time, the warning names it and the fix, and the fix lets
    a node the operator knows was re-imaged in."""
    known = tmp_path / "controller_known_hosts"
    node1 = cluster.ranked()[1]  # kh-1
    first = ping(tmp_path, write_inventory(tmp_path, cluster))
    assert first.returncode == 0 and first.stdout.count("SUCCESS") == 2, first.stdout + first.stderr
    said = " ".join((first.stdout + first.stderr).split())
    assert "2 new node id(s) trusted on first use" in said and node1.node_id in said, said
    pinned = known.read_text()

    known.write_text("".join(line + "\n" for line in pinned.splitlines() if f":{node1.port} " not in line))
    new = cluster.replace_node(node1.slot)  # new host keys; the inventory below keeps the old node id
    refusals = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "Host key verification failed",
                "SSH reported an unrecognized or mismatching host key")
    for edit in ("deleted", "emptied"):
        if edit == "emptied":
            known.write_text("")
        run = ping(tmp_path, write_inventory(tmp_path, cluster, {new.slot: node1.node_id}))
        out = run.stdout + run.stderr
        assert run.returncode != 0 and "kh-0 | SUCCESS" in out and "kh-1 | UNREACHABLE" in out, (edit, out)
        assert any(said in out for said in refusals), (edit, out)
        sentence = " ".join(out.split())
        assert (f"node kh-1 (node id {node1.node_id} at [127.0.0.1]:{new.port}) offers host key "
                in sentence and "ssh-ed25519 SHA256:" in sentence), (edit, sentence)
        assert f"AMLHPC_KNOWN_HOSTS_REPIN={node1.node_id}" in sentence, sentence
        assert known.read_text() == pinned, edit  # put back from the pin, not scanned and trusted

    # The operator knows kh-1 was re-imaged: one run with the fix pins it again, and it answers.
    repinned = ping(tmp_path, write_inventory(tmp_path, cluster, {new.slot: node1.node_id}),
                    AMLHPC_KNOWN_HOSTS_REPIN=node1.node_id)
    assert repinned.returncode == 0 and repinned.stdout.count("SUCCESS") == 2, repinned.stdout + repinned.stderr
    assert "pinned again as known_hosts_repin asks" in " ".join((repinned.stdout + repinned.stderr).split())
    assert cluster.host_key(new).split()[1] in known.read_text()


@pytest.fixture()
def pinned_cluster(tmp_path):
    c = Twin(2, tmp_path / "cluster", prefix="inv-khpin", base_port=free_base_port(2, start=52600))
    try:
        yield c.start()
    finally:
        c.stop()


def rekey_in_place(cluster: Twin, node) -> None:
    """New host keys on the same machine under the same node id (what a man in the middle, or a
    node re-imaged behind AmlCompute's back, looks like); sshd re-reads them, its sessions stay."""
    before = cluster.host_key(node)
    done = cluster.exec(node, "sh", "-c", "rm -f /etc/ssh/ssh_host_* && ssh-keygen -A && kill -HUP 1")
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        result = subprocess.run(["ssh-keyscan", "-T", "2", "-t", "ed25519", "-p", str(node.port), "127.0.0.1"],
                                capture_output=True, text=True, check=False)
        if result.stdout.split()[1:3] and " ".join(result.stdout.split()[1:3]) != before:
            return
        time.sleep(0.5)
    raise AssertionError("sshd did not come back with its new host key")


def test_host_key_checking_off_lets_no_re_keyed_node_in(tmp_path, pinned_cluster):
    """The issue's case on real sshd: ANSIBLE_HOST_KEY_CHECKING=False, as CI often sets it, and a
    node re-keyed under its pinned node id. Ansible's StrictHostKeyChecking=no would come first on
    ssh's command line; the inventory's host vars turn host key checking back on, so ssh refuses
    the node. And where the inventory compares the live key and says ssh refuses it, it closes the
    node's ssh master, which ControlPersist would otherwise keep using without checking anything."""
    refusals = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "Host key verification failed")
    config = write_inventory(tmp_path, pinned_cluster)

    def run(control_dir: str, **extra: str) -> tuple[int, str]:
        env = dict(ansible_env(tmp_path), ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_SSH_CONTROL_PATH_DIR=control_dir,
                   **extra)
        done = subprocess.run([ANSIBLE, "-i", str(config), "aml_nodes", "-m", "ansible.builtin.ping"], cwd=tmp_path / "project",
                              env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180,
                              check=False)
        return done.returncode, done.stdout + done.stderr

    kept = str(short_dir(tmp_path) / "cp")
    rc, out = run(kept)
    assert rc == 0 and out.count("SUCCESS") == 2, out
    assert len(masters_for(short_dir(tmp_path) / "cp")) == 2, out
    node1 = pinned_cluster.ranked()[1]  # kh-1
    rekey_in_place(pinned_cluster, node1)

    # No ssh master in play (a control path folder of its own): ssh itself refuses the node.
    rc, out = run(str(short_dir(tmp_path) / "cp-fresh"))
    assert rc != 0 and "kh-0 | SUCCESS" in out and "kh-1 | UNREACHABLE" in out, out
    assert any(said in out for said in refusals), out

    # The old master is still there; the inventory compares the live keys, names kh-1, closes it.
    rc, out = run(kept, AMLHPC_KNOWN_HOSTS_VERIFY="always")
    sentence = " ".join(out.split())
    assert f"node kh-1 (node id {node1.node_id} at [127.0.0.1]:{node1.port}) offers host key" in sentence, out
    assert rc != 0 and "kh-0 | SUCCESS" in out and "kh-1 | UNREACHABLE" in out, out
    assert any(said in out for said in refusals), out
