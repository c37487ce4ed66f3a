"""Issue 50 item 3: the pair gate's filter heads its summary with the slow-link warning when it
runs iperf3 (the link-speed logic: tests/unit/plugins/module_utils/test_pair_floors.py), called
through Ansible's filter loader as the healthcheck role calls it."""

from __future__ import annotations

from ansible.plugins.loader import filter_loader, init_plugin_loader

from amlhpc.health import pair_gate, pair_gate_report


def _hostvars(speeds: dict) -> dict:
    return {h: {"healthcheck_pair_probe": {"address": f"10.0.0.{i}", "link_speed_mbps": v,
                                           "found": {"iperf3": True, "ib_write_bw": False, "nccl": False}}}
            for i, (h, v) in enumerate(speeds.items())}


def test_the_gate_heads_its_summary_with_the_slow_link_when_it_runs_iperf3():
    init_plugin_loader()
    start = filter_loader.get("amlhpc.azureml.amlhpc_pair_gate_start").j2_function
    speeds = {"h-0": 10000.0, "h-1": 10000.0, "h-2": 1000.0, "h-3": 10000.0}
    state = start(_hostvars(speeds), list(speeds), {"tool": "auto", "vm_size": "", "thresholds": {}})
    assert state["tool"] == "iperf3"
    assert pair_gate_report.summary(state)[1] == f"warning: {pair_gate.link_speed_warning(speeds)}"
    # Alike links: no warning line.
    alike = {h: 10000.0 for h in speeds}
    state = start(_hostvars(alike), list(alike), {"tool": "auto", "vm_size": "", "thresholds": {}})
    assert not any(line.startswith("warning:") for line in pair_gate_report.summary(state))
