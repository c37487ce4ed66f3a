# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""What the nccl role reads on a node (runs there, shipped by AnsiballZ with nccl_facts and
nccl_config): instance metadata, the SHARP plugin, ``nvidia-smi topo -m``, the image's
topology file."""

from __future__ import annotations

import json
import os
from typing import Any


from .nccl import topology_for_vm_size


def imds(url: str, timeout: int) -> dict[str, Any]:
    """Shaped like ansible.builtin.uri's result: ``status`` (-1 when not reached), ``json``, ``msg``."""
    # Imported here: the rest of module_utils/amlhpc is standard library only (the workload's
    # venv imports the package and has no Ansible); a module that calls this has Ansible.
    from ansible.module_utils.urls import open_url  # pylint: disable=import-outside-toplevel
    try:
        resp = open_url(url, headers={"Metadata": "true"}, timeout=timeout, use_proxy=False,
                        validate_certs=False)
        body = resp.read()
        return {"status": resp.status, "json": json.loads(body), "msg": f"OK ({len(body)} bytes)"}
    except Exception as exc:  # pylint: disable=broad-exception-caught  # what uri reports: status -1 and why
        status = getattr(exc, "code", -1)
        return {"status": status if isinstance(status, int) else -1,
                "msg": f"Status code was {status} and not [200]: Request failed: {exc}"}


def probe(module: Any, *, ask_imds: bool, imds_url: str, imds_timeout: int, sharp_plugin_dirs: list[str],
          nvidia_smi: str, vm_size: str, image_topo_files: list[str]) -> dict[str, Any]:
    """``imds``, ``sharp_plugin_dirs_found``, ``topo_m`` (rc -1 without nvidia-smi) and
    ``image_topo_file`` (the first of ``image_topo_files`` that exists for the VM size)."""
    meta = imds(imds_url, imds_timeout) if ask_imds else {"status": -1, "msg": "instance metadata not asked"}
    found = [d for d in sharp_plugin_dirs if os.path.exists(os.path.join(d, "libnccl-net.so"))]
    smi = nvidia_smi if os.path.sep in nvidia_smi else module.get_bin_path(nvidia_smi)
    topo = {"rc": -1, "stdout": ""}
    if smi:
        rc, out, _unused = module.run_command([smi, "topo", "-m"])
        topo = {"rc": rc, "stdout": out}
    if not vm_size and meta["status"] == 200:
        vm_size = str((meta.get("json") or {}).get("compute", {}).get("vmSize", ""))
    topology = topology_for_vm_size(vm_size) if vm_size else None
    image_file = ""
    if topology is not None:
        image_file = next((f for f in (t.replace("{name}", topology.name) for t in image_topo_files)
                           if os.path.exists(f)), "")
    return {"imds": meta, "sharp_plugin_dirs_found": found, "topo_m": topo, "image_topo_file": image_file}
