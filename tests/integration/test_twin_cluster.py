"""The cluster phase (playbooks/cluster.yml, the aml_cluster role) and its teardown on the
AmlCompute twin, through either SDK, as a user runs them.

The inventory and the cluster settings are the user's examples
(``inventory/examples/v2-cli.azureml_compute.yml`` or ``v1-env.azureml_compute.yml``, and
``group_vars/all/aml_cluster.yml``) filled in for the twin. The cluster's API is the twin's
stand-in (``tests/twin/azureml.py`` ``TwinWorld``): the compute's REST payload lives in a state
file and its nodes are the twin's containers, so a scale the module asks for really adds or
removes nodes. azure-ai-ml runs for real over a transport that answers from it;
azureml-core's Workspace/AmlCompute are the unit tests' fakes over it, with the SDK's own
readers (``tests/azureml_fakes.py``). Azure itself is not reached: the payloads are
hand-written after the REST API's.

* no cluster yet: the inventory is empty, the cluster play creates the cluster (2 new
  machines), waits for their sshd banners, reads the inventory again, and a play reaches them;
* the cluster at its size: nothing changes;
* one more node: the cluster is scaled, a new container comes up, and a play after the
  refresh reaches all three nodes with host keys checked;
* the nodes' identity (``aml_cluster_identity_resource_id``) on a cluster made without it:
  check mode shows it and changes nothing; a run adds it; the next run changes nothing;
* the teardown (``playbooks/teardown.yml``, ``make teardown``) leaves the nodes unchanged
  (BeeOND off, no GPU), scales to 0 and waits until no node is left (the containers are gone).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_multinode import ANSIBLE_PLAYBOOK, recap, twin_env

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from azureml_fakes import SUB  # noqa: E402
from twin.cluster import ADMIN_USER, Twin, docker, free_base_port  # noqa: E402

CLUSTER = "tw-gpu"
# The example inventory of each SDK, and the service principal the v1 one reads from the
# environment (fake values: the stand-in takes any).
EXAMPLES = {"azure-ai-ml": "v2-cli.azureml_compute.yml", "azureml-core": "v1-env.azureml_compute.yml"}
SP_SECRET = "twin-sp-secret-not-for-logs"
SP_ENV = {"AZURE_CLIENT_ID": "11111111-2222-3333-4444-555555555555", "AZURE_SECRET": SP_SECRET,
          "AZURE_TENANT": "66666666-7777-8888-9999-000000000000", "AZURE_SUBSCRIPTION_ID": SUB}
IDENTITY = (f"/subscriptions/{SUB}/resourceGroups/rg-hpc/providers/Microsoft.ManagedIdentity/"
            "userAssignedIdentities/stage-reader")


@pytest.fixture()
def twin(tmp_path):
    # No node yet: the cluster does not exist until the cluster phase makes it.
    t = Twin(0, tmp_path / "twin", prefix="amlhpc-twin-cl", base_port=free_base_port(3))
    try:
        yield t.start()
    finally:
        t.stop()


def user_files(twin: Twin, where: Path, sdk: str) -> tuple[Path, Path]:
    """The examples, filled in for the twin: the inventory file and the stand-in's state."""
    example = yaml.safe_load((ROOT / "inventory" / "examples" / EXAMPLES[sdk]).read_text())
    example.update({"clusters": [{"name": CLUSTER}], "cache": False, "known_hosts_file": str(where / "known_hosts")})
    if sdk == "azure-ai-ml":
        example["subscription_id"] = SUB
    inv = where / "inventory" / f"{CLUSTER}.azureml_compute.yml"
    (inv.parent / "group_vars" / "all").mkdir(parents=True)
    inv.write_text(yaml.safe_dump(example))
    settings = yaml.safe_load((ROOT / "inventory" / "examples" / "group_vars" / "all" / "aml_cluster.yml").read_text())
    settings.update({"aml_cluster_name": CLUSTER, "aml_cluster_node_count": 2, "aml_cluster_sdk": sdk,
                     "aml_cluster_wait_timeout": 120,
                     "aml_cluster_ssh_public_key_file": str(twin.key.with_suffix(".pub")),
                     "ansible_ssh_private_key_file": str(twin.key)})
    (inv.parent / "group_vars" / "all" / "aml_cluster.yml").write_text(yaml.safe_dump(settings))
    # The workspace has no cluster of that name yet (no compute, no node).
    state = where / "azureml.json"
    state.write_text(json.dumps({"twin": str(twin.save_state(where / "twin.json")), "cluster": CLUSTER,
                                 "workspace": "ws-hpc", "jobs": {}, "computes": {}}))
    return inv, state


def play(project: Path, inv: Path, state: Path, *args: str) -> subprocess.CompletedProcess:
    # The role's auth_source auto takes the service principal from the environment (v1's
    # example reads it too); the v2 example logs in with the CLI's credential.
    env = {**twin_env(state, project), **SP_ENV}
    run = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), *args], cwd=project, env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert SP_SECRET not in run.stdout + run.stderr
    return run


def compute(state: Path) -> dict:
    return json.loads(state.read_text())["computes"][CLUSTER]


def containers(twin: Twin) -> int:
    return len(docker("ps", "-q", "--filter", f"label=amlhpc.twin={twin.prefix}").split())


@pytest.mark.parametrize("sdk", ["azure-ai-ml", "azureml-core"])
def test_cluster_phase_and_teardown_on_the_twin(twin, tmp_path, project, sdk):
    inv, state = user_files(twin, tmp_path, sdk)
    # After the cluster play, a play on the nodes as the inventory now lists them.
    reach = tmp_path / "reach.yml"
    reach.write_text(yaml.safe_dump([{"name": "Reach", "hosts": "aml_nodes", "gather_facts": False,
                                      "tasks": [{"name": "Ping", "ansible.builtin.ping": {}}]}]))
    cluster_yml = str(ROOT / "playbooks" / "cluster.yml")

    # From nothing: the inventory is empty (with a warning), the cluster play makes the cluster
    # (2 new machines), waits for their sshd, reads the inventory again, and the next play
    # reaches both nodes.
    made = play(project, inv, state, cluster_yml, str(reach))
    assert recap(made.stdout)["localhost"]["changed"] == 1, made.stdout[-4000:]
    assert f"cluster '{CLUSTER}': create; 2 node(s) idle" in made.stdout
    said = " ".join((made.stdout + made.stderr).split())
    assert f"cluster '{CLUSTER}' was not found in workspace 'ws-hpc': playbooks/cluster.yml creates it" in said
    assert {h: r["ok"] for h, r in recap(made.stdout).items() if h != "localhost"} == {
        f"{CLUSTER}-0": 1, f"{CLUSTER}-1": 1}
    assert containers(twin) == 2
    props = compute(state)["properties"]["properties"]
    assert props["vmSize"].lower() == "standard_nd96asr_v4" and props["vmPriority"] == "Dedicated"
    assert props["userAccountCredentials"] == {"adminUserName": ADMIN_USER,
                                               "adminUserSshPublicKey": twin.key.with_suffix(".pub").read_text().strip()}
    assert "identity" not in compute(state)

    same = play(project, inv, state, cluster_yml, str(reach))
    assert recap(same.stdout)["localhost"]["changed"] == 0, same.stdout[-4000:]
    assert f"cluster '{CLUSTER}': none; 2 node(s) idle" in same.stdout
    assert {h: r["ok"] for h, r in recap(same.stdout).items() if h != "localhost"} == {
        f"{CLUSTER}-0": 1, f"{CLUSTER}-1": 1}

    # One more node: AmlCompute (the twin) brings up a new machine at the next NAT port; the
    # inventory read after the scale has it, its host key is scanned, the play reaches it.
    grown = play(project, inv, state, cluster_yml, str(reach), "-e", "aml_cluster_node_count=3")
    assert recap(grown.stdout)["localhost"]["changed"] == 1
    assert f"cluster '{CLUSTER}': update (min_nodes 2 -> 3, max_nodes 2 -> 3); 3 node(s) idle" in grown.stdout
    assert containers(twin) == 3
    scale = compute(state)["properties"]["properties"]["scaleSettings"]
    assert (scale["minNodeCount"], scale["maxNodeCount"]) == (3, 3)
    assert sorted(h for h in recap(grown.stdout) if h != "localhost") == [f"{CLUSTER}-{i}" for i in range(3)]
    assert all(r["unreachable"] == 0 and r["failed"] == 0 for r in recap(grown.stdout).values())

    # The nodes' identity, on a cluster made without it. Check mode: shown, not changed.
    ident = ["-e", "aml_cluster_node_count=3", "-e", f"aml_cluster_identity_resource_id={IDENTITY}"]
    dry = play(project, inv, state, cluster_yml, *ident, "--check", "--diff")
    assert recap(dry.stdout)["localhost"]["changed"] == 1
    assert re.search(r'\+\s+"' + re.escape(IDENTITY) + '"', dry.stdout), dry.stdout[-4000:]
    assert "identity" not in compute(state)
    added = play(project, inv, state, cluster_yml, *ident)
    assert recap(added.stdout)["localhost"]["changed"] == 1
    assert f"cluster '{CLUSTER}': update (identity [] -> ['{IDENTITY}']); 3 node(s) idle" in added.stdout
    identity = compute(state)["identity"]
    assert identity["type"] == "UserAssigned" and [k.lower() for k in identity["userAssignedIdentities"]] == [
        IDENTITY.lower()]
    again = play(project, inv, state, cluster_yml, *ident)
    assert recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-4000:]

    # The teardown: min 0 and a short idle time; it waits until AmlCompute let the nodes go.
    # make teardown: BeeOND (off) and the GPU clocks (no GPU on the twin) on the nodes, then
    # the cluster to 0.
    down = play(project, inv, state, str(ROOT / "playbooks" / "teardown.yml"))
    counts = recap(down.stdout)
    assert counts["localhost"]["changed"] == 1
    assert {h: (r["changed"], r["failed"], r["unreachable"]) for h, r in counts.items() if h != "localhost"} == {
        f"{CLUSTER}-{i}": (0, 0, 0) for i in range(3)}, down.stdout[-4000:]
    assert containers(twin) == 0
    from azureml.core.compute.amlcompute import ScaleSettings  # the SDK's own ISO 8601 reading (PT2M, PT120S)
    scale = ScaleSettings.deserialize(compute(state)["properties"]["properties"]["scaleSettings"])
    assert (scale.minimum_node_count, scale.maximum_node_count, scale.idle_seconds_before_scaledown) == (0, 3, 120)
    assert "0 node(s) left" in down.stdout or "no node left" in down.stdout, down.stdout[-4000:]
