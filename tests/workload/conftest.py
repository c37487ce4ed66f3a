"""Workload tests run with the workload venv (torch): .venv-workload/bin/python -m pytest tests/workload."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

WORKLOAD = Path(__file__).resolve().parents[2] / "workload"
if str(WORKLOAD) not in sys.path:
    sys.path.insert(0, str(WORKLOAD))

from amlhpc.cosmoflow_data import generate  # noqa: E402  (through workload/amlhpc)

TINY_MODEL = ["--cube", "16", "--conv-layers", "2", "--conv-size", "4", "--fc1-size", "16", "--fc2-size", "8",
              "--dropout", "0", "--warmup-epochs", "0", "--base-batch-size", "4", "--lr", "0.01",
              "--workers", "1", "--log-every", "1", "--resume", "none"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """16^3 cubes: 64 training and 32 validation samples, plain files."""
    root = tmp_path_factory.mktemp("cosmo16")
    generate(str(root), train_universes=2, val_universes=1, cube=16, subvolumes=32, gzip=False, seed=1)
    return root


@pytest.fixture()
def master_port(monkeypatch) -> int:
    port = free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"):
        monkeypatch.delenv(var, raising=False)
    return port
