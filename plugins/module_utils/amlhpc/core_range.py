# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The ansible-core releases this collection supports, and the sentence that refuses the others.

``meta/runtime.yml``'s ``requires_ansible`` says the same range; ansible-core only warns about
it, so the inventory plugins and the first play of site.yml stop on a core below the floor
with :func:`core_floor_error`'s sentence (a test keeps the three in step).
"""

from __future__ import annotations

import re
from typing import Optional

CORE_FLOOR = (2, 18)
"""The oldest ansible-core the collection runs on (tested in make test, as is CORE_NEWEST)."""
CORE_NEWEST = (2, 21)
"""The newest ansible-core the collection is tested on."""
REQUIRES_ANSIBLE = f">={CORE_FLOOR[0]}.{CORE_FLOOR[1]}.0,<{CORE_NEWEST[0]}.{CORE_NEWEST[1] + 1}.0"
"""meta/runtime.yml's requires_ansible."""


def core_version(version: str) -> tuple[int, int]:
    """(major, minor) of an ansible-core version string such as ``2.18.12`` or ``2.21.0rc1``."""
    found = re.match(r"\s*(\d+)\.(\d+)", str(version))
    if not found:
        raise ValueError(f"not an ansible-core version: {version!r}")
    return int(found.group(1)), int(found.group(2))


def core_floor_error(version: str) -> Optional[str]:
    """One sentence refusing ``version`` when it is below :data:`CORE_FLOOR`, else None."""
    if core_version(version) >= CORE_FLOOR:
        return None
    floor = "%d.%d" % CORE_FLOOR
    ceiling = "%d.%d" % (CORE_NEWEST[0], CORE_NEWEST[1] + 1)
    return (f"amlhpc.azureml needs ansible-core {floor} or later and this is ansible-core {version}: "
            f"install a supported one (pip install 'ansible-core>={floor},<{ceiling}', or the ansible "
            f"package 11 to 14) and run again.")
