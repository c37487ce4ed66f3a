"""MLPerf HPC logging (``:::MLLOG`` lines) with the official ``mlperf-logging`` package.

Rank 0 writes ``<output-dir>/mlperf.log`` with the keys of the HPC 3.0.0 closed-division rules
for CosmoFlow; check a log with::

    python -m mlperf_logging.compliance_checker --usage hpc --ruleset 3.0.0 outputs/mlperf.log

Without the package (or on other ranks) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
from typing import Any


class MLLog:
    def __init__(self, path: str | None) -> None:
        self.logger = None
        self._handler: logging.Handler | None = None
        self.constants: Any = None
        if path is None:
            return
        try:
            from mlperf_logging import mllog
            from mlperf_logging.mllog.mllog import MLLogger
        except ImportError:
            return
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        base = logging.getLogger(f"cosmoflow.mllog.{id(self)}")
        base.propagate = False
        base.setLevel(logging.INFO)
        self._handler = logging.FileHandler(path, mode="a", encoding="utf-8")
        base.addHandler(self._handler)
        self._base = base
        self.logger = MLLogger(logger=base, default_stack_offset=2)
        self.constants = mllog.constants

    @property
    def enabled(self) -> bool:
        return self.logger is not None

    def event(self, key: str, value: Any = None, **metadata: Any) -> None:
        if self.logger is not None:
            self.logger.event(key=key, value=value, metadata=metadata or None)

    def start(self, key: str, value: Any = None, **metadata: Any) -> None:
        if self.logger is not None:
            self.logger.start(key=key, value=value, metadata=metadata or None)

    def end(self, key: str, value: Any = None, **metadata: Any) -> None:
        if self.logger is not None:
            self.logger.end(key=key, value=value, metadata=metadata or None)

    def close(self) -> None:
        if self._handler is not None:
            self._handler.close()
            self._base.removeHandler(self._handler)
            self._handler = None
