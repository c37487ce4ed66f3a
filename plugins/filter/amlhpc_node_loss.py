# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters of the node_loss role: thin wrappers around plugins/module_utils/amlhpc/recovery/node_loss.py.

Each is documented in plugins/filter/<name>.yml (ansible-doc -t filter amlhpc.azureml.<name>)."""

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.lazy_logic import logic


def _json(text: Any, default: Any) -> Any:
    if isinstance(text, (list, dict)):
        return text
    if not text:
        return default
    try:
        return json.loads(str(text))
    except ValueError as exc:
        raise AnsibleFilterError(f"not JSON: {exc}") from exc


def slots(recorded: Any, hostvars: Any, hosts: list[str]) -> dict[str, Any]:
    """The shard plan's host order from the run's nodes.json (its text, or '' on the first run)."""
    logic_ = logic("recovery.node_loss")
    return logic_.plan_slots(_json(recorded, []), logic_.current_nodes(hostvars, hosts))


def _ranked(hostvars: Any, hosts: list[str]) -> list[str]:
    return [n["host"] for n in logic("recovery.node_loss").current_nodes(hostvars, hosts)]


def last_look(hostvars: Any, all_hosts: list[str], play_hosts: list[str], job_nodes: list[str], verdict: Any,
              on_failure: str = "stop", spares: Any = 0, timeout: Any = 30, port: Any = 29400,
              check_mode: Any = False) -> dict[str, Any]:
    """The last look's decision from each job node's registered probe (node_loss_probe)."""
    probes: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    for host in job_nodes:
        hv = hostvars[host] if host in hostvars else {}
        answer, probe = hv.get("node_loss_answer") or {}, hv.get("node_loss_probe")
        # A node that did not answer in time has no probe: its answer says why.
        probes[host] = answer if answer.get("failed") else probe
        shard = ((hv.get("stage_plan") or {}).get("shards") or {}).get(host)
        expected[host] = shard.get("list_of_files") if isinstance(shard, dict) and "list_of_files" in shard else None
    addresses = {h: str((hostvars[h] if h in hostvars else {}).get("aml_private_ip") or "") for h in all_hosts}
    node_loss = logic("recovery.node_loss")
    return node_loss.last_look(
        node_loss.Look(job_nodes=list(job_nodes), in_play=list(play_hosts), probes=probes, expected=expected,
                       timeout=float(timeout), check_mode=bool(check_mode)),
        node_loss.GateRule(on_failure=str(on_failure), spares=int(spares or 0),
                           ranked=_ranked(hostvars, list(all_hosts)), addresses=addresses, port=int(port),
                           verdict=verdict or None))


def answering(hostvars: Any, hosts: list[str], on_failure: str = "stop", spares: Any = 0, timeout: Any = 30,
              port: Any = 29400) -> dict[str, Any]:
    """The look at the start of the node phases: each listed node's registered answer
    (node_loss_answer_look) decides which answer, each cluster's head, and what the gate's rule does
    with the silent ones."""
    listed, answers = [], {}
    for host in hosts:
        hv = hostvars[host] if host in hostvars else {}
        listed.append({"host": host, "cluster": str(hv.get("aml_cluster") or ""), "rank": int(hv.get("aml_node_rank") or 0),
                       "state": str(hv.get("aml_node_state") or ""), "ip": str(hv.get("aml_private_ip") or "")})
        answer = hv.get("node_loss_answer_look")
        answers[host] = answer if isinstance(answer, dict) and not answer.get("skipped") else None
    return logic("recovery.answering").answering(listed, answers, timeout=float(timeout), on_failure=str(on_failure),
                                                 spares=int(spares or 0), port=int(port))


def job_head(hostvars: Any, hosts: list[str], verdict: Any = None, look: Any = None) -> str:
    """The node whose job environment submit reads: the first in rank order that trains and answered."""
    good = (verdict or {}).get("good") if (verdict or {}).get("action") in ("pass", "exclude", "ignore") else None
    silent = [s["node"] for s in (look or {}).get("silent") or []]
    return logic("recovery.answering").job_head(_ranked(hostvars, list(hosts)), good or None, silent)


def interruption(result: Any, hostvars: Any, hosts: list[str], run: str, ended_at: Any,
                 store: str = "") -> dict[str, Any]:
    """The record of a run that lost a node, from aml_job's result (its node_loss)."""
    logic_ = logic("recovery.node_loss")
    result = result or {}
    return logic_.interruption(result.get("node_loss") or {}, run=run, run_id=str(result.get("run_id") or run),
                               ended_at=float(ended_at), hosts_by_ip=logic_.hosts_by_ip(hostvars, hosts),
                               metrics=result.get("metrics") or {}, store=store)


def resume_note(record: Any, rerun_at: Any, submitted_at: Any) -> str:
    """AMLHPC_INTERRUPTION for the resumed job: JSON text ('' without an interruption)."""
    if not record:
        return ""
    return json.dumps(logic("recovery.node_loss").resume_note(record, float(rerun_at), float(submitted_at)), sort_keys=True)


def resumed(record: Any, run_id: str, metrics: Any) -> dict[str, Any]:
    return logic("recovery.node_loss").resumed(record or {}, str(run_id), metrics or {})


def resume(record: Any, situation: Any) -> dict[str, Any]:
    """After a node loss: resume by itself (the next round of playbooks/resume.yml) or stop, and the sentence."""
    logic_ = logic("recovery.resume")
    fields = set(logic_.Situation.__dataclass_fields__)
    unknown = sorted(set(situation or {}) - fields)
    if unknown:
        raise AnsibleFilterError(f"amlhpc_node_loss_resume takes {', '.join(sorted(fields))}, not {', '.join(unknown)}")
    return logic_.decide(record or {}, logic_.Situation(**dict(situation or {})))


def report(records: Any) -> list[str]:
    return logic("recovery.node_loss").report_lines(_json(records, []))


class FilterModule:
    """amlhpc node-loss filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_node_loss_slots": slots,
            "amlhpc_node_loss_answering": answering,
            "amlhpc_node_loss_job_head": job_head,
            "amlhpc_node_loss_last_look": last_look,
            "amlhpc_node_loss_interruption": interruption,
            "amlhpc_node_loss_resume_note": resume_note,
            "amlhpc_node_loss_resumed": resumed,
            "amlhpc_node_loss_resume": resume,
            "amlhpc_node_loss_report": report,
        }
