"""The level of ``matmul(level="auto")``: this device's profile where there is one, else a fixed rule.

A device profile (:mod:`gpu.profile`, written by ``gemmlab calibrate`` and
``gemmlab levels``) holds, per configuration (``rum``, ``rum+fused``, ...), the
level the recursive predictor chose from that device's measured curves among the
levels its measurements support (``modeling.evidence``: never one its level sweep
measured slower, never deeper than the measurements beyond the measured sizes), as a
table of sizes where the level changes: ``[[0, 0], [7432, 1], [14864, 2], ...]``.
The level for a size is the last row at or below it, looked up with
:func:`bisect.bisect_right`, so a call costs a file check and a search.

Without a profile (or without a table for the configuration), a GPU of the hardware table
(``modeling.hardware``) gets the transfer model's table for it, bundled with the package
(:func:`gpu.profile.transfer_levels`: predicted from its datasheet and the measured GPUs, for ``rum``
and ``rum+fused``). Otherwise the rule: split
while the bottom products stay at least ``RULE_CROSSOVER`` (4096 on a GPU, from
the H100 calibration). On a CPU the rule splits nothing: measured on a 2-core
machine with OpenBLAS, one level ran at 0.61x ``A @ B`` at N = 2048 and 0.70x at
4096, and a calibration there found no crossover up to 2048; ``gemmlab calibrate``
writes the profile that lets this CPU's own measurements decide. A profile that
cannot be read is reported in a warning and the rule is used.

Tables are kept per power regime (``sustained``, ``cold``: :data:`gpu.profile.REGIMES`),
since the SM clock a calibration ran at moves the crossovers; ``matmul(regime=...)`` says
which one the caller runs in (sustained by default, as long HPC runs are).
"""

from __future__ import annotations

import bisect
import math
import warnings
from typing import Any

from ..backend import Backend
from ..profile import DEFAULT_REGIME, ProfileError, check_regime, current_profile, regime_levels, transfer_levels
from .schedules import Config

#: Bottom-product size of the fallback rule, per backend (None: level 0 at every size).
RULE_CROSSOVER: dict[str, int | None] = {"cupy": 4096, "numpy": None}
MAX_LEVEL = 10


def rule_level(size: int, backend: str) -> int:
    """Levels such that the bottom products stay at least the backend's crossover size (0 where it has none)."""
    crossover, level = RULE_CROSSOVER[backend], 0
    if crossover is None:
        return 0
    while size // 2 ** (level + 1) >= crossover and level < MAX_LEVEL:
        level += 1
    return level


def table_level(table: list[list[int]], size: int) -> int:
    """The level of ``size`` in a profile's level table (rows [first size, level], ascending)."""
    starts = [row[0] for row in table]
    i = bisect.bisect_right(starts, size) - 1
    return int(table[max(i, 0)][1])


def profile_key(schedule: str, fused: bool) -> str:
    """A profile's table key: the configuration's name without streams (the predictor ignores them)."""
    return Config(schedule, fused=fused).name


def auto_level(size: int, backend: Backend, *, schedule: str = "rum", fused: bool = False,
               profile: dict[str, Any] | None = None, regime: str = DEFAULT_REGIME) -> int:
    """Best level for an n x n x n product on ``backend`` in power ``regime``: from the regime's
    tables in ``profile`` (default: the device's profile file, :func:`gpu.profile.current_profile`;
    another regime's, with a warning, where the profile lacks this one), else (reading the device's) the
    transfer model's table for this GPU, else :func:`rule_level`. Never more levels than halvings of ``size``."""
    check_regime(regime)
    if size <= 0:
        raise ValueError(f"size must be positive, got {size}")
    given = profile is not None
    if profile is None:
        try:
            profile = current_profile(backend)
        except ProfileError as exc:
            warnings.warn(f"{exc}; level='auto' uses the fixed rule", RuntimeWarning, stacklevel=3)
    tables, stand_in = regime_levels(profile, regime)
    if stand_in:
        warnings.warn(stand_in, RuntimeWarning, stacklevel=3)
    table = tables.get(profile_key(schedule, fused))
    if not table and not given:
        table = transfer_levels(backend)[0].get(profile_key(schedule, fused))
    level = table_level(table, size) if table else rule_level(size, backend.name)
    return min(level, MAX_LEVEL, int(math.log2(size)))
