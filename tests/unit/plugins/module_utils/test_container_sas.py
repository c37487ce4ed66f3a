"""A container SAS signed with the account key, with the standard library only (azcopy_sas.container_sas).

The blob_sas lookup runs in every node's worker that templates ``stage_sas`` (the stage's
probe and copy, twice per node); importing azure-storage-blob there cost about 175 ms of
controller CPU each time. The token must be the one azure-storage-blob makes, byte for byte,
and Azurite must accept it (tests/integration: the stage with the lookup's SAS)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from amlhpc.staging.azcopy_sas import SAS_VERSION, container_sas, parse_sas

AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
START = datetime(2026, 11, 23, 19, 0, 5, tzinfo=timezone.utc)


@pytest.mark.parametrize(("account", "container", "permission", "hours"), [
    ("devstoreaccount1", "cosmoflow", "rl", 4),
    ("myacct", "data-2026", "racwdl", 0.5),
    ("myacct", "c", "lr", 24),
    ("a1b2c3", "cosmoflow", "r", 4),
])
def test_the_token_is_azure_storage_blob_s(account, container, permission, hours):
    sdk = pytest.importorskip("azure.storage.blob")
    from azure.storage.blob._shared.constants import X_MS_VERSION
    expiry = START + timedelta(hours=hours)
    ours = container_sas(account, container, AZURITE_KEY, permission=permission, start=START, expiry=expiry,
                         version=X_MS_VERSION)
    theirs = sdk.generate_container_sas(account, container, account_key=AZURITE_KEY,
                                        permission=sdk.ContainerSasPermissions.from_string(permission),
                                        start=START, expiry=expiry)
    assert ours == theirs


def test_the_fields_a_node_checks_are_there():
    token = container_sas("devstoreaccount1", "cosmoflow", AZURITE_KEY, permission="lr", start=START,
                          expiry=START + timedelta(hours=4))
    fields = parse_sas(token)
    assert fields["sp"] == "rl"  # in the service's order, whatever order it was asked in
    assert fields["sr"] == "c" and fields["sv"] == SAS_VERSION
    assert (fields["st"], fields["se"]) == ("2026-11-23T19:00:05Z", "2026-11-23T23:00:05Z")
    assert len(fields["sig"]) == 44  # base64 of a SHA-256 HMAC


def test_a_naive_time_is_utc_and_another_zone_is_converted():
    naive = container_sas("a", "c", AZURITE_KEY, permission="rl", start=START.replace(tzinfo=None),
                          expiry=(START + timedelta(hours=1)).replace(tzinfo=None))
    zoned = container_sas("a", "c", AZURITE_KEY, permission="rl", start=START.astimezone(timezone(timedelta(hours=5))),
                          expiry=START + timedelta(hours=1))
    assert naive == zoned == container_sas("a", "c", AZURITE_KEY, permission="rl", start=START,
                                           expiry=START + timedelta(hours=1))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"permission": "rq"}, "permission 'q'"),
    ({"permission": ""}, "permission"),
    ({"key": "not base64!"}, "account key"),
    ({"container": ""}, "container"),
])
def test_bad_input_is_refused_by_name(kwargs, message):
    args = {"account": "a", "container": "c", "key": AZURITE_KEY, "permission": "rl"}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        container_sas(args["account"], args["container"], args["key"], permission=args["permission"],
                      start=START, expiry=START + timedelta(hours=1))
