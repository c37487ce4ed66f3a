"""Superseded by the AmlCompute twin (tests/twin/cluster.py); kept for bench/ until it moves
over. ``ContainerCluster(size, prefix, workdir)`` is a :class:`twin.cluster.Twin` on free ports."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twin.cluster import Twin, docker, free_base_port  # noqa: E402,F401


def ContainerCluster(size: int, prefix: str, workdir: Path) -> Twin:  # noqa: N802 - the old class name
    return Twin(size, workdir, prefix=prefix, base_port=free_base_port(size))
