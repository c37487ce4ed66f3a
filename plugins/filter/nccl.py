# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters for the nccl role: thin wrappers around plugins/module_utils/amlhpc/nodes/nccl.py.

amlhpc_nccl_topology(vm_size)        -> {"name", "gpu", "xml"} of the VM size's NCCL topology, or None
amlhpc_nccl_conf(settings, topo)     -> /etc/nccl.conf text
amlhpc_nccl_env(env, ld_path, pinning, topo) -> the job environment file text
amlhpc_gpu_pinning(topo_m_text, vm_size)     -> GPU-to-NUMA pinning facts (measured, else the table)
amlhpc_nccl_job(env_file_b64, conf_path, env_path) -> {"environment_variables", "mounts"} for the job
"""

from __future__ import annotations

from typing import Any, Optional

from ansible.errors import AnsibleFilterError

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.lazy_logic import logic


def nccl_topology(vm_size: Optional[str]) -> Optional[dict[str, str]]:
    nccl = logic("nodes.nccl")
    topo = nccl.topology_for_vm_size(vm_size)
    if topo is None:
        return None
    return {"name": topo.name, "gpu": topo.gpu, "xml": nccl.render_topology_xml(topo)}


def nccl_conf(settings: dict[str, Any], topo_file: Optional[str] = None) -> str:
    try:
        return logic("nodes.nccl").nccl_conf_content(settings or {}, topo_file or None)
    except ValueError as exc:
        raise AnsibleFilterError(f"nccl_conf_settings: {exc}") from exc


def nccl_env(env: dict[str, Any], ld_library_path: Optional[list[str]] = None,
             pinning: Optional[dict[str, Any]] = None, topo_file: Optional[str] = None) -> str:
    try:
        return logic("nodes.nccl").nccl_env_content(env or {}, ld_library_path or [], pinning, topo_file or None)
    except ValueError as exc:
        raise AnsibleFilterError(f"nccl_env: {exc}") from exc


def gpu_pinning(topo_text: Optional[str], vm_size: Optional[str] = None) -> dict[str, Any]:
    return logic("nodes.nccl").node_pinning(topo_text, vm_size)


def nccl_job(env_file_b64: Optional[str], conf_path: str, env_path: str) -> dict[str, Any]:
    """From the node's env file (as ansible.builtin.slurp returns it, base64) to the job's
    environment variables and read-only mounts."""
    import base64
    text = base64.b64decode(env_file_b64).decode("utf-8") if env_file_b64 else None
    try:
        return logic("nodes.nccl").job_settings(text, conf_path, env_path)
    except ValueError as exc:
        raise AnsibleFilterError(f"{env_path}: {exc}") from exc


class FilterModule:
    """nccl filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "amlhpc_nccl_topology": nccl_topology,
            "amlhpc_nccl_conf": nccl_conf,
            "amlhpc_nccl_env": nccl_env,
            "amlhpc_gpu_pinning": gpu_pinning,
            "amlhpc_nccl_job": nccl_job,
        }
