"""Stage this node's shard of the CosmoFlow data set from Blob Storage, from inside the job.

The same planner and azcopy code as the Ansible ``stage`` role (``amlhpc.staging.shards`` and
``amlhpc.staging.azcopy``; ``workload/amlhpc`` links to ``plugins/module_utils/amlhpc``), so a node
gets the same shard whichever of the two stages it, and a stage either one started can be
finished by the other.

    from cosmoflow.stage import read_sas, stage_for_this_node
    info = stage_for_this_node(account_url="https://acct.blob.core.windows.net", container="cosmoflow",
                               stage_dir="/mnt/beeond/cosmoflow", sas=read_sas("env:COSMOFLOW_SAS"),
                               node_rank=rank, num_nodes=world_nodes)
    # or, with no token at all, the cluster's (user-assigned) managed identity:
    info = stage_for_this_node(..., auth="managed_identity", msi_client_id="<client id>", verify="checksum")

It is a sync like the Ansible stage: with the listing (the Azure SDK is in the job image),
every planned file is checked by size (and with ``verify="checksum"`` by the SHA-256 of its
content recorded by ``prepare_dataset``), only missing or wrong files are fetched, and files
whose blob is gone are reported (removed with ``prune=True``). Which files are gone, and
which another node's shard holds now, is decided from the listing itself (a set), never on
a guess; no name of the listing is written or removed outside ``stage_dir``. azcopy is
bounded as in the Ansible stage: a time limit from the staging model and a stall rule.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from amlhpc.staging.azcopy import (
    AUTH_MODES,
    ExpectedFile,
    Limits,
    ShardPlan,
    StageError,
    StageSource,
    StageWatch,
    auth_env,
    blob_url,
    check_sas,
    stage_shard,
)
from amlhpc.staging.azcopy_handoff import local_handoff
from amlhpc.sdk.blob_listing import ListingError, identity_credential, list_blobs, sdk_available
from amlhpc.staging.shards import ShardError, include_pattern, plan_shards

__all__ = ["StageError", "read_sas", "stage_for_this_node"]


def read_sas(spec: str) -> str:
    """The SAS token named by ``spec``: ``env:VAR`` (an environment variable) or ``file:PATH``.

    A literal token is refused: it would sit in the job's command line, visible to every
    user of the node in ``ps`` and kept in the job's logs.
    """
    spec = (spec or "").strip()
    if spec.startswith("env:"):
        var = spec[4:]
        value = os.environ.get(var, "").strip()
        if not value:
            raise ValueError(f"the SAS token's environment variable {var} is not set or empty")
        return value
    if spec.startswith("file:"):
        path = spec[5:]
        try:
            with open(path, encoding="utf-8") as f:
                value = f.read().strip()
        except OSError as exc:
            raise ValueError(f"cannot read the SAS token file {path}: {exc.strerror}") from exc
        if not value:
            raise ValueError(f"the SAS token file {path} is empty")
        return value
    if "sig=" in spec:
        raise ValueError("a literal SAS token was given: pass it as env:VAR or file:PATH instead, so it never "
                         "appears on a command line or in the job's logs")
    raise ValueError(f"the SAS source must be env:VAR or file:PATH, got {spec[:20]!r}")


def stage_for_this_node(*, account_url: str, container: str, stage_dir: str, sas: str = "",
                        node_rank: int, num_nodes: int, shard_mode: str = "suffix",
                        prefix: str = "", azcopy: str = "azcopy", cap_mbps: float | None = None,
                        progress: Callable[[dict[str, Any]], None] | None = None, auth: str = "sas",
                        msi_client_id: str = "", tenant_id: str = "", client_id: str = "",
                        client_secret: str = "", verify: str = "size", prune: bool = False,
                        shared: bool = True, env: dict[str, str] | None = None,
                        prune_most: bool = False, timeout: float | None = None,
                        stall_seconds: float = 60.0) -> dict[str, Any]:
    """Stage node ``node_rank``'s shard (of ``num_nodes``) into ``stage_dir``; resumable.

    ``auth`` as the Ansible stage: ``sas`` (``sas`` is in azcopy's argv while it runs),
    ``managed_identity`` (``msi_client_id`` for a user-assigned identity),
    ``service_principal`` (``tenant_id``, ``client_id``, ``client_secret``: azcopy's
    environment only) or ``azure_cli``. Returns files, bytes, seconds, skipped_existing,
    bytes_over_wire, throughput_mb_s, changed, fetched, repaired/repaired_count,
    gone/gone_count, handed/handed_count, removed and progress (see
    ``amlhpc.staging.azcopy_sync.stage_shard``). ``shared``: ``stage_dir`` is read by every node
    (BeeOND, data scope ``global``), so a file another node's shard holds now stays; with
    ``False`` (node-local scratch, data scope ``node``) this node's folder keeps only its own
    shard, and such a file is removed (``handed``): node-scope training refuses a file held
    by two nodes.
    ``progress`` gets azcopy's progress as dicts (percent, completed, total,
    bytes_over_wire, seconds). ``timeout`` (seconds; None: the staging model's time for what
    is fetched, three times, plus 300 s) and ``stall_seconds`` bound azcopy. Raises
    ``StageError`` or ``ValueError`` with a sentence naming the problem.
    """
    if not 0 <= node_rank < num_nodes:
        raise ValueError(f"node_rank {node_rank} is outside 0..{num_nodes - 1}")
    if auth not in AUTH_MODES:
        raise ValueError(f"auth must be one of {', '.join(AUTH_MODES)}, got {auth!r}")
    auth_options = {"msi_client_id": msi_client_id, "tenant_id": tenant_id, "client_id": client_id,
                    "client_secret": client_secret}
    auth_env(auth, **auth_options)  # ValueError naming what is missing
    if auth == "sas":
        sas_check = check_sas(sas, "rl")
        if sas_check.errors:
            raise StageError(" ".join(sas_check.errors))
        for warning in sas_check.warnings:
            if progress is not None:
                progress({"warning": warning})
    else:
        sas = ""
    hosts = [f"rank{r}" for r in range(num_nodes)]
    listing = None
    if shard_mode == "balanced" or sdk_available():
        if not sdk_available():
            raise StageError("balanced shard mode lists the container, which needs the Python package "
                             "azure-storage-blob; it is not installed here: install it or use shard_mode='suffix'")
        try:
            credential: Any = sas if auth == "sas" else identity_credential(auth, **auth_options)
            listing = list_blobs(account_url, container, prefix, credential=credential)
        except ListingError as exc:
            raise StageError(str(exc)) from exc
    try:
        shard = plan_shards(hosts, shard_mode, listing)[node_rank]
    except ShardError as exc:
        raise StageError(str(exc)) from exc
    expected = None
    handoff = None
    if listing is not None:
        expected = [ExpectedFile(b.name, b.raw_size, b.gzip_encoded, b.raw_sha256, b.size) for b in shard.blobs]
        if os.path.isabs(stage_dir):  # a relative one is refused by stage_shard, naming it
            handoff = local_handoff(stage_dir, node_rank,
                                    [{"name": b.name, "gzip": b.gzip_encoded} for b in shard.blobs],
                                    {b.name for b in listing}, shared=shared,
                                    suffixes=shard.suffixes if shard_mode == "suffix" else None)
    source = blob_url(account_url, container, prefix)
    kwargs: dict[str, Any] = {}
    if shard_mode == "balanced":
        kwargs["blobs"] = [b.name for b in shard.blobs]
    else:
        kwargs["include_pattern"] = include_pattern(shard.suffixes)
        if not shard.suffixes:
            kwargs = {"blobs": []}
    return stage_shard(
        StageSource(azcopy=azcopy, source_url=source, sas=sas, auth=auth, auth_options=auth_options, env=env),
        ShardPlan(stage_dir=stage_dir, rank=node_rank, expected=expected, decompress=True, verify=verify, prune=prune,
                  prune_most=prune_most, shared=shared, handoff=handoff, node=f"node {node_rank}", **kwargs),
        StageWatch(limits=Limits(timeout=timeout, nodes=num_nodes, cap_mbps=cap_mbps, stall=stall_seconds),
                   progress=progress))
