"""The warning a stage with a SAS gets (azcopy takes a SAS only in its command line, so local users
of the node read it through ps), and the one case it is left out: a SAS of Azurite's development
account on this machine, whose key is published (the local default; issue 47: every local run
printed a warning a newcomer could do nothing about)."""

from __future__ import annotations

import ipaddress

from hypothesis import example, given, strategies as st

from amlhpc.staging.azcopy_sas import DEVELOPMENT_ACCOUNT, SAS_ARGV_WARNING, sas_argv_warning

LOCAL_DEFAULT = "http://127.0.0.1:10000/devstoreaccount1"


def test_the_local_defaults_store_gets_no_warning_and_a_real_account_does():
    assert sas_argv_warning("sas", LOCAL_DEFAULT) is None
    assert sas_argv_warning("sas", "https://acct.blob.core.windows.net") == SAS_ARGV_WARNING
    assert "managed_identity" in SAS_ARGV_WARNING  # the fix is named


def test_no_sas_no_warning():
    for auth in ("managed_identity", "azure_cli", "service_principal"):
        assert sas_argv_warning(auth, "https://acct.blob.core.windows.net") is None


def _loopback(host: str) -> bool:
    # Written apart from the product's check: a loopback address literal, or the name localhost.
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


HOSTS = st.one_of(
    st.sampled_from(["127.0.0.1", "localhost", "[::1]", "127.3.4.5", "10.0.0.4", "acct.blob.core.windows.net",
                     "127.0.0.1.nip.io", "localhost.example.com", "devstoreaccount1.blob.core.windows.net"]),
    st.from_regex(r"[a-z][a-z0-9]{2,20}\.blob\.core\.(windows\.net|chinacloudapi\.cn|usgovcloudapi\.net)", fullmatch=True),
    st.ip_addresses(v=4).map(str))
ACCOUNTS = st.one_of(st.just(DEVELOPMENT_ACCOUNT), st.from_regex(r"[a-z0-9]{3,24}", fullmatch=True), st.just(""))


@given(st.sampled_from(["http", "https"]), HOSTS, st.one_of(st.none(), st.integers(1, 65535)), ACCOUNTS)
@example("https", "devstoreaccount1.blob.core.windows.net", None, "")  # the name as a real account's host
@example("http", "127.0.0.1.nip.io", 10000, DEVELOPMENT_ACCOUNT)       # a name that looks loopback, is not
def test_only_the_development_account_on_loopback_goes_unwarned(scheme, host, port, account):
    url = f"{scheme}://{host}{f':{port}' if port else ''}/{account}"
    quiet = _loopback(host) and account == DEVELOPMENT_ACCOUNT
    assert sas_argv_warning("sas", url) == (None if quiet else SAS_ARGV_WARNING)
