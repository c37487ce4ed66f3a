"""Issue 47 item 2: the ``amlhpc_node_loss_last_look`` filter keeps its Jinja signature while the
logic under it takes two small objects (``Look``, ``GateRule``). The filter is called as the role
calls it (positional arguments, then keywords), through Ansible's filter loader, and says what it
said before: a node that did not answer right before submit is named and left out with a spare."""

from __future__ import annotations

from ansible.plugins.loader import filter_loader, init_plugin_loader

init_plugin_loader()
last_look = filter_loader.get("amlhpc.azureml.amlhpc_node_loss_last_look").j2_function

NODES = [f"c-{i}" for i in range(4)]


def hostvars(answers: dict) -> dict:
    return {h: {"aml_node_rank": i, "aml_private_ip": f"10.0.0.{i + 4}", "aml_cluster": "gpu",
                "node_loss_answer": answers.get(h, {"changed": False}),
                "node_loss_probe": {"rc": 0, "stdout": f"train/a_{i:03d}.tfrecord\n", "changed": False},
                "stage_plan": {"shards": {h: {"list_of_files": [f"train/a_{i:03d}.tfrecord.gz"]}}}}
            for i, h in enumerate(NODES)}


def test_the_filter_names_a_silent_node_and_leaves_it_out_with_a_spare():
    hv = hostvars({"c-2": {"failed": True, "msg": "timed out waiting for ping module test"}})
    out = last_look(hv, NODES, NODES, NODES, {"failing": []}, "exclude", 1, 45, 29400)
    assert out["lost"] == [{"node": "c-2", "reason": "did not answer within 45 s right before submit"}]
    assert out["action"] == "exclude" and out["restage"] == ["c-0", "c-1", "c-3"]
    assert out["verdict"]["rendezvous"] == "10.0.0.4:29400"
    assert out["message"] == ("node c-2 was lost after the health gate: it did not answer within 45 s right before "
                              "submit. Left out (healthcheck_spare_nodes: 1): its shard moves to c-0, c-1, c-3, and "
                              "the job trains on them.")


def test_the_filter_passes_when_every_node_answers_and_in_check_mode_asks_only_an_answer():
    hv = hostvars({})
    assert last_look(hv, NODES, NODES, NODES, None)["action"] == "pass"
    for h in NODES:
        hv[h]["node_loss_probe"] = {"rc": 1, "stdout": "", "stderr": "find: no such folder", "changed": False}
    assert last_look(hv, NODES, NODES, NODES, None, check_mode=True)["lost"] == []
    out = last_look(hv, NODES, NODES[:3], NODES, None, on_failure="stop")
    assert out["action"] == "stop" and [n["node"] for n in out["lost"]] == NODES
    assert "stopped answering after the health gate" in out["message"]
