"""The azcopy_shards action: rank order of the play's hosts."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "plugins" / "action"))
azcopy_shards = importlib.import_module("azcopy_shards")


def test_hosts_come_in_cluster_then_rank_order():
    hostvars = {"b1": {"aml_cluster": "b", "aml_node_rank": 1}, "a10": {"aml_cluster": "a", "aml_node_rank": 10},
                "a2": {"aml_cluster": "a", "aml_node_rank": 2}, "b0": {"aml_cluster": "b", "aml_node_rank": 0}}
    task_vars = {"ansible_play_hosts_all": ["b1", "a10", "a2", "b0"], "hostvars": hostvars}
    assert azcopy_shards.ranked_hosts(task_vars) == ["a2", "a10", "b0", "b1"]
