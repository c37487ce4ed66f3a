#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Ansible module: stage one node's shard of a data set from Blob Storage with azcopy."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: azcopy_stage
short_description: Stage one node's shard of a data set from Azure Blob Storage with azcopy, as a sync
description:
  - Brings the stage folder in line with this node's shard of the C(azcopy_shards) plan, with one
    C(azcopy copy) (C(--output-type json) progress, C(--decompress) for gzip-encoded blobs, an
    optional bandwidth cap).
  - A sync, when the plan carries the listing (C(shard.expected)). Every planned file is checked on
    disk by name and size, and with O(verify=checksum) by the SHA-256 of its content that
    C(dataset_upload) recorded in the blob's metadata. Only files that are missing or wrong are
    fetched, in one azcopy run over exactly those files (C(--list-of-files)), never the whole
    shard; the repaired ones are named in RV(repaired). Blobs that appeared since the last run are
    fetched too.
  - Files this node staged before whose blob is gone are reported (RV(gone)) and removed only with
    O(prune=true). Which files those are, and which another node's shard holds now, the controller decides
    exactly from the plan's listing (O(handoff)); no file is removed on a guess.
  - Every name of the plan and of O(handoff) is checked before anything changes, and each write and removal
    again. A name that would leave O(dest) (absolute, C(..), an empty segment, a link out of the folder) or that
    the file system cannot hold (NUL, a control character, a segment over 255 bytes) fails the stage, naming it,
    and nothing is fetched or removed. O(dest) must be an absolute path other than C(/).
  - Bounded (O(timeout), O(stall_seconds)). azcopy is stopped past its time limit or when nothing moves; the
    blobs that failed or were still open are named from azcopy's job plan (C(azcopy jobs show)) and log, with
    the fix. Whatever azcopy left of an open transfer is removed, so a rerun fetches it whole.
  - Ends with its controller. When the controller's connection closes (the controller was killed), the module
    stops azcopy's process group, removes azcopy's temporary folder and drops its lock within seconds. A stage
    that finds the lock of its shard held waits up to 60 s for it (an interrupted run's stage ending), then
    refuses naming the holder; the temporary folder of a holder that is gone (checked by pid, process start
    time and host) is removed.
  - C(changed) is true exactly when a file was fetched or removed, or the stage folder made or its mode set.
  - Resumable. azcopy writes into a hidden folder C(<dest>/.amlhpc-staging/<rank>) with
    C(--overwrite=false), so a rerun after a failure skips the files already fetched. Files are
    moved to their final names only after the whole job completed, so no half-written file ever
    sits under its final name. Files that azcopy decompressed are renamed C(*.tfrecord).
  - Without a listing in the plan (suffix mode with C(list=false)) azcopy's own count is the plan
    and a finished stage is recognised by its record C(<dest>/.amlhpc-staged/<rank>.json).
  - Authentication (O(auth)). With C(sas) the token is appended to the source URL, so it is in
    azcopy's argv for the whole transfer, readable by local users through C(ps) (azcopy takes a
    SAS no other way; the role warns once per run). With C(managed_identity), C(service_principal)
    or C(azure_cli) no token exists; azcopy logs itself in through its own
    C(AZCOPY_AUTO_LOGIN_TYPE) (C(MSI), C(SPN), C(AZCLI)) environment, and its argv holds no
    C(sig=).
  - Secrets are never written to disk. The module's action plugin runs it pipelined (module and
    arguments on the interpreter's stdin) on every connection, the local one included, and
    refuses to run when the connection or become method cannot pipeline. azcopy's job plans and
    logs go to a private temporary folder that is removed afterwards. O(sas) and
    O(client_secret) are C(no_log) and every message is redacted, so the task needs no task-level
    C(no_log), and a failure shows its reason.
  - Makes the stage folder O(dest) where it is missing (mode C(0755), and the missing folders above it,
    as M(ansible.builtin.file) with C(state=directory) would; an existing one's mode is set to C(0755));
    that alone makes the task C(changed).
  - The result carries a compact progress series (RV(progress)) for plots and the staging-time
    prediction (RV(prediction)) beside the measured RV(seconds).
  - As the C(amlhpc.azureml.stage) role's task (O(version) set), the action plugin first checks on the
    controller the role's variables against its argument spec (when the role was imported with
    C(rolespec_validate=false)), that O(shard) is set and, with O(auth=sas), that O(sas) is; a node that
    fails them is not contacted. It then makes C(stage_shard) (O(shard)), C(stage_azcopy_needed)
    (RV(needed)) and C(stage_azcopy_src_kind) (RV(src_kind)) host variables of the play, like
    M(ansible.builtin.set_fact) (not cached).
  - A rerun on node-local storage (O(shared=false)) first reads the node with one shell command, no Python and
    no secret on the node, C(<azcopy> --version) and one SHA-256 over the stage folder's sorted listing (type,
    size and path of every entry, made on the node) and over this rank's manifest. Where O(verify=size), the plan
    gives every file's size, azcopy runs as pinned and the folder holds exactly this shard and its manifest, the
    action returns the module's own result for that case (nothing fetched, removed or written) without running
    it. Anything else runs the module, which checks file by file.
version_added: "1.0.0"
author:
  - amlhpc contributors (@amlhpc)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  azcopy:
    description: Path of the azcopy binary.
    type: path
    default: azcopy
  account_url:
    description: Blob endpoint of the storage account, e.g. C(https://acct.blob.core.windows.net) or an Azurite URL.
    type: str
    required: true
  container:
    description: Container holding the data set.
    type: str
    required: true
  prefix:
    description: Folder of the data set inside the container (blob names in the shard are relative to it).
    type: str
    default: ""
  auth:
    description:
      - How azcopy authenticates. C(sas) needs O(sas); the identity modes need no secret on the node
        except O(client_secret) for C(service_principal).
      - C(managed_identity) is the AmlCompute cluster's identity (a user-assigned one by O(msi_client_id)).
    type: str
    choices: [sas, managed_identity, service_principal, azure_cli]
    default: sas
  sas:
    description: SAS token for the container (read and list), with O(auth=sas). Never logged or returned.
    type: str
  msi_client_id:
    description: Client id of the user-assigned managed identity (O(auth=managed_identity)); empty for the system-assigned one.
    type: str
    default: ""
  tenant_id:
    description: Microsoft Entra tenant id (O(auth=service_principal), optional for C(azure_cli)).
    type: str
    default: ""
  client_id:
    description: Application (client) id of the service principal (O(auth=service_principal)).
    type: str
    default: ""
  client_secret:
    description: Client secret of the service principal; given to azcopy in its environment only. Never logged.
    type: str
  dest:
    description: Stage folder on the node (may be shared by every node, e.g. BeeOND); made (C(0755)) where it is missing.
    type: path
    required: true
  rank:
    description: This node's rank; names its staging folder and record. Default the rank of O(shard).
    type: int
  version:
    description:
      - The pinned azcopy version (C(stage_azcopy_version)). When set, the module first runs
        C(<azcopy> --version) and decides as M(amlhpc.azureml.azcopy_probe) does, in the same module run
        (the stage role's one module run per node; the probe was a second one).
      - Where the pinned azcopy is to be installed (RV(needed)), the module stages nothing and makes
        nothing, and returns RV(needed) and RV(src_kind); the role installs it and runs the stage again.
        In check mode it goes on to report the pending stage (which needs no azcopy).
      - Empty, azcopy is not probed.
    type: str
    default: ""
  install:
    description:
      - With O(version), whether azcopy is to be installed where the pinned version does not run
        (C(stage_azcopy_install)); false takes any azcopy that runs.
    type: bool
    default: true
  src:
    description: With O(version), the controller path or https URL azcopy would be installed from (C(stage_azcopy_src)); empty for none.
    type: str
    default: ""
  shard:
    description:
      - This node's entry of the C(azcopy_shards) plan (C(shards[inventory_hostname])).
      - C(expected) (name, size, size after staging, SHA-256, gzip) when present makes the run a sync;
        C(suffixes) lets it find gone files in suffix mode.
    type: dict
    required: true
  handoff:
    description:
      - This node's exact lists of files outside its shard, from the plan's listing, as the stage role computes
        them on the controller from one read of the node's folder (C(stage_handoff[inventory_hostname]),
        M(amlhpc.azureml.azcopy_shards) and C(module_utils/amlhpc/staging/azcopy_handoff.py)).
      - C(handed) - files whose blob another node's shard holds now; removed with O(shared=false), kept otherwise.
        C(gone) - files whose blob no shard of the plan holds; reported, and removed only with O(prune=true).
      - Each name is checked again here before anything is removed (inside O(dest), a file there, not in this
        node's shard). Left out, no file outside the shard is reported or removed.
    type: dict
    version_added: "2.2.0"
  verify:
    description: C(size) checks every staged file's size; C(checksum) also its content (reads every file).
    type: str
    choices: [size, checksum]
    default: size
  shared:
    description:
      - Whether O(dest) is shared by every node (BeeOND, a shared mount), as the stage role's C(stage_shared).
      - V(true) (the safe default) keeps every file whose blob another node's shard holds now. On shared
        storage it is that node's file, at the path that node reads.
      - V(false) (node-local storage) makes the folder hold this node's shard and nothing of another node's,
        since node-scope training refuses a file held by two nodes. The files of O(handoff)'s C(handed) list
        are removed (RV(handed)).
    type: bool
    default: true
  prune:
    description:
      - Remove staged files whose blob is gone (default is to report them).
      - Where that would be most (more than half) of the data files staged in O(dest), the run is
        refused with a sentence naming the source, and nothing is fetched or removed (a wrong
        O(prefix) or O(container) looks like that), unless O(prune_most=true).
    type: bool
    default: false
  prune_most:
    description: With O(prune), also remove the gone files where they are most of the folder's.
    type: bool
    default: false
    version_added: "2.0.0"
  decompress:
    description: Decompress blobs whose Content-Encoding is gzip while downloading.
    type: bool
    default: true
  cap_mbps:
    description: Bandwidth cap in megabits per second (C(azcopy --cap-mbps)); 0 for none.
    type: float
    default: 0
  timeout:
    description:
      - Seconds after which azcopy is stopped; a rerun resumes.
      - V(0) (the default) derives the limit from the staging model (O(model)) for what this run fetches, its
        bytes over the wire and on disk at the model's rates with O(cap_mbps), times O(timeout_margin), plus
        300 s; six hours where the plan gives no sizes. No stage waits for ever.
    type: int
    default: 0
  timeout_margin:
    description: With O(timeout=0), how many times the staging model's time the stage may take.
    type: float
    default: 3.0
    version_added: "2.2.0"
  stall_seconds:
    description:
      - Seconds without progress (no byte over the wire, no transfer started or ended) after which azcopy is stopped,
        naming the blobs it had open; V(0) for no stall rule (the time limit still holds).
      - Once every byte of the job is in and transfers stay open, the limit is the lower of this and 20 s (a blob
        whose Content-Encoding says gzip and is not stalls C(azcopy --decompress) there).
    type: int
    default: 60
    version_added: "2.2.0"
  progress_file:
    description: File rewritten with the latest progress (JSON, no secrets) for an operator to watch, an absolute path; empty for none.
    type: path
    default: ""
  model:
    description:
      - Inputs of the staging-time model besides the plan (see C(module_utils/amlhpc/staging/azcopy_model.py)),
        all optional; C(nodes) is the plan's node count.
      - C(nic_gbps), C(egress_gbps) (the account, all nodes), C(azcopy_mb_s) (azcopy's measured per-node
        rate, uncompressed), C(decompress_mb_s) (with C(--decompress), bytes on disk), C(overhead_s).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: Reports whether a file would be fetched or removed; fetches nothing.
  diff_mode:
    support: partial
    details: Shows the stage folder made or its mode set; not the files fetched.
  platform:
    platforms: posix
notes:
  - The fetch in check mode surveys the disk as a real run does (with O(verify=checksum) it reads every file).
seealso:
  - module: amlhpc.azureml.azcopy_shards
"""

EXAMPLES = r"""
- name: Stage | Copy this node's shard with the cluster's managed identity
  amlhpc.azureml.azcopy_stage:
    azcopy: /usr/local/bin/azcopy
    account_url: https://acct.blob.core.windows.net
    container: cosmoflow
    prefix: v0.7
    auth: managed_identity
    msi_client_id: "{{ aml_cluster_identity_client_id }}"
    dest: /mnt/beeond/cosmoflow
    rank: "{{ aml_node_rank }}"
    shard: "{{ stage_plan.shards[inventory_hostname] }}"
    handoff: "{{ stage_handoff[inventory_hostname] }}"
    verify: checksum
  register: stage_result

- name: Stage | Copy this node's shard with a SAS (in azcopy's argv while it runs)
  amlhpc.azureml.azcopy_stage:
    account_url: https://acct.blob.core.windows.net
    container: cosmoflow
    sas: "{{ stage_sas }}"
    dest: /mnt/beeond/cosmoflow
    rank: "{{ aml_node_rank }}"
    shard: "{{ stage_plan.shards[inventory_hostname] }}"
  register: stage_result
"""

RETURN = r"""
files:
  description: Files of this node's shard on disk.
  returned: success
  type: int
bytes:
  description: Their bytes on disk (after decompression).
  returned: success
  type: int
fetched:
  description: Files fetched in this run (missing, new or wrong ones).
  returned: success
  type: int
fetched_files:
  description: Up to five of the files fetched in this run, by their staged names (RV(fetched) counts them all).
  returned: success
  type: list
  elements: str
  version_added: "2.0.0"
repaired:
  description: Up to five files that were on disk but wrong, each C(name (why)); why is C(size N, plan M) or C(checksum).
  returned: success
  type: list
  elements: str
  sample: ["train/univ_ics_2019-03_a10_007.tfrecord (checksum)"]
repaired_count:
  description: How many files were wrong and fetched again.
  returned: success
  type: int
gone:
  description: Up to five staged files whose blob is no longer listed.
  returned: success
  type: list
  elements: str
gone_count:
  description: How many staged files have no blob any more.
  returned: success
  type: int
handed:
  description:
    - With O(shared=false), up to five files removed because another node's shard holds their blob now
      (the cluster's nodes changed between runs).
  returned: success
  type: list
  elements: str
handed_count:
  description: How many files were handed to other nodes (removed here).
  returned: success
  type: int
removed:
  description: Files removed in this run (gone ones with O(prune=true), and handed ones).
  returned: success
  type: int
removed_files:
  description: Up to five of the files removed in this run (pruned, or handed to other nodes; RV(removed) counts them all).
  returned: success
  type: list
  elements: str
  version_added: "2.0.0"
verify:
  description: The check made, C(size) or C(checksum).
  returned: success
  type: str
bytes_over_wire:
  description: Bytes azcopy downloaded in this run.
  returned: success
  type: int
seconds:
  description: Measured wall time of this run (survey, fetch and checks).
  returned: success
  type: float
throughput_mb_s:
  description: Download rate of this run in MB/s (bytes over the wire).
  returned: success
  type: float
skipped_existing:
  description: Files already right on disk (or finished by an interrupted run), not fetched again.
  returned: success
  type: int
azcopy_runs:
  description: azcopy jobs run (0 or 1).
  returned: success
  type: int
progress:
  description:
    - This node's transfer over time, from azcopy's JSON progress; at most 64 points, evenly thinned,
      the first and the last kept. Empty when nothing was fetched.
    - C(t) seconds since the module started, C(bytes) bytes over the wire so far, C(files) files done so far.
  returned: success
  type: list
  elements: dict
  sample: [{"t": 0.52, "bytes": 0, "files": 0}, {"t": 2.51, "bytes": 1048576, "files": 96}]
prediction:
  description:
    - The staging-time model's prediction for what this run fetched, beside the measured RV(seconds).
      Empty when nothing was fetched.
    - C(seconds), C(minutes), C(bottleneck) (C(account egress), C(NIC) or C(decompression CPU)),
      C(limits_s) (the time each limit alone would take), C(nodes), C(rates) (the inputs used),
      C(wire_bytes) and C(raw_bytes) (what the prediction is for).
  returned: success
  type: dict
  sample: {"seconds": 782.2, "minutes": 13.04, "bottleneck": "decompression CPU", "nodes": 4,
           "limits_s": {"account egress": 44.0, "NIC": 453.0, "decompression CPU": 782.2}}
time_limit:
  description:
    - The seconds azcopy was given in this run (C(seconds)) and how they were found (C(how)), e.g.
      C(3 x the staging model's 12.4 s for 1.2 GB (NIC\) + 300 s). Empty when azcopy did not run.
  returned: success
  type: dict
  version_added: "2.2.0"
summary:
  description:
    - One line for the report, e.g. C(96 files, 3 fetched (2 repaired), 0 gone; 2.1 s measured, 1.9 s predicted (NIC)),
      or C(azcopy 10.32.2 is to be installed first).
  returned: success
  type: str
needed:
  description: With O(version), the pinned azcopy is to be installed first (nothing was staged then, outside check mode).
  returned: when O(version) is set
  type: bool
src_kind:
  description: With O(version), C(url-archive), C(url-binary), C(file-archive) or C(file-binary), from O(src).
  returned: when O(version) is set
  type: str
probe:
  description: With O(version), what C(<azcopy> --version) gave (C(rc), C(stdout), C(stderr)), as M(amlhpc.azureml.azcopy_probe) returns it.
  returned: when O(version) is set
  type: dict
  sample: {"rc": 0, "stdout": "azcopy version 10.32.2", "stderr": ""}
sas_warnings:
  description: Warnings about the SAS token (e.g. it grants more than read and list).
  returned: always
  type: list
  elements: str
"""

import signal

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy import (
    Cancel,
    Limits,
    ShardPlan,
    StageError,
    StageSource,
    StageWatch,
    auth_env,
    blob_url,
    check_sas,
    plan_sync,
    prune_refusal,
    redact,
    shard_is_staged,
    stage_shard,
)
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_handoff import handoff_problem
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_install import probe_install
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_model import rates_from
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_paths import folder_problem
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_sync import check_names
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_watch import ConnectionWatch
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nodes.files import ensure_folder
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.stage_read import (
    ARGUMENT_SPEC,
    REQUIRED_IF,
    expected_files,
    prediction_for,
    summary_line,
)
from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def _shard_args(shard: dict) -> dict:
    mode = shard.get("mode", "suffix")
    if mode == "balanced" or not shard.get("include_pattern"):
        return {"blobs": list(shard.get("list_of_files") or [])}
    return {"include_pattern": shard["include_pattern"]}


def probe_azcopy(module: AnsibleModule, warnings: list[str]) -> dict:
    """``<azcopy> --version`` and the install decision (the stage role's probe, as
    azcopy_probe makes it): ``needed``, ``src_kind`` and ``probe``; fails with the role's
    message where azcopy neither runs as pinned nor can be installed."""
    p = module.params
    decision, found = probe_install(module.run_command, azcopy=p["azcopy"], install=p["install"],
                                    version=p["version"], src=p["src"])
    if decision["error"]:
        module.fail_json(msg=decision["error"], probe=found, sas_warnings=warnings)
    return {"needed": decision["needed"], "src_kind": decision["src_kind"], "probe": found}


def _ended(signum: int, _frame: object) -> None:
    """SIGTERM or SIGHUP (the worker of a dead controller ends its group): unwind, so that the
    stage stops azcopy, removes its temporary folder and drops the lock on the way out."""
    raise SystemExit(128 + signum)


def limits_from(p: dict) -> Limits:
    """The stage's time limit (``timeout``, else the staging model's for what it fetches,
    ``timeout_margin`` times) and stall rule (``stall_seconds``)."""
    model = dict(p["model"] or {})
    nodes = int(model.pop("nodes", 1) or 1)
    return Limits(timeout=p["timeout"] or None, margin=p["timeout_margin"], rates=rates_from(model), nodes=nodes,
                  cap_mbps=p["cap_mbps"] or None, stall=p["stall_seconds"])


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=REQUIRED_IF,
        supports_check_mode=True,
    )
    p = module.params
    sas = (p["sas"] or "") if p["auth"] == "sas" else ""
    secrets = [s for s in (sas, p["client_secret"]) if s]
    warnings: list[str] = []
    if p["auth"] == "sas":
        check = check_sas(sas, "rl")
        warnings = check.warnings
        for warning in check.warnings:
            module.warn(warning)
        if check.errors:
            module.fail_json(msg=" ".join(check.errors), sas_warnings=warnings)
    auth_options = {"msi_client_id": p["msi_client_id"], "tenant_id": p["tenant_id"], "client_id": p["client_id"],
                    "client_secret": p["client_secret"] or ""}
    try:
        auth_env(p["auth"], **auth_options)
        limits = limits_from(p)
        if p["stall_seconds"] < 0 or p["timeout"] < 0:
            raise ValueError("timeout and stall_seconds must be 0 or above")
    except ValueError as exc:
        module.fail_json(msg=str(exc), sas_warnings=warnings)
    probed = probe_azcopy(module, warnings) if p["version"] else {}
    if probed.get("needed") and not module.check_mode:
        module.exit_json(changed=False, summary=f"azcopy {p['version']} is to be installed first",
                         sas_warnings=warnings, **probed)
    shard = p["shard"]
    rank = p["rank"] if p["rank"] is not None else shard.get("rank")
    if rank is None:
        module.fail_json(msg="No rank for this node: the shard has none and the rank option is not set. Pass this "
                         "node's entry of the azcopy_shards plan as shard (shards[inventory_hostname]: it carries "
                         "the rank), or set rank.", sas_warnings=warnings)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        module.fail_json(msg=f"The shard's rank {rank!r} is not a number 0 or above: pass this node's entry of the "
                         "azcopy_shards plan as shard, or set rank.", sas_warnings=warnings)
    if p["progress_file"] and folder_problem(p["progress_file"]):
        module.fail_json(msg=f"The progress_file {p['progress_file']!r} cannot be written: "
                         f"{folder_problem(p['progress_file'])}.", sas_warnings=warnings)
    why = handoff_problem(p["handoff"]) if p["handoff"] is not None else None
    if why:
        module.fail_json(msg=f"The handoff option {why}: pass the stage role's stage_handoff entry for this node.",
                         sas_warnings=warnings)
    shard_args = _shard_args(shard)
    expected = expected_files(shard)
    node = f"node {rank}"
    try:  # every name the plan and the handoff give, before anything changes
        check_names(stage_dir=p["dest"], node=node, expected=expected, blobs=shard_args.get("blobs"),
                    handoff=p["handoff"], decompress=p["decompress"])
    except StageError as exc:
        module.fail_json(msg=redact(str(exc), secrets), sas_warnings=warnings)
    try:
        folder = ensure_folder(p["dest"], 0o755, module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"The stage folder {p['dest']}: {exc}", sas_warnings=warnings)
    extra = {"diff": folder} if folder and module._diff else {}  # pylint: disable=protected-access
    source = blob_url(p["account_url"], p["container"], p["prefix"])
    if module.check_mode:
        if expected is None:
            staged = shard_is_staged(source_url=source, stage_dir=p["dest"], rank=rank,
                                     decompress=p["decompress"], **shard_args)
            module.exit_json(changed=not staged or folder is not None, sas_warnings=warnings, **probed, **extra)
        try:
            todo = plan_sync(stage_dir=p["dest"], rank=rank, expected=expected, decompress=p["decompress"],
                             verify=p["verify"], handoff=p["handoff"], shared=p["shared"], node=node)
        except StageError as exc:
            module.fail_json(msg=redact(str(exc), secrets), sas_warnings=warnings)
        refused = p["prune"] and not p["prune_most"] and prune_refusal(todo["gone"], expected, todo["fetch"], source,
                                                                       node)
        if refused:
            module.fail_json(msg=refused, sas_warnings=warnings)
        module.exit_json(changed=bool(todo["fetch"]) or bool(p["prune"] and todo["gone"]) or bool(todo["handed"])
                         or folder is not None,
                         would_fetch=len(todo["fetch"]), gone=todo["gone"][:5], gone_count=len(todo["gone"]),
                         handed=todo["handed"][:5], handed_count=len(todo["handed"]),
                         sas_warnings=warnings, **probed, **extra)
    cancel = Cancel()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _ended)
    try:
        with ConnectionWatch(cancel):
            result = stage_shard(
                StageSource(azcopy=p["azcopy"], source_url=source, sas=sas, auth=p["auth"], auth_options=auth_options),
                ShardPlan(stage_dir=p["dest"], rank=rank, expected=expected, decompress=p["decompress"],
                          verify=p["verify"], prune=p["prune"], prune_most=p["prune_most"], handoff=p["handoff"],
                          shared=p["shared"], node=node, **shard_args),
                StageWatch(limits=limits, cancel=cancel, progress_file=p["progress_file"] or None))
        result["prediction"] = prediction_for(result, p["model"])
    except (StageError, OSError, ValueError) as exc:
        module.fail_json(msg=redact(str(exc), secrets), sas_warnings=warnings)
    result["summary"] = summary_line(result)
    result["changed"] = bool(result.get("changed")) or folder is not None
    module.exit_json(sas_warnings=warnings, **result, **probed, **extra)


if __name__ == "__main__":
    main()
