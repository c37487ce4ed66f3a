"""The BeeOND autoscale refusal is one sentence, written once (amlhpc.azure.autoscale), and the
validate play, the beeond role and aml_compute_cluster all say it the same way, unknown
sizes included."""

from __future__ import annotations

import pytest
from ansible.plugins.loader import filter_loader, init_plugin_loader

from amlhpc.azure.aml_nodes import ClusterSpec, spec_problems
from amlhpc.azure.autoscale import autoscale_refusal
from amlhpc.validate.inventory_checks import inventory_problems

# The filter as a play finds it: through Ansible's loader (the collection through ansible.cfg's
# collections_path, or ansible-test's own collection loader).
init_plugin_loader()
beeond_refusal = filter_loader.get("amlhpc.azureml.amlhpc_beeond_autoscale_refusal").j2_function


def nodes(low, high):
    return [{"inventory_hostname": f"n{i}", "aml_cluster": "gpu", "aml_node_rank": i,
             "aml_private_ip": f"10.0.0.{i + 4}", "aml_node_state": "idle",
             "aml_cluster_min_nodes": low, "aml_cluster_max_nodes": high} for i in range(2)]


def spec(low, high):
    return ClusterSpec(name="gpu", vm_size="Standard_ND96asr_v4", min_nodes=low, max_nodes=high,
                       admin_user="azureuser", ssh_public_key="ssh-ed25519 AAAA test", beeond_enabled=True)


@pytest.mark.parametrize("low, high", [(0, 4), (2, 3)])
def test_every_caller_says_the_same_sentence(low, high):
    sentence = autoscale_refusal("gpu", low, high)
    assert sentence.startswith(f"cluster 'gpu' autoscales (min {low}, max {high}); BeeOND needs min_nodes == max_nodes")
    assert beeond_refusal("gpu", low, high) == sentence
    assert inventory_problems(nodes(low, high), beeond_enabled=True) == [sentence]
    assert spec_problems(spec(low, high)) == [sentence]


@pytest.mark.parametrize("low, high", [(None, 4), (None, None), ("", "")])
def test_unknown_sizes_are_refused_everywhere_with_beeond(low, high):
    sentence = autoscale_refusal("gpu", low, high)
    assert "min/max node counts are unknown" in sentence
    assert inventory_problems(nodes(low, high), beeond_enabled=True) == [sentence]
    assert inventory_problems(nodes(low, high), beeond_enabled=False) == []


def test_fixed_size_is_no_refusal():
    assert autoscale_refusal("gpu", 4, "4") == ""
    assert inventory_problems(nodes(4, 4), beeond_enabled=True) == []
    assert spec_problems(spec(4, 4)) == []
