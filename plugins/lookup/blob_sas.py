# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Lookup plugin: a short-lived container SAS made from a storage account key."""

from __future__ import annotations

DOCUMENTATION = r"""
name: blob_sas
short_description: Make a short-lived container SAS from a storage account key
version_added: "1.0.0"
description:
  - Signs a container-level shared access signature with the account key, on the controller.
    Use it to hand the staging nodes a read+list token that expires soon, while the account
    key stays on the controller (in a vault).
  - Works against Azure Storage and against Azurite (the account name is taken from the URL's
    path there, e.g. C(http://127.0.0.1:10000/devstoreaccount1)).
  - The result is a secret. Hand it only to options that are declared C(no_log) (C(sas) of
    azcopy_shards, azcopy_stage, dataset_upload, aml_job); never print it.
  - Signed with the standard library (the token azure-storage-blob's C(generate_container_sas)
    makes for the same inputs, SAS version 2026-10-06). A variable that holds this lookup is
    templated again in every node's task that reads it, so it costs each of them microseconds,
    not an import of the Azure SDK (about 175 ms of controller CPU per node and task).
options:
  _terms:
    description: The account URL, e.g. C(https://myacct.blob.core.windows.net).
    required: true
  container:
    description: Container the SAS is for.
    type: str
    required: true
  account_key:
    description: The storage account key (from a vault or the environment).
    type: str
    required: true
  permission:
    description: SAS permissions, letters of C(racwdxyltfmei), e.g. C(rl) (read, list) for staging; another letter is refused.
    type: str
    default: rl
  hours:
    description: Hours until the SAS expires.
    type: float
    default: 4
"""

EXAMPLES = r"""
- name: Stage with a 4-hour read+list token
  ansible.builtin.include_role:
    name: stage
  vars:
    stage_sas: "{{ lookup('amlhpc.azureml.blob_sas', stage_account_url, container='cosmoflow',
                          account_key=lookup('ansible.builtin.env', 'AZURE_STORAGE_KEY')) }}"
"""

RETURN = r"""
_raw:
  description: The SAS query string (without a leading C(?)).
  type: list
  elements: str
"""

from datetime import datetime, timedelta, timezone  # noqa: E402

from ansible.errors import AnsibleError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_sas import container_sas, redact
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.sdk.blob_listing import account_name


class LookupModule(LookupBase):
    """blob_sas lookup."""

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        now = datetime.now(timezone.utc).replace(microsecond=0)
        out = []
        for url in terms:
            try:
                out.append(container_sas(
                    account_name(url), self.get_option("container"), self.get_option("account_key"),
                    permission=self.get_option("permission"), start=now - timedelta(minutes=5),
                    expiry=now + timedelta(hours=float(self.get_option("hours")))))
            except (ValueError, TypeError) as exc:
                # The one redaction (the URL may carry a SAS, the error quote the key), and no
                # chained cause, which Ansible would print unredacted.
                raise AnsibleError(redact(f"blob_sas: {exc}", [str(self.get_option("account_key") or "")])) from None
        return out
