"""Where the staging SAS token comes from. Never from the command line.

``--sas`` takes a *reference* to the token:

``env:VAR`` / ``file:PATH``
    handled by :func:`cosmoflow.stage.read_sas` (the staging hook's one implementation).
``aml-secret:NAME``
    a secret of the AzureML workspace's Key Vault, read inside an azureml-core (v1) job with
    ``Run.get_context().get_secret(NAME)``. The submitter stores the token once with
    ``Workspace.get_default_keyvault().set_secret(NAME, token)``; the job definition then holds
    only the name.
``keyvault:https://VAULT.vault.azure.net/NAME``
    a Key Vault secret read with the job's managed identity (azure-identity +
    azure-keyvault-secrets): the azure-ai-ml (v2) way, where jobs have no ``get_secret``.
"""

from __future__ import annotations

from urllib.parse import urlparse


def resolve_sas(spec: str) -> str:
    """The SAS token that ``spec`` points at."""
    kind, _unused, ref = spec.partition(":")
    if kind == "aml-secret":
        if not ref:
            raise ValueError("--sas aml-secret:NAME needs the name of a workspace Key Vault secret")
        from azureml.core import Run  # the job image has azureml-core
        value = Run.get_context().get_secret(name=ref)
        if not value:
            raise RuntimeError(f"workspace secret {ref!r} is empty or missing")
        return value
    if kind == "keyvault":
        url = urlparse(ref)
        name = url.path.strip("/").split("/")[-1]
        if url.scheme != "https" or not url.netloc or not name:
            raise ValueError("--sas keyvault: wants https://VAULT.vault.azure.net/SECRET_NAME")
        from azure.identity import DefaultAzureCredential
        from azure.keyvault.secrets import SecretClient
        client = SecretClient(vault_url=f"https://{url.netloc}", credential=DefaultAzureCredential())
        value = client.get_secret(name).value
        if not value:
            raise RuntimeError(f"Key Vault secret {name!r} in {url.netloc} is empty")
        return value
    from cosmoflow.stage import read_sas  # env:VAR, file:PATH; literal tokens refused there
    return read_sas(spec)


def scrub(text: str, secret: str | None) -> str:
    """``text`` with the secret (and its query-string form) replaced by ``<SAS>``."""
    if secret:
        text = text.replace(secret, "<SAS>").replace(secret.lstrip("?"), "<SAS>")
    return text
