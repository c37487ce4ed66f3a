# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""List a container's blobs for the shard planner (names, sizes, encoding, size after gunzip).

The Azure SDK (``azure-storage-blob``) is imported only for a listing with an identity
(managed identity, service principal, az CLI), so the rest of ``amlhpc`` stays standard
library: the controller's .venv and the workload image have the SDK; a node without it can
still stage in suffix mode, or list with a SAS.

``playbooks/prepare_dataset.yml`` stores each file's size before compression and the SHA-256
of its uncompressed bytes in the blob metadata (``amlhpc_raw_bytes``, ``amlhpc_raw_sha256``),
so the stage can check every file on disk after ``--decompress``, by size and by content.

With a SAS (or none, for a public container) the listing is the standard library's
(``blob_rest.list_container``): no SDK import, about 0.4 s of CPU less per listing.
"""

from __future__ import annotations

from typing import Any

from ..staging.azcopy_sas import redact
from ..staging.blob_rest import BlobRestError, list_container
from ..staging.shards import Blob

RAW_BYTES_METADATA = "amlhpc_raw_bytes"
RAW_SHA256_METADATA = "amlhpc_raw_sha256"


class ListingError(RuntimeError):
    """The listing failed; the message is a sentence a person can act on (no secrets)."""


class ContainerMissing(ListingError):
    """The container is not there (yet): prepare_dataset creates it in a real run."""


def sdk_available() -> bool:
    try:
        import azure.storage.blob  # noqa: F401  # pylint: disable=unused-import,import-outside-toplevel
    except ImportError:
        return False
    return True


def account_name(account_url: str) -> str:
    """The storage account of an account URL.

    Path style (Azurite, or an endpoint addressed by IP: ``http://10.0.0.5:10000/<account>``)
    carries the account as the first path segment; the Azure style
    (``https://<account>.blob.core.windows.net``) as the first label of the host.
    """
    from urllib.parse import urlparse  # noqa: PLC0415

    parsed = urlparse(account_url.strip())
    if not parsed.scheme or not parsed.hostname:
        raise ValueError(f"'{account_url}' is not an account URL: use https://<account>.blob.core.windows.net")
    path = parsed.path.strip("/")
    return path.split("/")[0] if path else parsed.hostname.split(".")[0]


def normalize_prefix(prefix: str) -> str:
    """``data/cosmoflow`` -> ``data/cosmoflow/``; ``""`` stays empty."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def identity_credential(auth: str, *, msi_client_id: str = "", tenant_id: str = "", client_id: str = "",
                        client_secret: str = "") -> Any:
    """An azure-identity credential for the listing, for the same ``auth`` modes azcopy uses."""
    try:
        from azure.identity import (  # noqa: PLC0415
            AzureCliCredential,
            ClientSecretCredential,
            ManagedIdentityCredential,
        )
    except ImportError as exc:
        raise ListingError(f"listing the container with auth {auth} needs the Python package azure-identity "
                           "(pip install azure-identity), which is not installed here") from exc
    if auth == "managed_identity":
        return ManagedIdentityCredential(client_id=msi_client_id) if msi_client_id else ManagedIdentityCredential()
    if auth == "service_principal":
        if not (tenant_id and client_id and client_secret):
            raise ValueError("auth service_principal needs tenant_id, client_id and client_secret")
        return ClientSecretCredential(tenant_id, client_id, client_secret)
    if auth == "azure_cli":
        return AzureCliCredential(tenant_id=tenant_id or None)
    raise ValueError(f"auth {auth!r} is not an identity: use managed_identity, service_principal or azure_cli")


def blob_from_properties(props: Any, prefix: str = "") -> Blob:
    """A planner ``Blob`` from an SDK ``BlobProperties`` (name relative to ``prefix``)."""
    settings = getattr(props, "content_settings", None)
    encoding = (getattr(settings, "content_encoding", None) or "") if settings is not None else ""
    return blob_from(str(props.name), int(props.size), encoding, getattr(props, "metadata", None) or {}, prefix)


def blob_from(name: str, size: int, encoding: str, metadata: Any, prefix: str = "") -> Blob:
    """A planner ``Blob`` from a listed blob's name, size, content encoding and metadata (name
    relative to ``prefix``)."""
    prefix = normalize_prefix(prefix)
    if prefix and name.startswith(prefix):
        name = name[len(prefix):]
    raw: int | None
    if encoding.strip().lower() == "gzip":
        try:
            raw = int(metadata[RAW_BYTES_METADATA])
        except (KeyError, TypeError, ValueError):
            raw = None
    else:
        raw = int(size)
    sha = str(metadata.get(RAW_SHA256_METADATA, "")).strip().lower()
    sha_ok = len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)
    return Blob(name=name, size=int(size), raw_size=raw, content_encoding=encoding,
                raw_sha256=sha if sha_ok else None)


def _refused(container: str, account_url: str) -> str:
    return (f"listing container {container!r} at {account_url} was refused (HTTP 403): the SAS "
            "token has expired, lacks list permission, or is for another container")


def list_blobs(account_url: str, container: str, prefix: str = "", credential: Any = None) -> list[Blob]:
    """Every blob under ``prefix`` (credential: a SAS token string or None, listed with the
    standard library; a key or an azure-identity credential, listed with the SDK)."""
    if credential is None or isinstance(credential, str):
        try:
            listed = list_container(account_url, container, credential or "", normalize_prefix(prefix))
        except BlobRestError as exc:
            if exc.status == 403:
                raise ListingError(_refused(container, account_url)) from None
            if exc.status is None:
                raise ListingError(f"listing container {container!r} at {account_url} failed: {exc}") from None
            raise ListingError(f"listing container {container!r} at {account_url} failed (HTTP {exc.status}): "
                               f"{exc}") from None
        if listed is None:
            raise ContainerMissing(f"container {container!r} does not exist at {account_url}")
        return [blob_from(b.name, b.size, b.content_encoding, b.metadata, prefix) for b in listed]
    try:
        from azure.core.exceptions import (  # noqa: PLC0415
            AzureError,
            ClientAuthenticationError,
            HttpResponseError,
            ResourceNotFoundError,
        )
        from azure.storage.blob import ContainerClient  # noqa: PLC0415
    except ImportError as exc:
        raise ListingError("listing the container needs the Python package azure-storage-blob "
                           "(pip install azure-storage-blob), which is not installed here") from exc
    client = ContainerClient(account_url.rstrip("/"), container, credential=credential)
    secrets: list[str] = []  # an identity or a key object: nothing of it is in a message
    try:
        return [blob_from_properties(p, prefix)
                for p in client.list_blobs(name_starts_with=normalize_prefix(prefix) or None, include=["metadata"])]
    except HttpResponseError as exc:
        if isinstance(exc, ResourceNotFoundError) or exc.status_code == 404:
            raise ContainerMissing(f"container {container!r} does not exist at {account_url}") from exc
        if isinstance(exc, ClientAuthenticationError) or exc.status_code == 403:
            raise ListingError(_refused(container, account_url)) from exc
        raise ListingError(f"listing container {container!r} at {account_url} failed (HTTP {exc.status_code}): "
                           f"{_first_line(exc, secrets)}") from exc
    except ClientAuthenticationError as exc:
        raise ListingError(_refused(container, account_url)) from exc
    except ResourceNotFoundError as exc:
        raise ContainerMissing(f"container {container!r} does not exist at {account_url}") from exc
    except AzureError as exc:
        raise ListingError(f"listing container {container!r} at {account_url} failed: "
                           f"{_first_line(exc, secrets)}") from exc
    finally:
        client.close()


def _first_line(exc: Exception, secrets: list[str]) -> str:
    text = redact(str(exc), secrets)
    return text.splitlines()[0] if text else type(exc).__name__
