"""The one redaction (azcopy_sas.redact) on every path a SAS, key or signed URL can take out of
the collection: the blob_sas lookup, the azcopy_shards action (through a real play), a filter's
error, the run report and the HTML page. Each is fed a signature split by a line break, the
shape the old redaction let through after the break."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.plugins.loader import init_plugin_loader, lookup_loader

from ansible_cli import ansible_cli
from amlhpc.report.report import run_report
from amlhpc.report.report_html import report_html

ROOT = Path(__file__).resolve().parents[2]
HEAD, TAIL = "PathSECRETsigHEAD012345", "abcdefPathTAIL9876543210%3D"
SIGNED = f"sv=2026-10-06&sr=c&sp=rl&sig={HEAD}\n{TAIL}"
init_plugin_loader()


def shown(text: str) -> list[str]:
    return [part for part in (HEAD, TAIL, HEAD[:10], TAIL[:10]) if part in text]


def test_the_blob_sas_lookup_says_why_without_the_url_s_signature_or_the_key():
    lookup = lookup_loader.get("amlhpc.azureml.blob_sas")
    with pytest.raises(AnsibleError) as err:
        lookup.run([f"not-a-url?{SIGNED}"], container="c", account_key="a2V5" * 22)
    assert "is not an account URL" in str(err.value) and not shown(str(err.value))
    assert err.value.__cause__ is None  # Ansible prints a cause's own message too


def test_a_filter_error_quoting_its_input_is_redacted():
    from ansible_collections.amlhpc.azureml.plugins.plugin_utils.lazy_logic import lazy

    from ansible.errors import AnsibleFilterError
    call = lazy("trust.ssh_trust", "nodefile_lines", errors=(ValueError,))
    with pytest.raises(AnsibleFilterError) as err:  # the error quotes the value it refuses
        call([{"inventory_hostname": "n0", "aml_cluster": "gpu", "aml_node_rank": 0, "aml_private_ip": SIGNED}])
    assert "has no valid aml_private_ip" in str(err.value)
    assert not shown(str(err.value)) and err.value.__cause__ is None


def test_the_run_report_and_its_page_redact_what_the_phases_returned():
    node = {"inventory_hostname": "n0", "stage_result": {
        "changed": True, "files": 1, "bytes": 10, "seconds": 1.0, "summary": f"azcopy said: GET ?{SIGNED}",
        "errors": [f"403 for https://a.blob.core.windows.net/c?{SIGNED}"], "failed_transfers": [], "stray": []}}
    lines = run_report([node], {}, {"status": "Failed", "error": f"job failed: {SIGNED}"})
    assert not shown("\n".join(lines)), lines
    page = report_html([node], {"status": "Failed", "error": SIGNED}, [f"summary with {SIGNED}", *lines])
    assert not shown(page)


def test_the_shard_plan_s_listing_error_through_a_real_play(tmp_path):
    """azcopy_shards, as the stage play calls it: an account URL that carries a SAS (a signed URL
    pasted where the account URL goes) and a port nothing answers on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    play = tmp_path / "plan.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": [{"name": "Plan", "amlhpc.azureml.azcopy_shards": {
            "mode": "balanced", "account_url": f"http://127.0.0.1:{port}/devstoreaccount1?{SIGNED.replace(chr(10), '%0A')}",
            "container": "c", "auth": "sas", "sas": "sv=2026-10-06&sr=c&sp=rl&se=2099-01-01T00%3A00%3A00Z&sig=x%3D",
            "hosts": ["localhost"]}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    res = subprocess.run([ansible_cli("ansible-playbook"), "-i", "localhost,", str(play), "-vvv"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=180, check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Plan" in out, out[-3000:]
    assert not shown(out), json.dumps(shown(out))
