"""One redaction for every message that can carry a secret (azcopy_sas.redact), over generated
SAS shapes (Hypothesis).

A generated secret (a SAS's signature: 32 random bytes in base64, as Azure Storage signs; a
storage account key: 64 random bytes in base64) is put into a SAS or connection string of a
generated shape (fields in any order, ``sig=`` anywhere, upper or lower case, URL-encoded once
or twice, a line break or spaces inside it, quoted), and that into a message the way the code's
paths build them (plain, ``repr``, JSON, an ``http.client`` refusal, a YAML dump, shell quoting).
Whether or not the caller hands the secret to ``redact``, no run of 10 characters of the
signature or key, raw or URL-encoded, is left in what ``redact`` returns.
"""

from __future__ import annotations

import base64
import json
import shlex
from urllib.parse import quote, quote_plus

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from amlhpc.staging.azcopy_sas import check_sas, redact

WINDOW = 10
BREAKS = st.sampled_from(["\n", "\r\n", " ", "\t", "\n  "])


def leaks(secret: str, out: str) -> list[str]:
    """Runs of WINDOW characters of ``secret`` left in ``out`` (raw, URL-encoded, or in a
    repr/JSON escape, where ``+``, ``/`` and ``=`` may be written differently)."""
    found = []
    for i in range(len(secret) - WINDOW + 1):
        run = secret[i:i + WINDOW]
        for form in (run, quote(run, safe=""), quote_plus(run), quote(quote(run, safe=""), safe="")):
            if form in out:
                found.append(form)
    return found


def broken(value: str, data: st.DataObject) -> str:
    """``value`` with a line break or spaces put somewhere inside it."""
    at = data.draw(st.integers(1, len(value) - 1), label="break at")
    return value[:at] + data.draw(BREAKS, label="break") + value[at:]


@st.composite
def sas_shape(draw) -> tuple[str, str]:
    """(a SAS in a generated shape, its signature in base64)."""
    sig = base64.b64encode(draw(st.binary(min_size=32, max_size=32))).decode()
    enc = draw(st.sampled_from(["quoted", "raw"]), label="sig encoding")
    value = quote(sig, safe="") if enc == "quoted" else sig
    name = draw(st.sampled_from(["sig", "SIG", "Sig"]))
    fields = ["sv=2026-10-06", "sr=c", "sp=rl", "se=2030-01-01T00%3A00%3A00Z", "spr=https",
              "skoid=11111111-1111-1111-1111-111111111111"]
    fields = draw(st.permutations(fields))[:draw(st.integers(1, len(fields)))]
    at = draw(st.integers(0, len(fields)))
    sas = "&".join([*fields[:at], f"{name}={value}", *fields[at:]])
    if draw(st.booleans(), label="leading ?"):
        sas = "?" + sas
    return sas, sig


@st.composite
def carrier(draw, secret_text: str) -> str:
    """A message carrying ``secret_text`` the way the collection's paths build them."""
    url = f"https://acct.blob.core.windows.net/cosmoflow?{secret_text.lstrip('?')}"
    how = draw(st.sampled_from(["plain", "repr", "json", "http", "yaml", "shell", "param", "param2", "dict",
                                "connection", "header"]))
    if how == "plain":
        return f"azcopy failed: {url}: 403 AuthenticationFailed"
    if how == "repr":
        return f"cannot list {url!r}"
    if how == "json":
        return json.dumps({"msg": f"GET {url}", "cmd": ["azcopy", "copy", url, "/mnt/x"]})
    if how == "http":
        return f"URL can't contain control characters. {url[url.index('/', 8):]!r} (found at least '\\n')"
    if how == "yaml":
        return yaml.safe_dump({"source": url})
    if how == "shell":
        return "azcopy copy " + shlex.quote(url) + " /mnt/scratch"
    if how == "param":
        return f"https://proxy.example/fetch?url={quote(url, safe='')}&x=1"
    if how == "param2":
        return f"https://proxy.example/fetch?url={quote(quote(url, safe=''), safe='')}"
    if how == "dict":
        from urllib.parse import parse_qs
        return f"fields: {parse_qs(secret_text.lstrip('?'))}"
    if how == "connection":
        return f"BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature={secret_text.lstrip('?')}"
    return f"Authorization: SharedAccessSignature {secret_text}"


@settings(max_examples=1500, deadline=None)
@given(shape=sas_shape(), data=st.data(), handed=st.booleans())
def test_no_run_of_a_signature_survives_redaction(shape, data, handed):
    sas, sig = shape
    if data.draw(st.booleans(), label="line break in the signature"):
        value_at = sas.lower().index("sig=") + 4
        sas = sas[:value_at] + broken(sas[value_at:value_at + len(quote(sig, safe=""))], data) + \
            sas[value_at + len(quote(sig, safe="")):] if sas[value_at:].startswith(quote(sig, safe="")) else \
            sas[:value_at] + broken(sas[value_at:value_at + len(sig)], data) + sas[value_at + len(sig):]
    message = data.draw(carrier(sas), label="message")
    out = redact(message, [sas] if handed else [])
    assert leaks(sig, out) == [], (message, out)


@settings(max_examples=500, deadline=None)
@given(key=st.binary(min_size=64, max_size=64), data=st.data(), handed=st.booleans())
def test_no_run_of_an_account_key_survives_redaction(key, data, handed):
    secret = base64.b64encode(key).decode()
    shown = broken(secret, data) if data.draw(st.booleans(), label="line break") else secret
    name = data.draw(st.sampled_from(["AccountKey", "accountkey", "ACCOUNTKEY"]))
    conn = f"DefaultEndpointsProtocol=https;AccountName=acct;{name}={shown};EndpointSuffix=core.windows.net"
    message = data.draw(st.sampled_from([f"cannot connect with {conn}", repr(conn), json.dumps({"c": conn}),
                                         f"x={quote(conn, safe='')}"]))
    out = redact(message, [secret] if handed else [])
    assert leaks(secret, out) == [], (message, out)


@settings(max_examples=300, deadline=None)
@given(secret=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=12, max_size=60),
       data=st.data())
def test_a_secret_handed_to_redact_goes_in_every_shape(secret, data):
    """A client secret or any other value the caller names: raw, URL-encoded, repr/JSON-escaped,
    with a line break inside it."""
    shown = broken(secret, data) if data.draw(st.booleans(), label="line break") else secret
    message = data.draw(st.sampled_from([f"login failed for {shown}", repr(shown), json.dumps(shown),
                                         quote(shown, safe=""), quote_plus(shown), shlex.quote(shown)]))
    out = redact(message, [shown])
    assert leaks(secret, out) == [], (message, out)


@pytest.mark.parametrize("sas", ["sv=2024&sig=abc\ndef", "sv=2024&sig=abc def", "sv=2024&sig=abc\tdef",
                                 "sv=2024&sig=abc\x00def", "sv=2024\n&sig=abcdef", "sv=2024&sig=abcdef\n"])
def test_a_sas_with_a_line_break_or_control_character_is_refused_without_its_value(sas):
    check = check_sas(sas)
    (error,) = check.errors
    assert "line break" in error and "abc" not in error and "def" not in error and "2024" not in error


def test_shrunk_case_the_tail_of_a_broken_signature():
    """The reviewer's case, kept as an example: the part after the line break was printed."""
    head, tail = "BROKENsigHEAD0123456789", "abcdefTAILpart9876543210zz%3D"
    out = redact(f"URL can't contain control characters. '/a/c?sp=rl&sig={head}\\n{tail}' (found at least '\\n')")
    assert head[:10] not in out and tail[:10] not in out and out.endswith("(found at least '\\n')")
