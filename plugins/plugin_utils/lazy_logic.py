# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters whose logic (plugins/module_utils/amlhpc) is imported when they are called.

Ansible looks up a collection's filter by loading every filter file of the collection
(``Jinja2Loader.get_with_context`` goes through all of them, each time), in the worker process
of the host-task that templates it, and the forks share nothing one of them loaded. What a
filter file imports at its top is therefore paid, for all the collection's filter files
together, by every host-task that uses any amlhpc filter: 46 ms of controller CPU per task
over one with a builtin filter, 6 ms with the imports here (``bench/filter_load_bench.py``). The filter files import nothing of the logic at their top;
:func:`lazy` wraps a function of it that is imported on the first call.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from ansible.errors import AnsibleFilterError

PACKAGE = "ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc"


def logic(module: str) -> Any:
    """``plugins/module_utils/amlhpc/<subsystem>/<module>.py`` (``module`` is ``subsystem.module``),
    imported now (once per process)."""
    return importlib.import_module(f"{PACKAGE}.{module}")


def lazy(module: str, name: str, errors: tuple[type[Exception], ...] = ()) -> Callable[..., Any]:
    """``name`` of ``module``, imported on the first call; ``errors`` raised by it become
    ``AnsibleFilterError`` with the same message."""
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(logic(module), name)(*args, **kwargs)
        except errors as exc:
            # The message may quote what the filter was given: the one redaction, and no chained
            # cause (Ansible prints the cause's own message too).
            raise AnsibleFilterError(logic("staging.azcopy_sas").redact(str(exc))) from None

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{name} of plugins/module_utils/amlhpc/{module.replace('.', '/')}.py (imported when first called)."
    return call
