"""What a level sweep will take, priced before it runs (``gemmlab levels --dry-run``).

The estimate prices by the recursive predictor (the stored calibration of this
device, else its analytic model) the very groups :func:`~experiments.levels.validation.run_plan`
would time, and only those it would time (:func:`~experiments.levels.validation.pending`):

* the calibration points not stored: Gemm and Geam alone at each size, and in
  context (a sample lasts :data:`~experiments.levels.calibration.SUSTAIN_S`);
* the launch-overhead product;
* per size, the group of DGEMM and every planned level, unless all are stored;
* with ``--auto``, the group of DGEMM, ``level="auto"`` (at the level it would
  choose) and the executor at that level, each sample issuing the calls of
  :data:`~experiments.levels.auto.PIPELINE_S` of DGEMM back to back, unless its row is stored.

A group costs its warm-up, a check of each product and one batch of
:data:`~experiments.core.timing.MIN_REPEATS` rounds (the ``auto`` group:
:func:`~experiments.levels.auto.repeats_for`), the inputs re-drawn before every
sample (priced as one Geam of their size), plus the regime's cost: its
settling (``sustained``, where the backend reads a clock to settle) or its idle gap
before every sample (``cold``). It is given with one batch per group, and with as
many as the protocol's retry budget allows where every batch is unstable
(:func:`~experiments.core.timing.attempts_within`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu.backend import Backend
from modeling import hardware
from modeling.analytic import analytic_model
from modeling.recursive import RecursiveModel

from ..core.ascalled import HOST_REPEATS
from ..core.database import ResultsDB
from ..core.environment import env_key, environment
from ..core.regime import Regime, get_regime
from ..core.timing import MIN_REPEATS, WARMUP, attempts_within
from . import auto, calibration, models
from .validation import (
    OVERHEAD_EXPERIMENT,
    OVERHEAD_LEVEL,
    PROTOCOL,
    LevelPlan,
    calibration_sizes,
    context_sizes,
    fitting_sizes,
    overhead_point,
    pending,
)


@dataclass(frozen=True)
class Estimate:
    """Seconds a sweep should take with one batch per group, and at most (every batch unstable, as
    on a busy CPU); by what model; the seconds of each part (one batch each); the groups it times."""

    seconds: float | None
    how: str
    most: float | None = None
    parts: dict[str, float] = field(default_factory=dict)
    groups: int = 0


def group_seconds(times: Sequence[float], regime: Regime, settles: bool, calls: int = 1,
                  single_runs: int = PROTOCOL["warmup"] + 1, refill: float = 0.0,
                  repeats: int = MIN_REPEATS) -> tuple[float, float]:
    """Seconds of one interleaved group of methods taking ``times`` (s) per call, with one batch and
    with as many as the protocol takes where every batch is unstable: ``single_runs`` runs of each
    outside the batch (warm-up, check), batches of ``repeats`` rounds of ``calls`` calls each, the inputs
    re-drawn before every sample (``refill`` s), and the regime's settling or idle gaps."""
    once, samples = sum(times), repeats * len(times)
    timed = repeats * calls * once
    batch = timed + samples * (refill + regime.gap_s)
    fixed = single_runs * once + (regime.settle_min_s if settles else 0.0)
    return fixed + batch, fixed + attempts_within(timed) * batch


def estimate(plan: LevelPlan, backend: Backend, db_path: Path, regime: str = "sustained", quick: bool = False,
             force: bool = False) -> Estimate:
    """What ``gemmlab levels`` with ``plan`` should take here, points stored in ``db_path`` left out."""
    info = backend.device_info()
    with ResultsDB(db_path, readonly=True) as db:     # a missing file reads as empty
        model, how = _model(db, info, plan, regime)
        if model is None:
            return Estimate(None, how)
        key = env_key(environment(backend))
        parts = price(db, key, plan, model, backend, regime, quick, force)
    one = {name: sum(s for s, _ in costs) for name, costs in parts.items()}
    return Estimate(sum(one.values()), how, sum(m for costs in parts.values() for _, m in costs), one,
                    sum(map(len, parts.values())))


def _model(db: ResultsDB, info: dict[str, Any], plan: LevelPlan, regime: str) -> tuple[RecursiveModel | None, str]:
    try:
        model, _ = models.stored_predictor(db, models.select_env(db, current=info), plan.config, regime)
        return model, "stored calibration"
    except ValueError:
        pass
    try:
        gpu = hardware.lookup(info.get("device", ""))
    except ValueError:
        return None, "no calibration or hardware row for this device"
    return analytic_model(gpu, plan.config.schedule, plan.config.fused), f"analytic model of {gpu.name}"


def price(db: ResultsDB, key: str, plan: LevelPlan, model: RecursiveModel, backend: Backend, regime: str,
          quick: bool = False, force: bool = False) -> dict[str, list[tuple[float, float]]]:
    """The groups of each part of the sweep still to run on env ``key``: the seconds of each, with one
    batch and at most."""
    reg, settles = get_regime(regime), backend.telemetry() is not None
    sizes = fitting_sizes(plan, backend.memory_info()[0])
    cal = calibration_sizes(backend, plan, quick)
    parts: dict[str, list[tuple[float, float]]] = {}

    def missing(experiment: str, params: dict[str, Any], method: str) -> bool:
        return force or not db.has(experiment, method, params, key)

    def add(part: str, cost: tuple[float, float]) -> None:
        parts.setdefault(part, []).append(cost)

    for n in cal:
        for method in calibration.METHODS:
            if missing(calibration.EXPERIMENT, calibration.point(n, regime), method):
                curve = model.gemm if method == "gemm" else model.geam
                add("calibration", group_seconds([curve(n) / 1e3], reg, settles, single_runs=WARMUP))
    for n in context_sizes(cal, sizes):
        for method in calibration.METHODS:
            if missing(calibration.CONTEXT_EXPERIMENT, calibration.point(n, regime), method):
                add("calibration in context", group_seconds([calibration.SUSTAIN_S], reg, settles,
                                                            single_runs=WARMUP))
    point = overhead_point(regime)
    if missing(OVERHEAD_EXPERIMENT, point, plan.config.name):
        add("launch overhead", group_seconds([model.time(point["size"], OVERHEAD_LEVEL) / 1e3], reg, settles))
    for n in sizes:
        levels, due = pending(db, key, plan, n, regime, force)
        if levels:
            add("levels", group_seconds([model.time(n, lv) / 1e3 for lv in levels], reg, settles,
                                        refill=model.geam(n) / 1e3))
        if due:
            add("auto", auto_seconds(model, n, auto.auto_choice(backend, n, plan.config, regime)["level"], reg,
                                     settles))
    return parts


def auto_seconds(model: RecursiveModel, n: int, level: int, regime: Regime, settles: bool) -> tuple[float, float]:
    """Seconds of the ``auto`` group at n, ``auto`` running at ``level`` (one batch, and at most)."""
    gemm, chosen = model.time(n, 0) / 1e3, model.time(n, level) / 1e3
    times = [gemm, chosen, chosen]
    host = HOST_REPEATS * (gemm + chosen) + 2 * gemm       # host times, then call_seconds' two runs
    repeats = auto.repeats_for(gemm, len(times))
    return tuple(s + host for s in group_seconds(times, regime, settles, auto.calls_for(gemm),
                                                 refill=model.geam(n) / 1e3, repeats=repeats))
