# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""azcopy command lines and environments: URLs, ``azcopy copy`` argv, authentication.

Authentication (``auth``):

``sas``
    the SAS token is appended to the source URL, so it is in azcopy's argv for the whole
    transfer (readable through ``ps``/``/proc`` by local users: azcopy has no other way to
    take a SAS). Prefer an identity.
``managed_identity`` / ``service_principal`` / ``azure_cli``
    no token exists: azcopy logs itself in from its environment
    (``AZCOPY_AUTO_LOGIN_TYPE=MSI|SPN|AZCLI``, with ``AZCOPY_MSI_CLIENT_ID`` for a
    user-assigned identity, ``AZCOPY_SPA_APPLICATION_ID``/``AZCOPY_SPA_CLIENT_SECRET``/
    ``AZCOPY_TENANT_ID`` for a service principal). The argv then holds no ``sig=``; the
    client secret, when there is one, is only in azcopy's environment (``/proc/<pid>/environ``
    is readable by the same user and root only).

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

AUTH_MODES = ("sas", "managed_identity", "service_principal", "azure_cli")


def auth_argument_spec() -> dict[str, dict[str, Any]]:
    """The authentication options of the blob modules and actions (``auth`` and what each
    mode needs), a fresh copy per call; the secrets are ``no_log``."""
    return {
        "auth": {"type": "str", "default": "sas", "choices": list(AUTH_MODES)},
        "sas": {"type": "str", "no_log": True},
        "msi_client_id": {"type": "str", "default": ""},
        "tenant_id": {"type": "str", "default": ""},
        "client_id": {"type": "str", "default": ""},
        "client_secret": {"type": "str", "no_log": True},
    }


AUTO_LOGIN_TYPES = {"managed_identity": "MSI", "service_principal": "SPN", "azure_cli": "AZCLI"}
# Variables azcopy reads for auto login; cleared from an inherited environment so that the
# mode asked for is the mode used.
AUTH_ENV_KEYS = ("AZCOPY_AUTO_LOGIN_TYPE", "AZCOPY_MSI_CLIENT_ID", "AZCOPY_MSI_OBJECT_ID", "AZCOPY_MSI_RESOURCE_STRING",
                 "AZCOPY_SPA_APPLICATION_ID", "AZCOPY_SPA_CLIENT_SECRET", "AZCOPY_SPA_CERT_PATH",
                 "AZCOPY_SPA_CERT_PASSWORD", "AZCOPY_TENANT_ID")


def auth_env(auth: str, *, msi_client_id: str = "", tenant_id: str = "", client_id: str = "",
             client_secret: str = "") -> dict[str, str]:
    """The azcopy environment variables for ``auth`` (empty for ``sas``); ValueError when one is missing."""
    if auth not in AUTH_MODES:
        raise ValueError(f"auth must be one of {', '.join(AUTH_MODES)}, got {auth!r}")
    if auth == "sas":
        return {}
    env = {"AZCOPY_AUTO_LOGIN_TYPE": AUTO_LOGIN_TYPES[auth]}
    if auth == "managed_identity" and msi_client_id:
        env["AZCOPY_MSI_CLIENT_ID"] = msi_client_id
    if auth == "service_principal":
        missing = [n for n, v in (("tenant_id", tenant_id), ("client_id", client_id), ("client_secret", client_secret))
                   if not v]
        if missing:
            raise ValueError(f"auth service_principal needs {', '.join(missing)}")
        env.update({"AZCOPY_TENANT_ID": tenant_id, "AZCOPY_SPA_APPLICATION_ID": client_id,
                    "AZCOPY_SPA_CLIENT_SECRET": client_secret})
    if auth == "azure_cli" and tenant_id:
        env["AZCOPY_TENANT_ID"] = tenant_id
    return env


def with_auth_env(base: Mapping[str, str], auth: str, **kwargs: str) -> dict[str, str]:
    """``base`` without any inherited auto-login variable, plus those of ``auth``."""
    env = {k: v for k, v in base.items() if k not in AUTH_ENV_KEYS}
    env.update(auth_env(auth, **kwargs))
    return env


def blob_url(account_url: str, container: str, path: str = "") -> str:
    """``<account_url>/<container>[/<path>]`` with the path quoted (no SAS)."""
    base = f"{account_url.rstrip('/')}/{container.strip('/')}"
    path = path.strip("/")
    return f"{base}/{quote(path)}" if path else base


def with_sas(url: str, sas: str) -> str:
    sas = sas.strip().lstrip("?")
    return f"{url}?{sas}" if sas else url


def copy_download_command(azcopy: str, source_url: str, sas: str, dest: str, *,
                          include_pattern: str | None = None, list_file: str | None = None,
                          decompress: bool = True, cap_mbps: float | None = None,
                          overwrite: str = "false", extra: Sequence[str] = ()) -> list[str]:
    """argv of ``azcopy copy`` from a container (or prefix) to a local folder.

    ``--from-to BlobLocal`` is explicit (azcopy cannot infer it for an Azurite URL); files
    land directly under ``dest`` (``--as-subdir=false``), keeping their paths below the source.
    """
    if include_pattern and list_file:
        raise ValueError("give include_pattern or list_file, not both")
    cmd = [azcopy, "copy", with_sas(source_url, sas), dest, "--from-to", "BlobLocal",
           "--recursive", "--as-subdir=false", f"--overwrite={overwrite}", "--output-type", "json",
           "--log-level", "WARNING"]
    if include_pattern:
        cmd += ["--include-pattern", include_pattern]
    if list_file:
        cmd += ["--list-of-files", list_file]
    if decompress:
        cmd.append("--decompress")
    if cap_mbps:
        cmd += ["--cap-mbps", _fmt_number(cap_mbps)]
    cmd += list(extra)
    return cmd


def copy_upload_command(azcopy: str, source: str, dest_url: str, sas: str, *, content_encoding: str | None = None,
                        cap_mbps: float | None = None, overwrite: str = "ifSourceNewer",
                        recursive: bool = True, extra: Sequence[str] = ()) -> list[str]:
    """argv of ``azcopy copy`` from a local path to a container (the checkpoint copy-back uses it too)."""
    cmd = [azcopy, "copy", source, with_sas(dest_url, sas), "--from-to", "LocalBlob",
           f"--overwrite={overwrite}", "--output-type", "json", "--log-level", "WARNING"]
    if recursive:
        cmd.append("--recursive")
    if content_encoding:
        cmd += ["--content-encoding", content_encoding]
    if cap_mbps:
        cmd += ["--cap-mbps", _fmt_number(cap_mbps)]
    cmd += list(extra)
    return cmd


def _fmt_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
