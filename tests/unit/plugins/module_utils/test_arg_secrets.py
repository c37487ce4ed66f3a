"""The no_log values a result made on the controller masks: those AnsibleModule masks itself."""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values

from amlhpc.arg_secrets import no_log_values

SPEC = {
    "sas": {"type": "str", "no_log": True},
    "name": {"type": "str"},
    "auth": {"type": "dict", "options": {"client_secret": {"type": "str", "no_log": True}, "tenant": {"type": "str"}}},
    "keys": {"type": "list", "elements": "dict", "options": {"key": {"type": "str", "no_log": True}}},
    "tokens": {"type": "list", "elements": "str", "no_log": True},
}


def test_every_no_log_value_is_found_nested_ones_included():
    params = ArgumentSpecValidator(SPEC).validate({
        "sas": "sv=2024&sig=abc", "name": "n0", "auth": {"client_secret": "s3cr3t", "tenant": "t"},
        "keys": [{"key": "k1"}, {"key": "k2"}], "tokens": ["a1", "a2"]}).validated_parameters
    assert no_log_values(SPEC, params) == {"sv=2024&sig=abc", "s3cr3t", "k1", "k2", "a1", "a2"}


def test_absent_and_empty_values_are_not_masked():
    assert no_log_values(SPEC, {"sas": None, "name": "n0", "auth": None, "tokens": []}) == set()
    assert no_log_values(SPEC, {"sas": ""}) == set()


def test_a_result_masked_with_them_shows_no_secret():
    params = {"sas": "sv=2024&sig=abc", "name": "n0", "auth": {"client_secret": "s3cr3t", "tenant": "t"}}
    result = {"invocation": {"module_args": params}, "msg": "listed with sv=2024&sig=abc"}
    masked = remove_values(result, no_log_values(SPEC, params))
    assert "sig=abc" not in str(masked) and "s3cr3t" not in str(masked)
    assert masked["invocation"]["module_args"]["name"] == "n0"
