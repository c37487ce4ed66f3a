# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The values of an argument spec's ``no_log`` options, which a result built on the controller
for a module (plugins/plugin_utils/node_read.py, the dataset_upload action) masks as the module
itself would (AnsibleModule masks them in its own output)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def _strings(value: Any) -> Iterator[str]:
    """Every scalar inside ``value``, as text (what a module's output could show of it)."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _strings(item)
    elif value is not None and value != "":
        yield str(value)


def no_log_values(spec: Mapping[str, Any], params: Mapping[str, Any]) -> set[str]:
    """The values of the ``no_log`` options of ``spec`` in ``params`` (sub-options included),
    which a module's result must not show: what AnsibleModule masks in its own output."""
    found: set[str] = set()
    for name, option in spec.items():
        value = params.get(name)
        if value is None:
            continue
        if option.get("no_log"):
            found.update(_strings(value))
        if option.get("options"):
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, Mapping):
                    found |= no_log_values(option["options"], item)
    return found
