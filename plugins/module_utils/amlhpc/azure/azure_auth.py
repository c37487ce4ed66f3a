# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Which Azure credential the inventory plugin, aml_compute_cluster and aml_job log in with:
the options and environment names of azure.azcollection, plus azure-identity's own names.

``resolve_auth`` turns the options and the environment into an :class:`AuthPlan` (plain data,
no SDK import); ``aml_sdk`` builds the SDK's credential from it (``identity_credential`` for
azure-identity, used by azure-ai-ml, and wrapped for azureml-core).

``auth_source``:

* ``auto`` - a profile named by ``profile`` in ``~/.azure/credentials``; then a service principal
  from the options; then ``AZURE_PROFILE``; then a service principal (secret or certificate) or
  a workload identity from the environment; then the ``default`` profile of
  ``~/.azure/credentials``; then azure-identity's ``DefaultAzureCredential`` (environment,
  workload identity, managed identity, Azure CLI, ...).
* ``service_principal`` - ``client_id``, ``tenant`` and ``secret`` or ``x509_certificate_path``,
  each from its option or else its environment variable.
* ``env`` - the environment only: a service principal, or a workload identity
  (``AZURE_FEDERATED_TOKEN_FILE``, what GitHub Actions' and AKS's federation write).
* ``credential_file`` - a profile of ``~/.azure/credentials`` (``profile``, ``AZURE_PROFILE``,
  or ``default``), an INI file with ``subscription_id``, ``client_id``, ``secret`` (or
  ``x509_certificate_path``), ``tenant`` and optionally ``cloud_environment``.
* ``msi`` - a managed identity (user-assigned when ``client_id`` is set); ``cli`` - ``az login``.

``cloud_environment`` (``AZURE_CLOUD_ENVIRONMENT``) picks the sovereign cloud: its login
authority and its resource manager endpoint.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

AUTH_SOURCES = ("auto", "cli", "env", "msi", "credential_file", "service_principal")

# Option -> its environment variables: azure.azcollection's name first, then azure-identity's.
ENV_NAMES: dict[str, tuple[str, ...]] = {
    "client_id": ("AZURE_CLIENT_ID",),
    "secret": ("AZURE_SECRET", "AZURE_CLIENT_SECRET"),
    "tenant": ("AZURE_TENANT", "AZURE_TENANT_ID"),
    "subscription_id": ("AZURE_SUBSCRIPTION_ID",),
    "x509_certificate_path": ("AZURE_X509_CERTIFICATE_PATH", "AZURE_CLIENT_CERTIFICATE_PATH"),
    "certificate_password": ("AZURE_CLIENT_CERTIFICATE_PASSWORD",),
    "federated_token_file": ("AZURE_FEDERATED_TOKEN_FILE",),
    "profile": ("AZURE_PROFILE",),
    "cloud_environment": ("AZURE_CLOUD_ENVIRONMENT",),
}

CREDENTIAL_FILE = "~/.azure/credentials"
"""azure.azcollection's credential file: INI, one section per profile."""


@dataclass(frozen=True)
class Cloud:
    """A cloud's login authority (azure-identity's ``authority``) and resource manager endpoint."""

    name: str
    authority: str
    resource_manager: str


# azure-identity's AzureAuthorityHosts and azure-ai-ml's cloud names.
CLOUDS = {c.name: c for c in (
    Cloud("AzureCloud", "login.microsoftonline.com", "https://management.azure.com"),
    Cloud("AzureChinaCloud", "login.chinacloudapi.cn", "https://management.chinacloudapi.cn"),
    Cloud("AzureUSGovernment", "login.microsoftonline.us", "https://management.usgovcloudapi.net"),
)}


class AuthError(Exception):
    """A credential that cannot be put together from what is set; its text says what is missing."""


@dataclass(frozen=True)
class AuthPlan:
    """The credential to build: a concrete source and what it needs.

    ``source``: ``service_principal``, ``env``, ``credential_file`` (a principal or workload
    identity, see ``kind``), ``msi``, ``cli`` or ``default`` (DefaultAzureCredential);
    ``requested``: the ``auth_source`` asked for."""

    source: str
    requested: str
    client_id: str | None = None
    secret: str | None = field(default=None, repr=False)
    tenant: str | None = None
    certificate_path: str | None = None
    certificate_password: str | None = field(default=None, repr=False)
    federated_token_file: str | None = None
    cloud: str = "AzureCloud"
    subscription_id: str | None = None  # a credential file profile's
    profile: str | None = None

    @property
    def kind(self) -> str | None:
        """How a principal proves itself: ``secret``, ``certificate`` or ``workload_identity``."""
        if self.source not in ("service_principal", "env", "credential_file"):
            return None
        if self.secret:
            return "secret"
        if self.certificate_path:
            return "certificate"
        return "workload_identity" if self.federated_token_file else None

    @property
    def cloud_info(self) -> Cloud:
        return CLOUDS[self.cloud]


def auth_argument_spec(workspace_required: bool = False) -> dict[str, dict[str, Any]]:
    """The workspace and credential options of the modules (doc fragment amlhpc.azureml.azure_auth);
    ``workspace_required`` for a module that always talks to a workspace (aml_compute_cluster)."""
    workspace: dict[str, Any] = {"type": "str", "required": True} if workspace_required else {"type": "str"}
    return {
        "subscription_id": {"type": "str"},
        "resource_group": dict(workspace),
        "workspace_name": dict(workspace),
        "auth_source": {"type": "str", "default": "auto", "choices": list(AUTH_SOURCES)},
        "profile": {"type": "str"},
        "client_id": {"type": "str"},
        "secret": {"type": "str", "no_log": True},
        "tenant": {"type": "str"},
        "x509_certificate_path": {"type": "path"},
        "cloud_environment": {"type": "str"},
    }


def from_env(environ: Mapping[str, str], name: str) -> str | None:
    """The first of option ``name``'s environment variables that is set."""
    for var in ENV_NAMES[name]:
        if environ.get(var):
            return environ[var]
    return None


def subscription_from(options: Mapping[str, Any], environ: Mapping[str, str],
                      plan: AuthPlan | None = None) -> str | None:
    """The subscription: the option, else ``AZURE_SUBSCRIPTION_ID``, else the credential file profile's."""
    return options.get("subscription_id") or from_env(environ, "subscription_id") or (plan and plan.subscription_id)


# What a missing part is called in a message, by where it was looked for.
_MISSING = {
    "options": {"client_id": "client_id (or AZURE_CLIENT_ID)", "tenant": "tenant (or AZURE_TENANT)",
                "proof": "secret (or AZURE_SECRET) or x509_certificate_path (or AZURE_X509_CERTIFICATE_PATH)"},
    "env": {"client_id": "AZURE_CLIENT_ID", "tenant": "AZURE_TENANT or AZURE_TENANT_ID",
            "proof": "AZURE_SECRET or AZURE_CLIENT_SECRET (or a certificate, AZURE_CLIENT_CERTIFICATE_PATH, or a "
                     "federated token, AZURE_FEDERATED_TOKEN_FILE)"},
    "file": {"client_id": "client_id", "tenant": "tenant", "proof": "secret or x509_certificate_path"},
}


def _principal(values: Mapping[str, str | None], source: str, requested: str, cloud: str, style: str = "options",
               where: str = "", **extra: Any) -> AuthPlan:
    """A service principal (secret or certificate) or, from the environment, a workload identity
    from ``values``; or the one sentence naming what is missing (``style``: where it was looked for)."""
    missing = [k for k in ("client_id", "tenant") if not values.get(k)]
    if not _complete({**values, "client_id": "x", "tenant": "x"}, workload=style == "env"):
        missing.append("proof")
    if missing:
        text = ", ".join(_MISSING[style][k] for k in missing)
        raise AuthError(f"auth_source {source} needs {text}{where}, which {'is' if len(missing) == 1 else 'are'} "
                        "not set")
    secret = values.get("secret")
    certificate = None if secret else values.get("x509_certificate_path")
    return AuthPlan(source, requested, client_id=values["client_id"], secret=secret, tenant=values["tenant"],
                    certificate_path=certificate, certificate_password=values.get("certificate_password"),
                    federated_token_file=None if secret or certificate else values.get("federated_token_file"),
                    cloud=cloud, **extra)


def _complete(values: Mapping[str, str | None], workload: bool = False) -> bool:
    proof = ("secret", "x509_certificate_path") + (("federated_token_file",) if workload else ())
    return bool(values.get("client_id") and values.get("tenant") and any(values.get(k) for k in proof))


def read_profile(profile: str, home: str | None = None) -> dict[str, str] | None:
    """Profile ``profile`` of ``~/.azure/credentials`` (None when the file or the section is not there)."""
    path = os.path.join(home, ".azure", "credentials") if home else os.path.expanduser(CREDENTIAL_FILE)
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except FileNotFoundError:
        return None
    except (OSError, configparser.Error) as exc:
        raise AuthError(f"{path} cannot be read as azure.azcollection's credential file: {exc}") from None
    if not parser.has_section(profile):
        return None
    return {k: v.strip() for k, v in parser.items(profile) if v.strip()}


def _cloud(options: Mapping[str, Any], environ: Mapping[str, str], profile: Mapping[str, str] | None = None) -> str:
    name = options.get("cloud_environment") or (profile or {}).get("cloud_environment") or \
        from_env(environ, "cloud_environment") or "AzureCloud"
    if name not in CLOUDS:
        raise AuthError(f"cloud_environment must be one of {', '.join(CLOUDS)}, not {name!r}")
    return name


def resolve_auth(requested: str, options: Mapping[str, Any], environ: Mapping[str, str],
                 home: str | None = None) -> AuthPlan:
    """Pick the credential for ``auth_source`` ``requested`` (see the module's docstring for the
    order ``auto`` follows). ``home``: the folder holding ``.azure/credentials`` (default ``~``)."""
    if requested not in AUTH_SOURCES:
        raise AuthError(f"auth_source must be one of {', '.join(AUTH_SOURCES)}, not {requested!r}")
    keys = ("client_id", "secret", "tenant", "x509_certificate_path", "certificate_password", "federated_token_file")
    opt = {k: options.get(k) or None for k in keys}
    env = {k: from_env(environ, k) for k in keys}

    def profile_plan(name: str, source: str) -> AuthPlan:
        values = read_profile(name, home)
        if values is None:
            raise AuthError(f"auth_source {source} needs profile '{name}' in {CREDENTIAL_FILE}, which is not there: "
                            "add the section, or name another profile (profile, AZURE_PROFILE)")
        return _principal({**values, "certificate_password": opt["certificate_password"]}, "credential_file",
                          requested, _cloud(options, environ, values), style="file",
                          where=f" in profile '{name}' of {CREDENTIAL_FILE}",
                          subscription_id=values.get("subscription_id"), profile=name)

    profile = options.get("profile") or None
    if requested == "credential_file":
        return profile_plan(profile or from_env(environ, "profile") or "default", "credential_file")
    cloud = _cloud(options, environ)
    if requested == "service_principal":
        return _principal({k: opt[k] or env[k] for k in keys}, "service_principal", requested, cloud)
    if requested == "env":
        return _principal(env, "env", requested, cloud, style="env")
    if requested == "msi":
        return AuthPlan("msi", requested, client_id=opt["client_id"] or env["client_id"], cloud=cloud)
    if requested == "cli":
        return AuthPlan("cli", requested, cloud=cloud)
    # auto
    if profile:
        return profile_plan(profile, "auto")
    if _complete(opt):
        return _principal(opt, "service_principal", requested, cloud)
    if from_env(environ, "profile"):
        return profile_plan(from_env(environ, "profile") or "default", "auto")
    if _complete(env, workload=True):
        return _principal(env, "env", requested, cloud, style="env")
    default = read_profile("default", home)
    if default and _complete(default):
        return profile_plan("default", "auto")
    # DefaultAzureCredential reads azure-identity's variables itself; a client_id option names the
    # user-assigned managed identity it is to use.
    return AuthPlan("default", requested, client_id=opt["client_id"], cloud=cloud)


def auth_failed(source: str, requested: str, detail: str) -> str:
    """The one sentence for a credential Azure refused."""
    if source == "default":
        how = (f"{requested} (azure-identity's DefaultAzureCredential: environment, workload identity, managed "
               "identity, Azure CLI, ...)")
    else:
        how = source if source == requested else f"{source}, chosen by auth_source {requested}"
    first = (detail.strip().splitlines() or [""])[0][:300]
    return (f"Azure authentication failed with auth_source {how}: {first} "
            "(check the credentials, or pick another auth_source)")
