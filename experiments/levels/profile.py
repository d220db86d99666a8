"""Writing a device's profile from the results database (``gemmlab calibrate``, ``gemmlab levels``,
``gemmlab profile``).

The library never opens the database: ``matmul`` reads the profile file of its device (:mod:`gpu.profile`).
This module fills that file from the stored measurements of one device, one set per power regime (a cold
calibration adds its tables beside the sustained ones):

* the level tables the recursive predictor computes (:func:`modeling.profile.build_profile`) from the newest
  calibration of the environment asked for, or where it has none, of the newest environment of the same
  device and backend that has one (a configuration sweep on a new software stack, say);
* the configurations section (:mod:`gpu.strassen.choose`): every configuration timed against the DGEMM of its
  group at a size, from ``gemmlab calibrate --configurations`` and the Strassen speed-up and level sweeps, by
  :func:`configuration_section`.

``gemmlab profile --out gpu/profiles`` writes the profile the package bundles the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpu.profile import ProfileError, load_profile, profile_path, save_profile, with_regime
from gpu.strassen import Configuration
from modeling.profile import complete_profile

from ..core.database import ResultsDB
from ..core.regime import of_regime
from ..core.registry import Context
from ..strassen.bench import EXPERIMENT as SPEEDUP_EXPERIMENT
from . import configurations
from .models import LEVELS_EXPERIMENT, calibrated_envs, profile_inputs

#: The experiments whose rows time a configuration against the DGEMM of its group.
TIMED = (configurations.EXPERIMENT, SPEEDUP_EXPERIMENT, LEVELS_EXPERIMENT)
DTYPE = "float64"


def same_device(db: ResultsDB, key: str) -> list[str]:
    """``key`` and then the other environments of its device and backend, newest first."""
    env = db.environment(key)
    mine = (env.get("device"), env.get("backend"))
    others = [k for k in db.env_keys() if k != key and (db.environment(k).get("device"),
                                                         db.environment(k).get("backend")) == mine]
    return [key, *others]


def configuration_of(method: str, params: dict[str, Any]) -> Configuration | None:
    """The configuration a stored row timed (None for DGEMM, a row on CUDA streams, or another dtype):
    its level and schedule from the parameters, flat and graph from them or from the method's name."""
    flags = set(method.split("+")[1:])
    if (int(params.get("level", 0)) < 1 or params.get("schedule") == "gemm" or params.get("parallel")
            or params.get("dtype", DTYPE) != DTYPE):
        return None
    return Configuration(int(params["level"]), str(params["schedule"]), bool(params.get("fused")),
                         bool(params.get("flat", "flat" in flags)), bool(params.get("graph", "graph" in flags)))


def _timed(db: ResultsDB, key: str, regime: str) -> Iterable[Any]:
    for experiment in TIMED:
        yield from of_regime(db.measurements(experiment, env_key=key), regime)


def configuration_section(db: ResultsDB, key: str, regime: str = "sustained") -> dict[str, Any] | None:
    """The configurations section of env ``key``'s device in ``regime``: from the first environment of
    :func:`same_device` with a configuration sweep (``gemmlab calibrate --configurations``), else with timed
    configurations of any experiment, per size each configuration's newest time and speed-up over the DGEMM
    of its own group, and the median of those DGEMMs; None where none is stored."""
    envs = same_device(db, key)
    swept = [env for env in envs if of_regime(db.measurements(configurations.EXPERIMENT, env_key=env), regime)]
    for env in swept + [env for env in envs if env not in swept]:
        found: dict[int, dict[Configuration, Any]] = {}
        for m in sorted(_timed(db, env, regime), key=lambda m: m.created_at):
            config = configuration_of(m.method, m.params)
            if config is not None and m.meta.get("speedup") and m.meta.get("gemm_s"):
                found.setdefault(int(m.params["size"]), {})[config] = m
        if found:
            return {"env_key": env, "regime": regime, "points": [_point(n, rows) for n, rows in sorted(found.items())]}
    return None


def _point(n: int, rows: dict[Configuration, Any]) -> dict[str, Any]:
    gemm = sorted(float(m.meta["gemm_s"]) for m in rows.values())
    timed = [{"config": c.as_dict(), "seconds": float(m.value), "speedup": round(float(m.meta["speedup"]), 4),
              "samples": len(m.samples), "measured_by": m.experiment} for c, m in rows.items()]
    return {"size": n, "gemm_s": gemm[len(gemm) // 2], "timed": sorted(timed, key=lambda t: -t["speedup"])}


def calibration_env(db: ResultsDB, key: str, regime: str) -> str:
    """``key`` where it holds a float64 calibration in ``regime``, else the newest environment of its device
    and backend that does; ValueError where none does."""
    calibrated = {k for k, _ in calibrated_envs(db, DTYPE, regime)}
    found = next((k for k in same_device(db, key) if k in calibrated), None)
    if found is None:
        raise ValueError(f"env {key} (and no other environment of its device) has no float64 calibration of two "
                         "sizes or more (gemmlab calibrate)")
    return found


def write_profile(db: ResultsDB, key: str, written_by: str, regime: str = "sustained",
                  directory: str | Path | None = None) -> Path:
    """Write the profile of the device of environment ``key`` from its ``regime`` measurements (see the module
    notes) into ``directory`` (default: the profile directory), keeping the level tables and configurations
    the file already holds for the other regime; its path."""
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    source = calibration_env(db, key, regime)
    inputs = profile_inputs(db, source, regime=regime)
    doc = complete_profile({**inputs, "written_by": written_by, "written_at": when})
    section = configuration_section(db, key, regime)
    if section:
        doc["configurations"] = section
    try:
        old = load_profile(profile_path(doc["backend"], doc["device"], directory))
    except ProfileError:
        old = None                                   # an unreadable file is replaced, as before
    return save_profile(with_regime(old, doc, regime), directory)


def update_profile(ctx: Context) -> str:
    """Write the profile of the device ``ctx`` measures on, from what is stored; its path, or why
    none was written (no float64 calibration of two sizes yet)."""
    try:
        return str(write_profile(ctx.db, ctx.env_key, ctx.command, ctx.regime))
    except ValueError as exc:
        return f"not written: {exc}"
