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
      - How to authenticate, with the names and environment variables azure.azcollection uses, and
        azure-identity's own variable names beside them (docs/operations.md has the table).
      - C(auto) takes, in order, the O(profile) of C(~/.azure/credentials) when O(profile) is set; a
        service principal from O(client_id), O(tenant) and O(secret) or O(x509_certificate_path); the
        profile E(AZURE_PROFILE) names; a service principal (secret or certificate) or a workload
        identity (E(AZURE_FEDERATED_TOKEN_FILE)) from the environment; the C(default) profile of
        C(~/.azure/credentials); then azure-identity's C(DefaultAzureCredential) (its environment
        variables, workload identity, managed identity, the Azure CLI login, ...).
      - C(env) takes a service principal or workload identity from the environment only - E(AZURE_CLIENT_ID);
        E(AZURE_TENANT) or E(AZURE_TENANT_ID); and E(AZURE_SECRET) or E(AZURE_CLIENT_SECRET), or
        E(AZURE_X509_CERTIFICATE_PATH) or E(AZURE_CLIENT_CERTIFICATE_PATH), or E(AZURE_FEDERATED_TOKEN_FILE).
      - C(credential_file) takes a profile of C(~/.azure/credentials) (O(profile), else E(AZURE_PROFILE),
        else C(default)) - an INI section with C(client_id), C(tenant), C(secret) or C(x509_certificate_path),
        and optionally C(subscription_id) and C(cloud_environment).
      - C(msi) uses a managed identity (user-assigned when O(client_id) or E(AZURE_CLIENT_ID) is set).
      - C(cli) uses the Azure CLI login (C(az login)); C(service_principal) needs O(client_id), O(tenant) and
        O(secret) or O(x509_certificate_path) (or their environment variables).
    type: str
    default: auto
    choices: [auto, cli, env, msi, credential_file, service_principal]
  profile:
    description:
      - Profile (section) of C(~/.azure/credentials) to take the credential from; falls back to E(AZURE_PROFILE)
        for O(auth_source=credential_file).
    type: str
    version_added: 2.2.0
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
  x509_certificate_path:
    description:
      - PEM or PKCS12 file with the service principal's certificate and private key (a certificate service
        principal, instead of O(secret)); falls back to E(AZURE_X509_CERTIFICATE_PATH) or
        E(AZURE_CLIENT_CERTIFICATE_PATH) (its password E(AZURE_CLIENT_CERTIFICATE_PASSWORD)).
    type: path
    version_added: 2.2.0
  cloud_environment:
    description:
      - The Azure cloud - C(AzureCloud), C(AzureChinaCloud) or C(AzureUSGovernment) - whose login authority and
        resource manager endpoint are used; falls back to the credential file profile's C(cloud_environment)
        (with O(auth_source=credential_file)), then E(AZURE_CLOUD_ENVIRONMENT), then C(AzureCloud).
    type: str
    version_added: 2.2.0
"""
