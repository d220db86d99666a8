"""The Strassen level for ``matmul(level="auto")``: from this device's stored calibration when there
is one, else a fixed rule.

With a calibration of the device (``gemmlab calibrate``) in the results
database, the level is the recursive predictor's argmin (measured Gemm and
Geam curves, the stored or fitted per-launch overhead; see
``experiments.models.stored_predictor``). Without one, the documented rule:
split while the bottom products stay at least ``RULE_CROSSOVER`` (4096 on a
GPU, from the H100 calibration; 1024 on a CPU). The predictor is built once
per device, database and schedule and cached for the process (a call then
costs a dictionary lookup); :func:`forget` drops it after a new calibration.
"""

from __future__ import annotations

import math
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Bottom-product size of the fallback rule, per backend.
RULE_CROSSOVER = {"cupy": 4096, "numpy": 1024}
MAX_LEVEL = 10


def rule_level(size: int, backend: str) -> int:
    """Levels such that the bottom products stay at least the backend's crossover size."""
    crossover, level = RULE_CROSSOVER[backend], 0
    while size // 2 ** (level + 1) >= crossover and level < MAX_LEVEL:
        level += 1
    return level


def auto_level(size: int, backend: Any, *, db_path: str | Path | None = None, schedule: str = "rum",
               fused: bool = False) -> int:
    """Best level for an n x n x n product on ``backend`` (a ``gpu.backend.Backend``).

    Uses the newest float64 calibration stored for this device and backend in
    ``db_path`` (default: ``$GEMMLAB_DB`` or ``results/gemmlab.sqlite``); falls
    back to :func:`rule_level` where there is none.
    """
    if size <= 0:
        raise ValueError(f"size must be positive, got {size}")
    predictor = _predictor(backend, db_path, schedule, fused)
    if predictor is None:
        return rule_level(size, backend.name)
    top = min(MAX_LEVEL, int(math.log2(size)))
    return predictor.level(size, range(top + 1))


def _predictor(backend: Any, db_path: str | Path | None, schedule: str, fused: bool):
    from experiments.database import default_path

    path = Path(db_path) if db_path is not None else default_path()
    if not path.is_file():
        return None
    return _cached(backend.name, _device(backend), str(path.resolve()), schedule, fused)


def forget() -> None:
    """Drop the cached predictors (after ``gemmlab calibrate`` in the same process)."""
    _cached.cache_clear()


@lru_cache(maxsize=16)
def _device(backend: Any) -> str:
    return str(backend.device_info().get("device"))


@lru_cache(maxsize=16)
def _cached(backend: str, device: str, path: str, schedule: str, fused: bool):
    """The stored predictor of (backend, device) in the database at ``path``, or None."""
    from experiments import models
    from experiments.database import ResultsDB
    from experiments.strassen_bench import Config

    try:
        with ResultsDB(path) as db:
            key = models.select_env(db, current={"backend": backend, "device": device})
            return models.stored_predictor(db, key, Config(schedule, fused=fused))[0]
    except (ValueError, sqlite3.Error):  # no calibration of this device, or an unreadable database
        return None
