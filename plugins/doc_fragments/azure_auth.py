# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The Azure ML workspace and credential options, written once for the inventory plugin
amlhpc.azureml.azureml_compute and the modules aml_compute_cluster and aml_job."""

from __future__ import annotations


class ModuleDocFragment:
    """Documentation fragment amlhpc.azureml.azure_auth."""

    DOCUMENTATION = r"""
options:
  subscription_id:
    description: Azure subscription ID; falls back to E(AZURE_SUBSCRIPTION_ID).
    type: str
  resource_group:
    description: Resource group of the AzureML workspace.
    type: str
  workspace_name:
    description: AzureML workspace name.
    type: str
  auth_source:
    description:
      - How to authenticate, with the names azure.azcollection uses.
      - C(auto) takes a service principal from O(client_id)/O(secret)/O(tenant), then one from
        E(AZURE_CLIENT_ID)/E(AZURE_SECRET)/E(AZURE_TENANT), then a managed identity when
        E(IDENTITY_ENDPOINT) or E(MSI_ENDPOINT) is set, then the Azure CLI login.
      - C(env) takes the service principal from the environment only (E(AZURE_SECRET) or
        E(AZURE_CLIENT_SECRET), E(AZURE_TENANT) or E(AZURE_TENANT_ID)).
      - C(msi) uses a managed identity (user-assigned when O(client_id) is set).
      - C(cli) uses the Azure CLI login (C(az login)); C(service_principal) needs O(client_id),
        O(secret) and O(tenant) (or their environment variables).
    type: str
    default: auto
    choices: [auto, cli, env, msi, service_principal]
  client_id:
    description: Service principal (or user-assigned identity) client ID.
    type: str
  secret:
    description:
      - Service principal secret. Keep it out of files in plain text (a vault or a lookup).
    type: str
  tenant:
    description: Tenant ID of the service principal.
    type: str
"""
