"""Writing a device's profile from the results database (``gemmlab calibrate`` and ``gemmlab levels``).

The library never opens the database: ``matmul(level="auto")`` reads the
profile file of its device (:mod:`gpu.profile`). This module fills that file
from the stored measurements of one environment, with the level tables the
recursive predictor computes (:func:`modeling.profile.build_profile`), one set per
power regime (a cold calibration adds its tables beside the sustained ones).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from gpu.profile import ProfileError, load_profile, profile_path, save_profile, with_regime
from modeling.profile import complete_profile

from ..core.database import ResultsDB
from ..core.registry import Context
from .models import profile_inputs


def write_profile(db: ResultsDB, key: str, written_by: str, regime: str = "sustained") -> Path:
    """Write the profile of the device of environment ``key`` from its ``regime`` measurements,
    keeping the level tables the file already holds for the other regime; its path."""
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    inputs = profile_inputs(db, key, regime=regime)
    if not inputs["calibration"]:
        raise ValueError(f"env {key} has no float64 calibration of two sizes or more (gemmlab calibrate)")
    doc = complete_profile({**inputs, "written_by": written_by, "written_at": when})
    try:
        old = load_profile(profile_path(doc["backend"], doc["device"]))
    except ProfileError:
        old = None                                   # an unreadable file is replaced, as before
    return save_profile(with_regime(old, doc, regime))


def update_profile(ctx: Context) -> str:
    """Write the profile of the device ``ctx`` measures on, from what is stored; its path, or why
    none was written (no float64 calibration of two sizes yet)."""
    try:
        return str(write_profile(ctx.db, ctx.env_key, ctx.command, ctx.regime))
    except ValueError as exc:
        return f"not written: {exc}"
