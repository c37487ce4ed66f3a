#!/usr/bin/python
"""Ansible module: stage one node's shard of a data set from Blob Storage with azcopy."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: azcopy_stage
short_description: Stage one node's shard of a data set from Azure Blob Storage with azcopy
description:
  - Runs one C(azcopy copy) for this node's shard (from the C(azcopy_shards) plan), with
    C(--output-type json) progress, C(--decompress) for gzip-encoded blobs and an optional
    bandwidth cap.
  - Resumable. azcopy writes into a hidden folder C(<dest>/.amlhpc-staging/<rank>) with
    C(--overwrite=false), so a rerun after a failure skips the files already fetched. Files
    are moved to their final names only after the whole job completed, so no half-written
    file ever sits under its final name.
  - Files that azcopy decompressed are renamed C(*.tfrecord) (azcopy 10.32 keeps C(.gz)).
  - Afterwards the staged files are checked against the plan (count, and bytes when the
    listing knows them); a difference fails with the names.
  - A finished stage is recorded in C(<dest>/.amlhpc-staged/<rank>.json); a rerun with the
    same shard changes nothing.
  - The SAS token is passed to azcopy in its argv only. azcopy's job plans and logs go to a
    private temporary folder that is removed afterwards. O(sas) is C(no_log) and every
    message is redacted, so the task needs no task-level C(no_log), and a failure shows its reason.
version_added: "0.1.0"
author: amlhpc
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
  sas:
    description: SAS token for the container (read and list). Never logged or returned.
    type: str
    required: true
  dest:
    description: Stage folder on the node (may be shared by every node, e.g. BeeOND).
    type: path
    required: true
  rank:
    description: This node's rank; names its staging folder and record.
    type: int
    required: true
  shard:
    description:
      - This node's entry of the C(azcopy_shards) plan (C(shards[inventory_hostname])).
      - Uses C(include_pattern) in suffix mode and C(list_of_files) in balanced mode; C(expected)
        (name, size after staging, gzip) when present enables the check against the plan.
    type: dict
    required: true
  decompress:
    description: Decompress blobs whose Content-Encoding is gzip while downloading.
    type: bool
    default: true
  cap_mbps:
    description: Bandwidth cap in megabits per second (C(azcopy --cap-mbps)); 0 for none.
    type: float
    default: 0
  timeout:
    description: Seconds after which azcopy is stopped (0 for no limit). A rerun resumes.
    type: int
    default: 0
  progress_file:
    description: File rewritten with the latest progress (JSON, no secrets) for an operator to watch; empty for none.
    type: path
    default: ""
notes:
  - Supports check mode (reports whether the shard would be staged).
seealso:
  - module: azcopy_shards
"""

EXAMPLES = r"""
- name: Stage | Copy this node's shard
  azcopy_stage:
    azcopy: /usr/local/bin/azcopy
    account_url: https://acct.blob.core.windows.net
    container: cosmoflow
    prefix: v0.7
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
bytes_over_wire:
  description: Bytes azcopy downloaded in this run.
  returned: success
  type: int
seconds:
  description: Wall time of this run.
  returned: success
  type: float
throughput_mb_s:
  description: Download rate of this run in MB/s (bytes over the wire).
  returned: success
  type: float
skipped_existing:
  description: Files a previous, interrupted run had fetched already (not fetched again).
  returned: success
  type: int
progress:
  description: azcopy progress samples (about one per 10 %).
  returned: success
  type: list
  elements: dict
sas_warnings:
  description: Warnings about the SAS token (e.g. it grants more than read and list).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.amlhpc.azcopy import (  # noqa: E402
    ExpectedFile,
    StageError,
    blob_url,
    check_sas,
    redact,
    shard_is_staged,
    stage_shard,
)
from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def _shard_args(shard: dict) -> dict:
    mode = shard.get("mode", "suffix")
    if mode == "balanced" or not shard.get("include_pattern"):
        return {"blobs": list(shard.get("list_of_files") or [])}
    return {"include_pattern": shard["include_pattern"]}


def _expected(shard: dict) -> list[ExpectedFile] | None:
    rows = shard.get("expected")
    if rows is None:
        return None
    return [ExpectedFile(r["name"], r.get("raw_size"), bool(r.get("gzip"))) for r in rows]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "azcopy": {"type": "path", "default": "azcopy"},
            "account_url": {"type": "str", "required": True},
            "container": {"type": "str", "required": True},
            "prefix": {"type": "str", "default": ""},
            "sas": {"type": "str", "required": True, "no_log": True},
            "dest": {"type": "path", "required": True},
            "rank": {"type": "int", "required": True},
            "shard": {"type": "dict", "required": True},
            "decompress": {"type": "bool", "default": True},
            "cap_mbps": {"type": "float", "default": 0},
            "timeout": {"type": "int", "default": 0},
            "progress_file": {"type": "path", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    sas = p["sas"]
    check = check_sas(sas, "rl")
    for warning in check.warnings:
        module.warn(warning)
    if check.errors:
        module.fail_json(msg=" ".join(check.errors), sas_warnings=check.warnings)
    source = blob_url(p["account_url"], p["container"], p["prefix"])
    shard_args = _shard_args(p["shard"])
    if module.check_mode:
        staged = shard_is_staged(source_url=source, stage_dir=p["dest"], rank=p["rank"],
                                 decompress=p["decompress"], **shard_args)
        module.exit_json(changed=not staged, sas_warnings=check.warnings)
    try:
        result = stage_shard(
            azcopy=p["azcopy"], source_url=source, sas=sas, stage_dir=p["dest"], rank=p["rank"],
            expected=_expected(p["shard"]), decompress=p["decompress"], cap_mbps=p["cap_mbps"] or None,
            timeout=p["timeout"] or None, node=f"node {p['rank']}", progress_file=p["progress_file"] or None,
            **shard_args)
    except (StageError, OSError, ValueError) as exc:
        module.fail_json(msg=redact(str(exc), [sas]), sas_warnings=check.warnings)
    module.exit_json(sas_warnings=check.warnings, **result)


if __name__ == "__main__":
    main()
