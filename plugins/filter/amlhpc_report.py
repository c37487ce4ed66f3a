# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filter of the report play: a thin wrapper around plugins/module_utils/amlhpc/report/report_html.py.

Documented in plugins/filter/amlhpc_report_html.yml (ansible-doc -t filter amlhpc.azureml.amlhpc_report_html)."""

from __future__ import annotations

from typing import Any

from ansible_collections.amlhpc.azureml.plugins.plugin_utils.lazy_logic import lazy


class FilterModule:
    """amlhpc report filter."""

    def filters(self) -> dict[str, Any]:
        return {"amlhpc_report_html": lazy("report.report_html", "report_html")}
