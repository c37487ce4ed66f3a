# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The one refusal of BeeOND on a cluster that can change size.

Said by the validate play (inventory_checks), the beeond role (beeond) and the cluster
lifecycle module (aml_nodes.spec_problems), in the same words, unknown sizes included.
"""

from __future__ import annotations

from typing import Any


def autoscale_refusal(cluster: str, min_nodes: Any, max_nodes: Any) -> str:
    """A sentence refusing BeeOND on a cluster that can scale, or "" when it cannot.

    A scale-down removes nodes that hold BeeOND chunks, which destroys the file system;
    a scale-up adds nodes BeeOND does not know. Unknown sizes are refused too.
    """
    if min_nodes is None or max_nodes is None or str(min_nodes) == "" or str(max_nodes) == "":
        # Fail closed: a cluster that might autoscale would lose BeeOND on a scale-down.
        return (f"cluster '{cluster}': its min/max node counts are unknown, so nothing shows that it "
                "cannot scale down under BeeOND: set min_nodes and max_nodes in its *.azureml_compute.yml "
                "file (the SDK sources read them from the cluster), or set beeond_enabled: false")
    low, high = int(min_nodes), int(max_nodes)
    if low != high:
        return (f"cluster '{cluster}' autoscales (min {low}, max {high}); BeeOND needs "
                "min_nodes == max_nodes: fix the cluster size or set beeond_enabled: false")
    return ""
