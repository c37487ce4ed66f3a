"""Issue 42, item 6: the health verdict converges. ``health.json`` lists each check of a node
once, whatever facts the gate left on the node; a node's verdict file holds no measured figure,
so a rerun with the same verdict writes the same bytes (``changed=0``)."""

from __future__ import annotations

from ansible.plugins.loader import filter_loader, init_plugin_loader

from amlhpc.health.health_verdict import node_file, verdict

init_plugin_loader()
health_verdict = filter_loader.get("amlhpc.azureml.amlhpc_health_verdict").j2_function

OK = {"check": "gpu_health", "status": "pass", "value": "0 problem(s)", "threshold": "0 problems", "reason": ""}


def pair(figure: str) -> dict:
    return {"check": "pair_link", "status": "fail", "value": f"{figure} Gb/s", "threshold": ">= 0.05 Gb/s",
            "reason": f"fails the iperf3 pair test with c-1 and c-2 (round 2: {figure} Gb/s is below the floor 0.05 Gb/s)"}


def test_health_json_lists_each_check_once():
    # As 2.1.0's role left them: the pair verdict in healthcheck_checks and in healthcheck_pair_checks.
    hostvars = {n: {"healthcheck_checks": [OK, pair("0.0094") if n == "c-0" else {**OK, "check": "pair_link"}],
                    "healthcheck_pair_checks": [pair("0.0094") if n == "c-0" else {**OK, "check": "pair_link"}],
                    "aml_node_rank": i, "aml_private_ip": f"10.0.0.{i + 4}"}
                for i, n in enumerate(["c-0", "c-1", "c-2"])}
    out = health_verdict(hostvars, list(hostvars), list(hostvars), None, {}, "exclude", 1)
    for node, doc in out["health_json"]["nodes"].items():
        names = [c["check"] for c in doc["checks"]]
        assert sorted(names) == sorted(set(names)) == ["gpu_health", "pair_link"], (node, names)


def test_the_node_file_holds_no_measured_figure():
    nodes = ["c-0", "c-1", "c-2"]
    runs = [verdict({"c-0": [OK, pair(figure)], "c-1": [OK], "c-2": [OK]}, nodes, on_failure="exclude", spares=1)
            for figure in ("0.0094", "0.0031")]
    first, second = (node_file(v, "c-0") for v in runs)
    assert first == second, (first, second)
    assert first["status"] == "excluded" and first["checks"] == ["pair_link"]
    assert "0.0094" not in str(first) and "Gb/s" not in str(first)
