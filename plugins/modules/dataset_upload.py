#!/usr/bin/python
# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Ansible module: gzip a data set in parallel and upload it gzip-encoded to Blob Storage."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dataset_upload
short_description: Gzip a data set in parallel and upload it with Content-Encoding gzip
description:
  - Compresses every data file under O(src) (by default C(*.tfrecord)) in a process pool into
    O(work_dir), then uploads each as C(<prefix>/<relative path>.gz) with C(Content-Encoding gzip),
    C(Content-MD5), and in its metadata its size before compression (C(amlhpc_raw_bytes)) and the
    SHA-256 of its uncompressed bytes (C(amlhpc_raw_sha256)), so that staging (C(azcopy --decompress))
    can decompress on the fly and check every file on disk by size and by content.
  - Compression is deterministic (gzip C(mtime=0)), so a rerun produces the same bytes; blobs
    already there with the same size, MD5 and metadata are skipped (idempotent).
  - A rerun does not read or compress again a file whose copy in O(work_dir) is current - the
    record O(work_dir)/.amlhpc-prepared.json keeps each source's size, modification and change
    times and inode as they were when its copy was made, and the copy's size, MD5 and the
    source's SHA-256. Any difference compresses that file again.
  - The module's arguments carry a secret; its action plugin runs it pipelined on every connection
    (the local one included) and refuses otherwise, so its payload is never written to a file.
  - Where it would run on the controller itself (the local connection, no become, no async), its
    action plugin answers check mode, and a rerun that finds every compressed copy current and
    every blob in the container, in the worker with the module's own functions, without starting
    the module (about half a second of a rerun). Anything to compress or upload, an error, or
    arguments the module refuses, run the module.
  - Runs where the data is (usually the controller). It lists what the container holds with the
    standard library (with O(account_key), through a container SAS made from the key for that
    listing); it needs the Python package azure-storage-blob to upload or to create the
    container, so a rerun that finds every file there does not import it.
version_added: "1.0.0"
author:
  - amlhpc contributors (@amlhpc)
attributes:
  check_mode:
    support: full
    details: Compresses and uploads nothing; reports whether any blob is missing.
  diff_mode:
    support: none
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  src:
    description: Folder of the original files.
    type: path
    required: true
  work_dir:
    description:
      - Folder for the compressed copies (same layout) and their record; kept, so a rerun does not
        compress again what has not changed.
    type: path
    required: true
  suffixes:
    description: File name endings to take.
    type: list
    elements: str
    default: [.tfrecord]
  account_url:
    description: Blob endpoint of the storage account (or an Azurite URL).
    type: str
    required: true
  container:
    description: Container to upload to.
    type: str
    required: true
  prefix:
    description: Folder inside the container.
    type: str
    default: ""
  sas:
    description: SAS token with read, create, write and list on the container. Never logged.
    type: str
  account_key:
    description: Account key (instead of O(sas); e.g. Azurite's well-known key). Never logged.
    type: str
  create_container:
    description: Create the container when it does not exist (needs the account key or an account SAS).
    type: bool
    default: false
  level:
    description: gzip level (1-9).
    type: int
    default: 6
  workers:
    description: Compression processes (0 for one per CPU).
    type: int
    default: 0
  upload_workers:
    description: Parallel uploads.
    type: int
    default: 8
notes:
  - Check mode compresses nothing and uploads nothing; it reports whether any blob is missing.
"""

EXAMPLES = r"""
- name: Prepare dataset | Upload the data set gzip-encoded
  amlhpc.azureml.dataset_upload:
    src: /data/cosmoflow/cosmoUniverse_2019_05_4parE_tf_v2
    work_dir: /data/cosmoflow/gz
    account_url: https://acct.blob.core.windows.net
    container: cosmoflow
    prefix: v0.7
    sas: "{{ prepare_dataset_sas }}"
"""

RETURN = r"""
files:
  description: Data files found under src.
  returned: success
  type: int
uploaded:
  description: Blobs uploaded in this run.
  returned: success
  type: int
already_there:
  description: Blobs already there with the same size and MD5.
  returned: success
  type: int
compressed:
  description: Files gzipped in this run (the others' copies in O(work_dir) were current).
  returned: success
  type: int
reused:
  description:
    - Files not read nor gzipped again - the record in O(work_dir) shows the source as it was
      when its copy there was made (size, modification and change times, inode).
  returned: success
  type: int
raw_bytes:
  description: Bytes before compression.
  returned: success
  type: int
gzip_bytes:
  description: Bytes after compression (what the stage downloads).
  returned: success
  type: int
ratio:
  description: gzip_bytes / raw_bytes.
  returned: success
  type: float
seconds:
  description: Wall time.
  returned: success
  type: float
"""

import time  # noqa: E402

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy import redact
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.data.dataset_prep import (
    UPLOAD_ARGUMENT_SPEC,
    UPLOAD_MUTUALLY_EXCLUSIVE,
    UPLOAD_REQUIRED_ONE_OF,
    compress_all,
    find_files,
    missing_answer,
    upload_credential,
    upload_prepared,
    upload_result,
)
from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec=UPLOAD_ARGUMENT_SPEC, required_one_of=UPLOAD_REQUIRED_ONE_OF,
                           mutually_exclusive=UPLOAD_MUTUALLY_EXCLUSIVE, supports_check_mode=True)
    p = module.params
    secrets = [s for s in (p["sas"], p["account_key"]) if s]
    rels = find_files(p["src"], p["suffixes"])
    if not rels:
        module.fail_json(msg=f"no files ending in {', '.join(p['suffixes'])} under {p['src']}")
    started = time.monotonic()
    try:
        if module.check_mode:
            module.exit_json(**missing_answer(p, rels))
        stats: dict[str, int] = {}
        prepared = compress_all(p["src"], p["work_dir"], prefix=p["prefix"], level=p["level"],
                                workers=p["workers"] or None, suffixes=p["suffixes"], stats=stats)
        counts = upload_prepared(prepared, p["account_url"], p["container"], upload_credential(p),
                                 workers=p["upload_workers"], create_container=p["create_container"])
    except ImportError:  # the SDK is imported only where something is to be uploaded
        module.fail_json(msg="dataset_upload needs the Python package azure-storage-blob on the host it runs on "
                             "to upload (the project's .venv has it: run it on the controller)")
    except Exception as exc:  # noqa: BLE001 - the SDK raises many kinds; the message is what matters
        module.fail_json(msg=f"dataset upload failed: {redact(str(exc), secrets).splitlines()[0]}")
    module.exit_json(**upload_result({**counts, **stats}, time.monotonic() - started))


if __name__ == "__main__":
    main()
