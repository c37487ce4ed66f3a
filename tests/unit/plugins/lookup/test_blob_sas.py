"""The blob_sas lookup, run by Ansible: what it returns and what it costs a worker to load."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

# In a fresh interpreter, as a worker forked for one node's task would: the lookup through
# Ansible's plugin loader, then which Azure packages that pulled in.
SCRIPT = r"""
import json, sys
from ansible.plugins.loader import init_plugin_loader, lookup_loader
init_plugin_loader([sys.argv[1]])
lookup = lookup_loader.get("amlhpc.azureml.blob_sas")
token = lookup.run(["http://127.0.0.1:10000/devstoreaccount1"], variables={}, container="cosmoflow",
                   account_key=sys.argv[2], hours=2)[0]
print(json.dumps({"token": token, "azure": sorted(m for m in sys.modules if m.startswith("azure"))}))
"""


def _run() -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / ".cache" / "collections"), KEY],
                         capture_output=True, text=True, check=True, cwd=ROOT, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_lookup_signs_without_loading_the_azure_sdk():
    got = _run()
    assert got["azure"] == [], "the lookup imported the Azure SDK in the worker"
    sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
    from amlhpc.staging.azcopy_sas import container_sas, parse_sas
    fields = parse_sas(got["token"])
    assert fields["sp"] == "rl" and fields["sr"] == "c"
    start, expiry = (datetime.strptime(fields[k], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
                     for k in ("st", "se"))
    assert (expiry - start).total_seconds() == 2 * 3600 + 5 * 60  # valid from 5 minutes back
    assert got["token"] == container_sas("devstoreaccount1", "cosmoflow", KEY, permission="rl", start=start,
                                         expiry=expiry)
