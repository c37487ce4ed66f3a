# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin for the dataset_upload module: its arguments carry a secret, so it runs pipelined on
every connection or not at all (see plugins/plugin_utils/pipelined.py)."""

from __future__ import annotations

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.pipelined import PipelinedOnlyAction


class ActionModule(PipelinedOnlyAction):
    """dataset_upload, pipelined only."""
