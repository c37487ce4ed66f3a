"""ansible-core's test helpers that the oldest supported core (2.18) lacks, with the same use.

The collection supports ansible-core 2.18 to 2.21 (meta/runtime.yml) and the unit tests run on
both ends (make test-unit on 2.21, make test-oldest-core on 2.18). Where ansible-core has
the helper (2.19 and later) it is the helper itself; on 2.18 it is what the helper replaced.
"""

from __future__ import annotations

import contextlib
import json
import typing as t
from unittest import mock

# ansible.module_utils, not ansible.release: ansible-test units runs module tests with only the
# target side of ansible-core importable.
from ansible.module_utils.ansible_release import __version__ as _core_version

# (major, minor) of the ansible-core the tests run on, for the few facts that differ by core.
CORE = tuple(int(part) for part in _core_version.split(".")[:2])

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core 2.18
    @contextlib.contextmanager
    def patch_module_args(args: dict[str, t.Any] | None = None) -> t.Iterator[None]:
        """Expose the given module args to `AnsibleModule` instances created within this context
        (as 2.19's ansible.module_utils.testing.patch_module_args does). The module's warnings
        and deprecations start empty, as in the process of its own that a module runs in:
        2.18 keeps them in lists global to the process, which every later module's
        result would carry too."""
        from ansible.module_utils import basic
        from ansible.module_utils.common import warnings

        if not isinstance(args, (dict, type(None))):
            raise TypeError("The `args` arg must be a dict or None.")
        data = json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}).encode()
        with mock.patch.object(basic, "_ANSIBLE_ARGS", data), \
                mock.patch.object(warnings, "_global_warnings", []), \
                mock.patch.object(warnings, "_global_deprecations", []):
            yield


def squashed(text: str) -> str:
    """text without its white space: 2.18 wraps each warning at 80 columns (on a path or a hyphen
    as well as between words), so a sentence is compared with a warning squashed, on any core."""
    return "".join(text.split())


__all__ = ["CORE", "patch_module_args", "squashed"]
