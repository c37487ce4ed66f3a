#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Ansible module: shared-mount write/read throughput with parallel writers and readers."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: amlhpc_fs_bench
short_description: Measure write and read throughput of a (shared) file system
description:
  - Writes O(files) files of O(file_size_mb) MiB with O(parallel) writer threads (each file
    fsync'ed), then reads them back with O(parallel) reader threads, checks every block, and
    reports MB/s (10^6 bytes/s) for each phase.
  - Used by the healthcheck role when elbencho is not installed.
  - Dropping the page cache needs root; instead each file is evicted after its fsync with
    C(posix_fadvise(POSIX_FADV_DONTNEED)), so reads come from the file system on kernel
    file systems (local, BeeGFS). A file system that ignores the hint shows cache speed.
  - Writes only inside a new folder under O(path) and removes it at the end (unless O(keep)).
  - In check mode nothing is written and the result says so.
version_added: "1.0.0"
author:
  - amlhpc contributors (@amlhpc)
attributes:
  check_mode:
    support: partial
    details: Measures nothing in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  path:
    description: Folder on the file system to measure. It must exist.
    type: path
    required: true
  files:
    description: Number of files.
    type: int
    default: 16
  file_size_mb:
    description: Size of each file in MiB.
    type: int
    default: 256
  parallel:
    description: Writer threads, then reader threads.
    type: int
    default: 8
  block_size_kb:
    description: Size of each write and read call in KiB.
    type: int
    default: 1024
  keep:
    description: Leave the files in place (for inspection).
    type: bool
    default: false
notes:
  - Supports check mode (measures nothing).
"""

EXAMPLES = r"""
- name: Health check | Measure the shared mount
  amlhpc.azureml.amlhpc_fs_bench:
    path: /mnt/scratch
    files: 32
    file_size_mb: 1024
    parallel: 16
  register: fs
"""

RETURN = r"""
write_mbps:
  description: Bytes written / seconds from the first open to the last fsync'ed close, in MB/s.
  type: float
  returned: success and not check mode
  sample: 2345.6
read_mbps:
  description: Bytes read / seconds of the read phase, in MB/s.
  type: float
  returned: success and not check mode
  sample: 3456.7
errors:
  description: Blocks or files whose content differed from what was written (empty when all matched).
  type: list
  elements: str
  returned: success and not check mode
evicted:
  description: Whether posix_fadvise(DONTNEED) was available to evict the files from the page cache.
  type: bool
  returned: success and not check mode
folder:
  description: The folder the files were written in (removed unless keep).
  type: str
  returned: success and not check mode
skipped_reason:
  description: Why nothing was measured (check mode).
  type: str
  returned: check mode
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.health.fsbench import run


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "files": {"type": "int", "default": 16},
            "file_size_mb": {"type": "int", "default": 256},
            "parallel": {"type": "int", "default": 8},
            "block_size_kb": {"type": "int", "default": 1024},
            "keep": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped_reason="check mode: the benchmark writes files")
    try:
        result = run(p["path"], files=p["files"], file_size=p["file_size_mb"] * 2**20,
                     parallel=p["parallel"], block_size=p["block_size_kb"] * 1024, keep=p["keep"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"file system benchmark under {p['path']} failed: {exc}")
    # The files are removed again: a measurement, nothing changed (unless kept).
    module.exit_json(changed=bool(p["keep"]), **result)


if __name__ == "__main__":
    main()
