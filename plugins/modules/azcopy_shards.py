#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Documentation stub: azcopy_shards is an action plugin (plugins/action/azcopy_shards.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: azcopy_shards
short_description: Plan each node's shard of a data set for azcopy staging
description:
  - Runs on the controller. Given the hosts that take part (one per node, in rank order)
    and the data set, returns each host's shard, with its bytes and file counts and the
    imbalance (max / mean bytes).
  - C(suffix) mode follows the CosmoFlow naming C(univ_ics_2019-03_aXXXXXX_YYY.tfrecord[.gz]);
    the 64 suffixes C(000)-C(063) are split in contiguous blocks as evenly as possible and
    each host gets them as an azcopy C(--include-pattern) (semicolon-separated globs matching
    C(.tfrecord) and C(.tfrecord.gz)). More than 64 hosts is refused (one sentence naming
    C(balanced)) unless O(allow_idle), which leaves hosts 64 and up without data.
  - C(balanced) mode lists the container (azure-storage-blob on the controller) and deals
    the blobs out largest first to the host with the fewest bytes (LPT greedy, deterministic
    tie-breaks), so every host gets nearly equal bytes for any host count; each host gets
    an azcopy C(--list-of-files).
  - Deterministic, and every blob is in exactly one shard.
  - Refuses, naming the blobs and what to do, a listing it cannot stage as it is. That is a name that would
    leave the stage folder (below the prefix it starts with C(/), as C(<prefix>//etc/x.gz) does, or has a
    C(.), C(..) or empty segment), one a Linux file system cannot hold (NUL or another control character, a
    segment over 255 bytes, a file name too long for azcopy's temporary name, the stage's own folders), two
    blobs staged as one file, or a gzip-encoded blob shorter than any gzip stream (azcopy would wait on it for
    ever).
  - Run it once (C(run_once)) and register the result; each host then reads
    C(<registered>.shards[inventory_hostname]) (the C(stage) role does).
version_added: "1.0.0"
author:
  - amlhpc contributors (@amlhpc)
attributes:
  check_mode:
    support: full
    details: Plans as usual (it changes nothing).
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  hosts:
    description: Hosts in rank order. Default the play's hosts sorted by C(aml_cluster), C(aml_node_rank).
    type: list
    elements: str
  exclude:
    description:
      - Hosts the health gate left out (C(healthcheck_verdict.excluded)). The plan over every host is made first;
        each other host keeps its shard and only the left-out hosts' blobs are dealt out to the others (suffixes to
        the host with the fewest, blobs largest first to the host with the fewest bytes), so only those files move.
    type: list
    elements: str
    default: []
  mode:
    description: How to split the data set.
    type: str
    choices: [suffix, balanced]
    default: suffix
  account_url:
    description: Blob endpoint of the storage account (needed to list).
    type: str
  container:
    description: Container of the data set (needed to list).
    type: str
  prefix:
    description: Folder of the data set inside the container.
    type: str
    default: ""
  sas:
    description:
      - SAS token for listing (read and list). Run the task with C(no_log). Without it the
        controller's own credential (if any) is not used; Azurite and public containers list anonymously.
    type: str
  list:
    description:
      - List the container even in suffix mode, so the plan knows each host's files and
        bytes and the stage can be checked against it. Balanced mode always lists.
    type: bool
    default: true
  allow_idle:
    description: In suffix mode with more than 64 hosts, leave hosts 64 and up without data instead of failing.
    type: bool
    default: false
  allow_empty:
    description:
      - Accept a listing with no blob under O(prefix). Without it such a plan is refused, naming
        the container and the prefix, since every shard would be empty and a stage with
        pruning would remove every staged file.
    type: bool
    default: false
    version_added: "2.0.0"
notes:
  - Action plugin; runs on the controller. Check mode runs it as usual (it changes nothing).
seealso:
  - module: amlhpc.azureml.azcopy_stage
"""

EXAMPLES = r"""
- name: Stage | Plan the shards
  amlhpc.azureml.azcopy_shards:
    mode: balanced
    account_url: https://acct.blob.core.windows.net
    container: cosmoflow
    prefix: v0.7
    sas: "{{ stage_sas }}"
  run_once: true
  register: stage_plan

- name: Stage | Show the balance
  ansible.builtin.debug:
    msg: "{{ stage_plan.total_files }} files, imbalance {{ stage_plan.imbalance }}"
  run_once: true
"""

RETURN = r"""
mode:
  description: The mode used.
  returned: always
  type: str
hosts:
  description: The hosts in rank order.
  returned: always
  type: list
  elements: str
excluded:
  description: The hosts left out (no shard), in rank order.
  returned: always
  type: list
  elements: str
moved:
  description:
    - The blobs that leaving out O(exclude) moves, keyed by the host that takes them, then by the host that held
      them in the plan over every host, each a list of blob names (suffix mode with no listing - the suffixes).
  returned: always
  type: dict
moved_files:
  description: How many blobs (or suffixes, with no listing) move.
  returned: always
  type: int
num_hosts:
  description: How many hosts.
  returned: always
  type: int
listed:
  description: Whether the container was listed (files and bytes known).
  returned: always
  type: bool
total_files:
  description: Blobs in the data set (null when not listed).
  returned: always
  type: int
total_bytes:
  description: Their bytes over the wire (null when not listed).
  returned: always
  type: int
imbalance:
  description: max / mean bytes per host (1.0 is perfect; null when not listed).
  returned: always
  type: float
files_imbalance:
  description: max / mean files per host (null when not listed).
  returned: always
  type: float
idle_hosts:
  description: Hosts that get no data.
  returned: always
  type: list
  elements: str
shards:
  description:
    - Per host - rank, mode, files, bytes, raw_bytes (on disk after decompression; null when
      unknown), suffixes, include_pattern (suffix mode), list_of_files and expected (when listed).
  returned: always
  type: dict
sas_warnings:
  description: Warnings about the SAS token and the plan.
  returned: always
  type: list
  elements: str
"""
