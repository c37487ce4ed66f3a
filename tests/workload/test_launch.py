"""workload/launch.py, the per-node launcher of a job whose health gate left nodes out: it trains
through torchrun's elastic rendezvous where its node's verdict says good, and ends at once,
without training, on an excluded node, a node with no verdict or with another run's."""

from __future__ import annotations

import json
import sys

from conftest import TINY_MODEL, WORKLOAD, free_port, run_in_group
from test_launchers import _check, _env

LAUNCH = str(WORKLOAD / "launch.py")


def verdict_file(tmp_path, status: str, port: int, **kw) -> str:
    path = tmp_path / "health-verdict.json"
    path.write_text(json.dumps({"id": "abc123", "node": "c-1", "status": status, "reasons": kw.pop("reasons", []),
                                "rendezvous": f"127.0.0.1:{port}", "min_nodes": 1, "max_nodes": 1,
                                "good": ["c-1"], **kw}))
    return str(path)


def launch(tmp_path, verdict: str, verdict_id: str = "abc123", data=None):
    out = tmp_path / "outputs"
    cmd = [sys.executable, LAUNCH, "--verdict", verdict, "--verdict-id", verdict_id, "--nproc-per-node", "2", "--",
           "train.py", "--data-dir", str(data or tmp_path / "no-data"), "--epochs", "2", "--batch-size", "4",
           "--output-dir", str(out), *TINY_MODEL]
    return run_in_group(cmd, env=_env()), out


def test_a_good_node_trains_through_the_elastic_rendezvous(tiny_data, tmp_path):
    proc, out = launch(tmp_path, verdict_file(tmp_path, "good", free_port()), data=tiny_data)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[launch] node c-1 trains: 1 node(s) meet at 127.0.0.1:" in proc.stdout
    assert "2 process(es) on 1 node(s) via torchrun, backend gloo" in proc.stdout
    _check(out, 2)


def test_an_excluded_node_ends_without_training(tmp_path):
    proc, out = launch(tmp_path, verdict_file(tmp_path, "excluded", free_port(),
                                              reasons=["gpu_health: 2 uncorrectable ECC error(s)"]))
    assert proc.returncode == 0 and not out.exists()
    assert proc.stdout == ("[launch] node c-1 was excluded by the health gate (gpu_health: 2 uncorrectable ECC "
                           "error(s)): it does not train; the other nodes train without it\n")


def test_a_node_without_this_runs_verdict_does_not_train(tmp_path):
    proc, out = launch(tmp_path, str(tmp_path / "missing.json"))
    assert proc.returncode == 0 and not out.exists() and "did not check this node" in proc.stdout
    proc, out = launch(tmp_path, verdict_file(tmp_path, "good", free_port()), verdict_id="other")
    assert proc.returncode == 0 and not out.exists() and "is from another run (id abc123" in proc.stdout
