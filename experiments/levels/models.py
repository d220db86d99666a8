"""Performance models built from stored results: which environment, its fits, its overhead.

The predictors of :mod:`modeling` take curves and numbers; this module finds
them in the results database. A calibration belongs to one environment (GPU
and software stack); :func:`select_env` picks it by key, by device name, or as
the newest calibration of the device a backend runs on.

The recursive predictor is built the way ``level="auto"`` gets it: from the
inputs of a device profile (:func:`profile_inputs`: measured curves, the
in-context curves where stored, the launch overhead and whether calls are
asynchronous) through :func:`modeling.profile.predictor`, so the lab judges
exactly the model the library's level tables come from. The per-launch
overhead is the stored measurement (``launch-overhead``, taken by the
level-validation experiment) or else is fitted to the stored Strassen
timings of that environment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from gpu.backend import backend_class
from gpu.strassen import Config
from gpu.strassen.auto import profile_key
from modeling.evidence import Evidence
from modeling.fits import TimeModel, fit_calibration
from modeling.profile import columns, evidence, predictor, sweep_columns
from modeling.recursive import RecursiveModel

from ..core.database import ResultsDB
from ..core.environment import choose_env
from ..core.regime import of_regime
from ..strassen.bench import EXPERIMENT as SPEEDUP_EXPERIMENT
from . import calibration

DTYPE = "float64"
OVERHEAD_EXPERIMENT = "launch-overhead"
LEVELS_EXPERIMENT = "level-validation"
#: Largest per-launch host time the fit may return (ms): far above any Python call.
MAX_LAUNCH_MS = 5.0


def calibrated_envs(db: ResultsDB, dtype: str = DTYPE, regime: str = "sustained") -> list[tuple[str, dict[str, Any]]]:
    """(env key, environment) of every environment with a stored calibration, newest first."""
    return [(key, db.environment(key)) for key in db.env_keys()
            if calibration.table(db, key, dtype=dtype, regime=regime)]


def select_env(db: ResultsDB, env: str | None = None, device: str | None = None,
               current: dict[str, Any] | None = None, dtype: str = DTYPE) -> str:
    """The calibrated environment asked for: ``env`` (a key), else the newest whose device name
    contains ``device``, else the newest with the ``current`` device and backend."""
    return choose_env(calibrated_envs(db, dtype), f"{dtype} calibration", db.path, env, device, current,
                      "Run gemmlab calibrate, import a calibration (gemmlab results import), "
                      "or choose a stored one with --env or --device")


def calibration_rows(db: ResultsDB, key: str, size_range: tuple[float, float] | None = None,
                     dtype: str = DTYPE, experiment: str = calibration.EXPERIMENT,
                     regime: str = "sustained") -> list[dict[str, Any]]:
    """Stored calibration rows of ``key`` in ``regime`` as the mappings :mod:`modeling` fits take."""
    rows = calibration.table(db, key, dtype=dtype, experiment=experiment, regime=regime)
    if size_range is not None:
        rows = [r for r in rows if size_range[0] <= r.size <= size_range[1]]
    return [r.as_dict() for r in rows]


def time_model(db: ResultsDB, key: str, weighting: str = "relative", size_range: tuple[float, float] | None = None,
               dtype: str = DTYPE, regime: str = "sustained") -> TimeModel:
    """The cubic and quadratic fitted to the stored calibration of ``key``."""
    device = db.environment(key).get("device", key)
    return fit_calibration(calibration_rows(db, key, size_range, dtype, regime=regime), weighting,
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


def strassen_timings(db: ResultsDB, key: str, config: Config | None = None, dtype: str = DTYPE,
                     regime: str = "sustained") -> list[Timed]:
    """Stored Strassen times of ``key`` in ``regime`` (both the speed-up and the level-validation
    experiments), of one configuration or of all, levels >= 1."""
    out = []
    for experiment in (SPEEDUP_EXPERIMENT, LEVELS_EXPERIMENT):
        for m in of_regime(db.measurements(experiment, env_key=key), regime):
            p = m.params
            if p.get("level", 0) < 1 or "speedup" not in m.meta or p["dtype"] != dtype:
                continue
            if config is not None and m.method != config.name:
                continue
            out.append(Timed(p["schedule"], bool(p["fused"]), p["size"], p["level"], 1e3 * m.value,
                             1e3 * m.meta["gemm_s"]))
    return out


def asynchronous(db: ResultsDB, key: str) -> bool:
    """Whether the stored environment's backend issues calls asynchronously (host time can hide)."""
    return backend_class(db.environment(key).get("backend", "numpy")).asynchronous


def fit_launch_ms(db: ResultsDB, key: str, timings: Sequence[Timed], regime: str = "sustained") -> float:
    """The per-launch host time (ms) that best explains ``timings``: least squares on the log
    of each speed-up over the GEMM of its group, over the measured calibration curves."""
    if not timings:
        raise ValueError("no stored Strassen timings to fit the launch overhead to")
    inputs = {"calibration": columns(calibration_rows(db, key, regime=regime)), "asynchronous": asynchronous(db, key)}
    gemm = predictor(inputs).gemm

    def loss(h: float) -> float:
        doc = {**inputs, "launch_ms": {"default": h}}
        err = [math.log(t.gemm_ms / t.time_ms) - math.log(gemm(t.size) / predictor(doc, t.schedule, t.fused).time(
            t.size, t.level)) for t in timings]
        return float(np.dot(err, err))

    grid = np.concatenate([[0.0], np.geomspace(1e-4, MAX_LAUNCH_MS, 40)])
    best = int(np.argmin([loss(h) for h in grid]))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    return float(minimize_scalar(loss, bounds=(lo, hi), method="bounded").x) if hi > lo else float(grid[best])


def stored_overheads(db: ResultsDB, key: str, regime: str = "sustained") -> dict[str, float]:
    """The newest measured per-launch host time (ms) of each configuration of ``key``, by profile key
    (:func:`gpu.strassen.auto.profile_key`)."""
    newest = {}
    for m in sorted(of_regime(db.measurements(OVERHEAD_EXPERIMENT, env_key=key), regime), key=lambda m: m.created_at):
        newest[m.method.replace("-parallel", "")] = 1e3 * m.value   # a profile's key ignores streams
    return newest


def default_overhead(db: ResultsDB, key: str, regime: str = "sustained") -> tuple[float, str]:
    """Per-launch host time (ms) for configurations without a measurement, and where it came from."""
    timings = strassen_timings(db, key, regime=regime)
    if timings:
        return fit_launch_ms(db, key, timings, regime), f"fitted to {len(timings)} stored Strassen timings"
    return 0.0, "none stored (0): measure it with gemmlab levels"


def level_sweeps(db: ResultsDB, key: str, regime: str = "sustained", dtype: str = DTYPE
                 ) -> dict[str, list[tuple[int, int, float]]]:
    """Per configuration key (:func:`gpu.strassen.auto.profile_key`), the stored Strassen times of ``key`` in
    ``regime`` that ``level="auto"`` may rest on: (size, level, time over the GEMM of its group), from the
    strassen-speedup points and the level sweep of each configuration run eagerly on one stream, as auto
    runs it (the level sweep's where both hold a point, else the newest)."""
    found: dict[str, dict[tuple[int, int], float]] = {}
    for experiment in (SPEEDUP_EXPERIMENT, LEVELS_EXPERIMENT):
        for m in sorted(of_regime(db.measurements(experiment, env_key=key), regime), key=lambda m: m.created_at):
            p = m.params
            if p.get("level", 0) < 1 or not m.meta.get("speedup") or p.get("dtype") != dtype:
                continue
            name = profile_key(p["schedule"], bool(p["fused"]))
            if m.method == name:
                found.setdefault(name, {})[(int(p["size"]), int(p["level"]))] = 1.0 / float(m.meta["speedup"])
    return {name: [(n, level, over) for (n, level), over in sorted(points.items())] for name, points in found.items()}


def profile_inputs(db: ResultsDB, key: str, configs: Sequence[Config] | None = None,
                   regime: str = "sustained") -> dict[str, Any]:
    """What a device profile holds besides its level tables, from the stored results of ``key``.

    ``configs``: only these need a launch overhead (the default one is fitted only when one of
    them has no measurement); None: every configuration, as a profile needs.
    """
    env = db.environment(key)
    measured = stored_overheads(db, key, regime)
    launch = dict(measured)
    source = {name: f"measured ({OVERHEAD_EXPERIMENT})" for name in measured}
    if configs is None or any(Config(c.schedule, fused=c.fused).name not in measured for c in configs):
        launch["default"], source["default"] = default_overhead(db, key, regime)
    context = calibration_rows(db, key, experiment=calibration.CONTEXT_EXPERIMENT, regime=regime)
    return {"backend": env.get("backend"), "device": env.get("device"), "env_key": key, "regime": regime,
            "asynchronous": asynchronous(db, key), "calibration": columns(calibration_rows(db, key, regime=regime)),
            "context_calibration": columns(context), "launch_ms": launch, "launch_source": source,
            "level_sweep": {name: sweep_columns(points) for name, points in level_sweeps(db, key, regime).items()}}


def stored_predictor(db: ResultsDB, key: str, config: Config, regime: str = "sustained"
                     ) -> tuple[RecursiveModel, str]:
    """The recursive predictor of ``key`` for ``config`` in ``regime``, and where its launch overhead came from."""
    inputs = profile_inputs(db, key, [config], regime)
    if not inputs["calibration"]:
        raise ValueError(f"no {DTYPE} calibration of two sizes or more stored for env {key}; run gemmlab calibrate")
    name = Config(config.schedule, fused=config.fused).name
    source = inputs["launch_source"].get(name) or inputs["launch_source"]["default"]
    if inputs["context_calibration"]:
        source += f"; inner calls from {len(inputs['context_calibration']['size'])} in-context calibration points"
    return predictor(inputs, config.schedule, config.fused), source


def stored_evidence(db: ResultsDB, key: str, config: Config, regime: str = "sustained") -> Evidence:
    """What the stored measurements of ``key`` in ``regime`` support for ``config``: its calibrated sizes and
    level sweep, as its device profile holds them (:func:`modeling.profile.evidence`)."""
    doc = {"calibration": columns(calibration_rows(db, key, regime=regime)),
           "level_sweep": {name: sweep_columns(points) for name, points in level_sweeps(db, key, regime).items()}}
    return evidence(doc, config.schedule, config.fused)
