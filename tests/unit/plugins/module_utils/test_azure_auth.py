"""The credential of every auth_source (module_utils/amlhpc/azure/azure_auth.py, aml_sdk.identity_credential):
azure.azcollection's names and azure-identity's, each source resolved, built as the real
azure-identity (or azureml-core) credential, and, where it talks to Microsoft Entra ID, asked for a
token over a fake login transport (azureml_fakes.fake_login): the authority (cloud), the client,
and how it proved itself are read off the request."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amlhpc.sdk.aml_sdk import IdentityTokens, identity_credential
from amlhpc.azure.azure_auth import AUTH_SOURCES, AuthError, auth_failed, resolve_auth, subscription_from
from azureml_fakes import fake_login, write_certificate

ARM = "https://management.azure.com/.default"
CHINA_ARM = "https://management.chinacloudapi.cn/.default"


@pytest.fixture()
def home(tmp_path) -> Path:
    """A home whose ~/.azure/credentials has the profiles "default" and "hpc"."""
    (tmp_path / ".azure").mkdir()
    (tmp_path / ".azure" / "credentials").write_text(
        "[default]\nsubscription_id = sub-default\nclient_id = app-default\nsecret = s-default\ntenant = tn-default\n"
        "[hpc]\nsubscription_id = sub-hpc\nclient_id = app-hpc\nsecret = s-hpc\ntenant = tn-hpc\n"
        "cloud_environment = AzureChinaCloud\n")
    return tmp_path


def token_request(plan, scope=ARM, environ=None, monkeypatch=None) -> dict:
    """Build ``plan``'s azure-identity credential, get a token over the fake login; the token request."""
    seen: list[dict] = []
    credential = identity_credential(plan, transport=fake_login(seen))
    assert credential.get_token(scope).token
    return seen[-1]


# --- each source -------------------------------------------------------------------------

def test_env_with_azure_azcollections_names_is_a_client_secret_credential():
    plan = resolve_auth("env", {}, {"AZURE_CLIENT_ID": "app", "AZURE_SECRET": "s3", "AZURE_TENANT": "tn"})
    assert (plan.source, plan.kind) == ("env", "secret")
    request = token_request(plan)
    assert request["host"] == "login.microsoftonline.com" and request["path"] == "/tn/oauth2/v2.0/token"
    assert request["form"]["client_id"] == "app" and request["form"]["client_secret"] == "s3"
    assert request["form"]["scope"] == ARM


def test_env_with_azure_identitys_names_works_the_same():
    plan = resolve_auth("env", {}, {"AZURE_CLIENT_ID": "app", "AZURE_CLIENT_SECRET": "s3", "AZURE_TENANT_ID": "tn"})
    request = token_request(plan)
    assert request["path"] == "/tn/oauth2/v2.0/token" and request["form"]["client_secret"] == "s3"


def test_env_workload_identity_sends_the_federated_token_to_the_sovereign_clouds_authority(tmp_path):
    """What GitHub Actions' OIDC login and AKS workload identity leave: a client, a tenant and a
    federated token file; here in Azure China (cloud_environment from AZURE_CLOUD_ENVIRONMENT)."""
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text("federated-jwt")
    env = {"AZURE_CLIENT_ID": "app", "AZURE_TENANT_ID": "tn", "AZURE_FEDERATED_TOKEN_FILE": str(token_file),
           "AZURE_CLOUD_ENVIRONMENT": "AzureChinaCloud"}
    for requested in ("env", "auto"):
        plan = resolve_auth(requested, {}, env, home=str(tmp_path))
        assert (plan.source, plan.kind, plan.cloud) == ("env", "workload_identity", "AzureChinaCloud")
        request = token_request(plan, CHINA_ARM)
        assert request["host"] == "login.chinacloudapi.cn" and request["path"] == "/tn/oauth2/v2.0/token"
        assert request["form"]["client_assertion"] == "federated-jwt" and request["form"]["client_id"] == "app"
        assert request["form"]["scope"] == CHINA_ARM


def test_a_certificate_service_principal_signs_its_assertion(tmp_path):
    cert = write_certificate(tmp_path / "sp.pem")
    plan = resolve_auth("service_principal", {"client_id": "app", "tenant": "tn", "x509_certificate_path": cert}, {})
    assert plan.kind == "certificate"
    request = token_request(plan)
    assert request["form"]["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    assert str(request["form"]["client_assertion"], "ascii").count(".") == 2  # a signed JWT, no secret sent
    assert "client_secret" not in request["form"]
    env = resolve_auth("env", {}, {"AZURE_CLIENT_ID": "app", "AZURE_TENANT_ID": "tn",
                                   "AZURE_CLIENT_CERTIFICATE_PATH": cert})
    assert env.kind == "certificate" and type(identity_credential(env)).__name__ == "CertificateCredential"


def test_credential_file_profile_with_its_subscription_and_cloud(home):
    plan = resolve_auth("credential_file", {"profile": "hpc"}, {}, home=str(home))
    assert (plan.source, plan.kind, plan.cloud, plan.subscription_id) == \
        ("credential_file", "secret", "AzureChinaCloud", "sub-hpc")
    assert subscription_from({}, {}, plan) == "sub-hpc" and subscription_from({}, {"AZURE_SUBSCRIPTION_ID": "x"},
                                                                              plan) == "x"
    request = token_request(plan, CHINA_ARM)
    assert request["host"] == "login.chinacloudapi.cn" and request["form"]["client_secret"] == "s-hpc"
    # AZURE_PROFILE names it too, and the default profile is the file's [default].
    assert resolve_auth("credential_file", {}, {"AZURE_PROFILE": "hpc"}, home=str(home)).client_id == "app-hpc"
    assert resolve_auth("credential_file", {}, {}, home=str(home)).client_id == "app-default"
    with pytest.raises(AuthError, match=r"needs profile 'gpu' in ~/.azure/credentials, which is not there"):
        resolve_auth("credential_file", {"profile": "gpu"}, {}, home=str(home))


def test_msi_asks_the_managed_identity_endpoint_for_its_client(monkeypatch):
    monkeypatch.setenv("IDENTITY_ENDPOINT", "http://127.0.0.1:41234/msi/token")
    monkeypatch.setenv("IDENTITY_HEADER", "header")
    plan = resolve_auth("msi", {"client_id": "uami"}, {})
    request = token_request(plan)
    assert request["path"] == "/msi/token" and request["query"]["client_id"] == "uami"
    assert type(identity_credential(resolve_auth("msi", {}, {}))).__name__ == "ManagedIdentityCredential"


def test_cli_is_the_azure_cli_login():
    assert type(identity_credential(resolve_auth("cli", {}, {}))).__name__ == "AzureCliCredential"


def test_auto_with_nothing_set_is_default_azure_credential_which_finds_a_managed_identity(monkeypatch, tmp_path):
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE",
                 "AZURE_USERNAME", "AZURE_CLIENT_CERTIFICATE_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("IDENTITY_ENDPOINT", "http://127.0.0.1:41234/msi/token")
    monkeypatch.setenv("IDENTITY_HEADER", "header")
    plan = resolve_auth("auto", {}, {}, home=str(tmp_path))
    assert plan.source == "default" and type(identity_credential(plan)).__name__ == "DefaultAzureCredential"
    assert token_request(plan)["path"] == "/msi/token"


def test_azureml_core_gets_its_tokens_from_the_identity_credential(tmp_path):
    """SDK v1 has no certificate or workload identity login of its own: it asks azure-identity for
    a token per resource (TokenAuthentication's audience)."""
    token_file = tmp_path / "t"
    token_file.write_text("federated-jwt")
    seen: list[dict] = []
    plan = resolve_auth("env", {}, {"AZURE_CLIENT_ID": "app", "AZURE_TENANT_ID": "tn",
                                    "AZURE_FEDERATED_TOKEN_FILE": str(token_file)})
    tokens = IdentityTokens(identity_credential(plan, transport=fake_login(seen)))
    assert tokens("https://management.core.windows.net/") == "token-from-login.microsoftonline.com"
    assert seen[-1]["form"]["scope"] == "https://management.core.windows.net/.default"


# --- what is missing, in one sentence -----------------------------------------------------

@pytest.mark.parametrize("requested, options, environ, message", [
    ("env", {}, {"AZURE_CLIENT_ID": "app"}, "auth_source env needs AZURE_TENANT or AZURE_TENANT_ID, AZURE_SECRET or "
                                            "AZURE_CLIENT_SECRET (or a certificate, AZURE_CLIENT_CERTIFICATE_PATH, or "
                                            "a federated token, AZURE_FEDERATED_TOKEN_FILE), which are not set"),
    ("service_principal", {"client_id": "app", "secret": "s"}, {},
     "auth_source service_principal needs tenant (or AZURE_TENANT), which is not set"),
    ("auto", {"cloud_environment": "AzureGermanCloud"}, {},
     "cloud_environment must be one of AzureCloud, AzureChinaCloud, AzureUSGovernment, not 'AzureGermanCloud'"),
    ("kerberos", {}, {}, "auth_source must be one of auto, cli, env, msi, credential_file, service_principal"),
])
def test_what_is_missing_is_named(requested, options, environ, message, tmp_path):
    with pytest.raises(AuthError) as caught:
        resolve_auth(requested, options, environ, home=str(tmp_path))
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_refusal_under_auto_names_default_azure_credential():
    assert auth_failed("default", "auto", "ManagedIdentityCredential: no endpoint\nmore").startswith(
        "Azure authentication failed with auth_source auto (azure-identity's DefaultAzureCredential")


# --- auto's order, on generated settings ----------------------------------------------------

PARTS = st.fixed_dictionaries({}, optional={"client_id": st.just("o-app"), "secret": st.just("o-s"),
                                            "tenant": st.just("o-tn"), "profile": st.just("hpc")})
ENV = st.fixed_dictionaries({}, optional={"AZURE_CLIENT_ID": st.just("e-app"), "AZURE_SECRET": st.just("e-s"),
                                          "AZURE_CLIENT_SECRET": st.just("e-s2"), "AZURE_TENANT": st.just("e-tn"),
                                          "AZURE_TENANT_ID": st.just("e-tn2"), "AZURE_PROFILE": st.just("hpc"),
                                          "AZURE_FEDERATED_TOKEN_FILE": st.just("/t")})


@given(PARTS, ENV, st.booleans())
def test_auto_takes_the_first_complete_source_in_azure_azcollections_order(tmp_path_factory, options, environ,
                                                                           with_file):
    home = tmp_path_factory.mktemp("home")
    if with_file:
        (home / ".azure").mkdir()
        (home / ".azure" / "credentials").write_text(
            "[default]\nclient_id = f-app\nsecret = f-s\ntenant = f-tn\n[hpc]\nclient_id = h-app\nsecret = h-s\n"
            "tenant = h-tn\n")
    try:
        plan = resolve_auth("auto", options, environ, home=str(home))
    except AuthError:  # a profile named that the file does not hold
        assert not with_file and (options.get("profile") or (environ.get("AZURE_PROFILE") and not (
            options.get("client_id") and options.get("secret") and options.get("tenant"))))
        return
    options_complete = all(options.get(k) for k in ("client_id", "secret", "tenant"))
    env_complete = environ.get("AZURE_CLIENT_ID") and (environ.get("AZURE_TENANT") or environ.get("AZURE_TENANT_ID")) \
        and (environ.get("AZURE_SECRET") or environ.get("AZURE_CLIENT_SECRET") or environ.get("AZURE_FEDERATED_TOKEN_FILE"))
    if options.get("profile"):
        expected = ("credential_file", "h-app")
    elif options_complete:
        expected = ("service_principal", "o-app")
    elif environ.get("AZURE_PROFILE"):
        expected = ("credential_file", "h-app")
    elif env_complete:
        expected = ("env", "e-app")
    elif with_file:
        expected = ("credential_file", "f-app")
    else:
        expected = ("default", options.get("client_id"))
    assert (plan.source, plan.client_id) == expected
    # A secret comes from the source it names, never mixed from two.
    if plan.secret:
        assert plan.secret[0] == {"service_principal": "o", "env": "e", "credential_file": plan.client_id[0]}[
            plan.source]


def test_every_source_has_a_test_here():
    assert set(AUTH_SOURCES) == {"auto", "cli", "env", "msi", "credential_file", "service_principal"}
