"""Performance models built from stored results: which environment, its fits, its overhead.

The predictors of :mod:`modeling` take curves and numbers; this module finds
them in the results database. A calibration belongs to one environment (GPU
and software stack); ``select_env`` picks it by key, by device name, or as the
newest calibration of the device a backend runs on. The per-launch overhead of
the recursive predictor is the stored measurement (``launch-overhead``, taken
by the level-validation experiment) or else is fitted to the stored Strassen
timings of that environment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from modeling.fits import TimeModel, fit_calibration, measured_curves
from modeling.recursive import RecursiveModel

from . import calibration, strassen_bench
from .database import ResultsDB

DTYPE = "float64"
OVERHEAD_EXPERIMENT = "launch-overhead"
LEVELS_EXPERIMENT = "level-validation"
#: Largest per-launch host time the fit may return (ms): far above any Python call.
MAX_LAUNCH_MS = 5.0
#: Backends whose library calls return before the work is done (host time can hide).
ASYNCHRONOUS = ("cupy",)


def calibrated_envs(db: ResultsDB, dtype: str = DTYPE) -> list[tuple[str, dict[str, Any]]]:
    """(env key, environment) of every environment with a stored calibration, newest first."""
    return [(key, db.environment(key)) for key in db.env_keys() if calibration.table(db, key, dtype=dtype)]


def select_env(db: ResultsDB, env: str | None = None, device: str | None = None,
               current: dict[str, Any] | None = None, dtype: str = DTYPE) -> str:
    """The calibrated environment asked for: ``env`` (a key), else the newest whose device name
    contains ``device``, else the newest with the ``current`` device and backend."""
    envs = calibrated_envs(db, dtype)
    stored = "; ".join(f"{e.get('device', '?')} [{e.get('backend', '?')}] (--env {k})" for k, e in envs) or "none"
    if env is not None:
        if env in (k for k, _ in envs):
            return env
        raise ValueError(f"no {dtype} calibration stored for environment {env!r} in {db.path}; stored: {stored}")
    if device is not None:
        hits = [k for k, e in envs if device.lower() in str(e.get("device", "")).lower()]
        what = f"a device matching {device!r}"
    else:
        current = current or {}
        hits = [k for k, e in envs if e.get("device") == current.get("device")
                and e.get("backend") == current.get("backend")]
        what = f"this device ({current.get('device', '?')} [{current.get('backend', '?')}])"
    if not hits:
        raise ValueError(f"no {dtype} calibration stored for {what} in {db.path}; stored: {stored}. "
                         "Run gemmlab calibrate, import a calibration (gemmlab results import), "
                         "or choose a stored one with --env or --device")
    return hits[0]


def calibration_rows(db: ResultsDB, key: str, size_range: tuple[float, float] | None = None,
                     dtype: str = DTYPE) -> list[dict[str, Any]]:
    rows = calibration.table(db, key, dtype=dtype)
    if size_range is not None:
        rows = [r for r in rows if size_range[0] <= r["size"] <= size_range[1]]
    return rows


def time_model(db: ResultsDB, key: str, weighting: str = "relative",
               size_range: tuple[float, float] | None = None, dtype: str = DTYPE) -> TimeModel:
    """The cubic and quadratic fitted to the stored calibration of ``key``."""
    device = db.environment(key).get("device", key)
    return fit_calibration(calibration_rows(db, key, size_range, dtype), weighting,
                           source=f"calibration of {device} (env {key}), {weighting} least squares")


@dataclass(frozen=True)
class Timed:
    """One stored Strassen time and the GEMM of its group."""

    schedule: str
    fused: bool
    size: int
    level: int
    time_ms: float
    gemm_ms: float


def strassen_timings(db: ResultsDB, key: str, config: strassen_bench.Config | None = None,
                     dtype: str = DTYPE) -> list[Timed]:
    """Stored Strassen times of ``key`` (both the speed-up and the level-validation experiments),
    of one configuration or of all, levels >= 1."""
    out = []
    for experiment in (strassen_bench.EXPERIMENT, LEVELS_EXPERIMENT):
        for m in db.measurements(experiment, env_key=key):
            p = m["params"]
            if p.get("level", 0) < 1 or "speedup" not in m["meta"] or p["dtype"] != dtype:
                continue
            if config is not None and m["method"] != config.name:
                continue
            out.append(Timed(p["schedule"], bool(p["fused"]), p["size"], p["level"], 1e3 * m["value"],
                             1e3 * m["meta"]["gemm_s"]))
    return out


def recursive_model(gemm, geam, launch_ms: float, backend: str, config: strassen_bench.Config) -> RecursiveModel:
    return RecursiveModel(gemm, geam, config.schedule, config.fused, launch_ms, overlap=backend in ASYNCHRONOUS)


def fit_launch_ms(db: ResultsDB, key: str, timings: Sequence[Timed]) -> float:
    """The per-launch host time (ms) that best explains ``timings``: least squares on the log
    of each speed-up over the GEMM of its group, over the measured calibration curves."""
    if not timings:
        raise ValueError("no stored Strassen timings to fit the launch overhead to")
    gemm, geam = measured_curves(calibration_rows(db, key))
    backend = db.environment(key).get("backend", "")

    def loss(h: float) -> float:
        err = [math.log(t.gemm_ms / t.time_ms) - math.log(gemm(t.size) / recursive_model(
            gemm, geam, h, backend, strassen_bench.Config(t.schedule, fused=t.fused)).time(t.size, t.level))
               for t in timings]
        return float(np.dot(err, err))

    grid = np.concatenate([[0.0], np.geomspace(1e-4, MAX_LAUNCH_MS, 40)])
    best = int(np.argmin([loss(h) for h in grid]))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    return float(minimize_scalar(loss, bounds=(lo, hi), method="bounded").x) if hi > lo else float(grid[best])


def launch_overhead(db: ResultsDB, key: str, config: strassen_bench.Config) -> tuple[float, str]:
    """Per-launch host time in ms for ``config`` on ``key``, and where it came from."""
    stored = db.measurements(OVERHEAD_EXPERIMENT, env_key=key, method=config.name)
    if stored:
        newest = max(stored, key=lambda m: m["created_at"])
        return 1e3 * newest["value"], f"measured ({OVERHEAD_EXPERIMENT})"
    timings = strassen_timings(db, key)
    if timings:
        return fit_launch_ms(db, key, timings), f"fitted to {len(timings)} stored Strassen timings"
    return 0.0, "none stored (0): measure it with gemmlab levels"


def stored_predictor(db: ResultsDB, key: str, config: strassen_bench.Config) -> tuple[RecursiveModel, str]:
    """The recursive predictor of ``key``: measured calibration curves, the in-context curves
    for the calls inside a product where stored (``gemmlab calibrate --context``), and the
    launch overhead."""
    gemm, geam = measured_curves(calibration_rows(db, key))
    launch_ms, source = launch_overhead(db, key, config)
    backend = db.environment(key).get("backend", "")
    model = recursive_model(gemm, geam, launch_ms, backend, config)
    context = calibration.table(db, key, dtype=DTYPE, experiment=calibration.CONTEXT_EXPERIMENT)
    if len(context) >= 2:
        inner_gemm, inner_geam = measured_curves(context)
        model = replace(model, inner_gemm=inner_gemm, inner_geam=inner_geam)
        source += f"; inner calls from {len(context)} in-context calibration points"
    return model, source
