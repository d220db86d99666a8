"""Level validation: the best Strassen level measured over a dense size sweep, against the predictors.

At every size of the sweep the library GEMM (level 0) and the chosen
configuration at levels 1..L are timed interleaved in one group on the same
operands (``strassen_bench``'s checked works and protocol), so the best level
at a size is decided within one group, free of drift between runs. Levels
whose bottom products would be smaller than ``min_bottom`` are not measured:
thousands of tiny launches make them lose by a wide margin and would cost
most of the sweep's time.

Three predictors are then judged on the stored sweep, each choosing among the
measured levels at each size:

* the thesis rule from the relative-error fit (``modeling.crossover``);
* the thesis rule as the thesis made it: ordinary least squares;
* the recursive model (``modeling.recursive``) over the measured calibration
  curves, with the per-launch host time measured here (``launch-overhead``).

For each: the level boundaries (where level L starts) and their error against
the measured ones (%), and the time lost over the sweep when its level is used
instead of the best: sum of T(predicted) over sum of T(best), minus one.
A measured boundary is where level L overtakes level L-1 for good: the last
upward zero of ln(T_{L-1} / T_L), interpolated between the sizes around it.

With ``auto`` (``gemmlab levels --auto``) each group also times ``matmul(level="auto")``
itself, judged against the best measured level (:mod:`experiments.levels.auto`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from gpu.backend import Backend
from gpu.strassen import Config, total_launches
from modeling.crossover import (
    crossover_point,
    interpolated_crossing,
    thesis_boundaries,
    thesis_level,
)
from modeling.fits import TimeModel
from modeling.profile import credible
from modeling.recursive import RecursiveModel

from ..core.database import ResultsDB
from ..core.lab import HEADROOM, Operands, free_memory, operand_bytes
from ..core.regime import of_regime
from ..core.registry import Context
from ..core.sweep import Record, SweepOutcome, sweep
from ..core.timing import measure
from ..strassen.bench import DTYPE, checked_works, config_bytes, point_params, strassen_work, time_strassen
from . import auto, calibration, models

EXPERIMENT = models.LEVELS_EXPERIMENT
OVERHEAD_EXPERIMENT = models.OVERHEAD_EXPERIMENT
#: Levels and bottom size of the product whose time, over its launches, is the host time per launch.
OVERHEAD_LEVEL, OVERHEAD_BOTTOM = 3, 32
RUM = Config("rum")
#: One warm-up round per group; re-measurement is bounded by the protocol's time budget.
PROTOCOL = {"warmup": 1}


@dataclass(frozen=True)
class LevelPlan:
    """Sizes and levels of a validation sweep."""

    sizes: tuple[int, ...]
    max_level: int
    min_bottom: int
    config: Config = RUM
    #: Time ``matmul(level="auto")`` in each size's group too (:mod:`experiments.levels.auto`).
    auto: bool = False

    def levels(self, n: int) -> list[int]:
        """Levels measured at size n: 0 (the library GEMM) and those whose bottom is big enough."""
        return [lv for lv in range(self.max_level + 1)
                if lv == 0 or (n % 2**lv == 0 and n // 2**lv >= self.min_bottom)]


PLANS: dict[tuple[str, bool], LevelPlan] = {
    # H100: levels 1-3 start near 8000, 16000 and 30000 with their bottom products near 4096; a step
    # of 1024 resolves the boundaries to a few per cent, and bottoms of at least 2048 keep a factor two
    # of margin while leaving out the host-bound deep levels (a level-4 product at 8192 takes 25 GEMMs'
    # time). About six minutes of GPU time with one batch per size, plus four minutes of calibration where
    # none is stored (``gemmlab levels --dry-run`` prices it: :mod:`experiments.levels.estimate`).
    ("cupy", False): LevelPlan(tuple(range(4096, 24577, 1024)) + (26624, 28672, 32768), 4, 2048),
    ("cupy", True): LevelPlan((4096, 6144, 8192, 12288, 16384), 3, 2048),
    ("numpy", False): LevelPlan(tuple(range(256, 1537, 128)), 3, 64),
    ("numpy", True): LevelPlan((128, 192, 256, 320, 384), 2, 32),
}


def custom_plan(backend: Backend, quick: bool, sizes: Sequence[int] | None = None, max_level: int | None = None,
                config: Config | None = None, min_bottom: int | None = None, auto: bool = False) -> LevelPlan:
    """The backend's plan with chosen sizes, deepest level, configuration or bottom size, timing
    ``matmul(level="auto")`` too where ``auto``."""
    base = PLANS[(backend.name, quick)]
    if sizes is not None and (not sizes or min(sizes) <= 0):
        raise ValueError(f"sizes must be positive integers, got {list(sizes)}")
    if max_level is not None and not 1 <= max_level <= 10:
        raise ValueError(f"the deepest level must lie in 1..10, got {max_level}")
    if min_bottom is not None and min_bottom < 1:
        raise ValueError(f"the smallest bottom product must be at least 1, got {min_bottom}")
    return LevelPlan(tuple(sorted(set(sizes))) if sizes else base.sizes, max_level or base.max_level,
                     min_bottom or base.min_bottom, config or base.config, auto)


def level_params(n: int, level: int, config: Config, regime: str = "sustained") -> dict[str, Any]:
    return point_params(n, level, config, DTYPE, regime)


def fitting_sizes(plan: LevelPlan, free: int, itemsize: int = 8) -> list[int]:
    """Sizes of the plan whose operands and deepest configuration fit in ``free`` bytes."""
    budget = HEADROOM * free
    return [n for n in plan.sizes
            if max(config_bytes(plan.config, n, lv, itemsize) for lv in plan.levels(n)[1:] or [0]) <= budget
            and operand_bytes(n) <= budget]


# --------------------------------------------------------------------------- measuring

def calibration_sizes(backend: Backend, plan: LevelPlan, quick: bool) -> list[int]:
    """The backend's calibration sizes up to the largest swept size (at least five, for the cubic)."""
    defaults = calibration.default_sizes(backend, quick)
    chosen = [n for n in defaults if n <= max(plan.sizes)]
    return chosen if len(chosen) >= 5 else defaults[:5]


def context_sizes(cal_sizes: Sequence[int], sizes: Sequence[int]) -> list[int]:
    """Sub-product sizes calibrated in context: those of ``cal_sizes`` whose double is swept (at least two)."""
    inner = [n for n in cal_sizes if 2 * n <= max(sizes)]
    return inner if len(inner) >= 2 else list(cal_sizes[:2])


def pending(db: ResultsDB, key: str, plan: LevelPlan, n: int, regime: str, force: bool) -> tuple[list[int], bool]:
    """What the sweep times at size n on env ``key``: the levels of its group (every planned level, or
    none where all are stored) and whether the ``auto`` group is due (``plan.auto``, its row not stored)."""
    config = plan.config
    stored = not force and all(db.has(EXPERIMENT, config.name, level_params(n, lv, config, regime), key)
                               for lv in plan.levels(n))
    due = plan.auto and (force or not db.has(auto.AUTO_EXPERIMENT, config.name, auto.auto_params(n, config, regime),
                                             key))
    return ([] if stored else plan.levels(n)), due


def measure_overhead(backend: Backend, params: Mapping[str, Any], methods: Sequence[str],
                     config: Config) -> dict[str, Record]:
    """Host time per library call: a product with thousands of tiny kernels is bound by their issue,
    so its time over its launches is what one call costs the host."""
    n, level = params["size"], params["level"]
    ops = Operands.uniform(backend, n)
    work = strassen_work(config, level, ops)
    launches = total_launches(config.schedule, level, config.fused)
    timing = measure(work, backend, setup={"_": ops.refill_and_wait}, regime=params.get("regime", "sustained"))
    per_launch = [s / launches for s in timing.samples]
    return {config.name: Record(timing.median / launches, "s", per_launch,
                                {**timing.meta(), "launches": launches, "product_s": timing.median})}


def overhead_point(regime: str = "sustained") -> dict[str, Any]:
    """The launch-overhead product: level 3 on 32 x 32 bottoms (1198 kernels for RUM)."""
    return {"size": OVERHEAD_BOTTOM * 2**OVERHEAD_LEVEL, "level": OVERHEAD_LEVEL, "dtype": DTYPE, "regime": regime}


def sweep_levels(ctx: Context, plan: LevelPlan, sizes: Sequence[int]) -> SweepOutcome:
    """One interleaved group per size (GEMM and every planned level) and, with ``plan.auto``, a group of
    ``matmul(level="auto")`` (:func:`experiments.levels.auto.time_auto`), stored at once; a size with every
    level stored (and its ``auto`` row) is skipped unless ``ctx.force``, and one whose levels are stored
    times the ``auto`` group only."""
    be, config, outcome = ctx.backend, plan.config, SweepOutcome()
    with be.allocation_policy("pooled"):
        for n in tqdm(sizes, desc=EXPERIMENT, unit="size", disable=not ctx.progress, file=sys.stderr, leave=False):
            levels = plan.levels(n)
            timed, due = pending(ctx.db, ctx.env_key, plan, n, ctx.regime, ctx.force)
            choice = auto.auto_choice(be, n, config, ctx.regime) if due else None
            outcome.skipped += (0 if timed else len(levels)) + int(plan.auto and not due)
            if not timed and choice is None:
                continue
            ops = works = result = timed_auto = None
            try:
                ops = Operands.uniform(be, n)
                if timed:
                    works, errors = checked_works(ops, {f"L{lv}": (config, lv) for lv in timed[1:]})
                    result = time_strassen(ops, works, ctx.regime, **PROTOCOL)
                if choice is not None:
                    timed_auto = auto.time_auto(ops, config, choice["level"], ctx.regime, PROTOCOL)
            finally:
                ops = works = None            # the works hold the operands too: both go before the next size
                free_memory(be)
            for lv in timed:
                gemm = result.timings["gemm"]
                name = f"L{lv}" if lv else "gemm"
                timing = result.timings[name]
                ctx.db.add(ctx.run_id, EXPERIMENT, config.name, level_params(n, lv, config, ctx.regime),
                           value=timing.median,
                           unit="s", samples=timing.samples,
                           meta={**timing.meta(), "speedup": result.ratio(name), "gemm_s": gemm.median,
                                 "check_error": errors.get(name, 0.0), "group_levels": levels,
                                 "inputs": "re-drawn before every sample", "allocation_policy": "pooled"})
                outcome.measured += 1
            if timed_auto is not None:
                auto.store_auto(ctx, config, n, *timed_auto, choice)
                outcome.measured += 1
    return outcome


def run_plan(ctx: Context, plan: LevelPlan) -> tuple[dict[str, Any], Report, auto.AutoJudgement]:
    """Calibrate (what is missing, plain and in context), measure the launch overhead and the
    sweep, then judge the levels and ``level="auto"``."""
    be = ctx.backend
    sizes = fitting_sizes(plan, free_memory(be))
    if not sizes:
        raise ValueError(f"no {EXPERIMENT} size fits in the memory free on the {be.name} device")
    cal_sizes = calibration_sizes(be, plan, ctx.quick)
    _, cal = calibration.calibrate(ctx, cal_sizes)
    _, ctx_cal = calibration.calibrate_context(ctx, context_sizes(cal_sizes, sizes))
    over = sweep(ctx, OVERHEAD_EXPERIMENT, [overhead_point(ctx.regime)], [plan.config.name],
                 lambda params, methods: measure_overhead(be, params, methods, plan.config),
                 desc=OVERHEAD_EXPERIMENT)
    done = sweep_levels(ctx, plan, sizes)
    report = judge(ctx.db, ctx.env_key, plan.config, sizes, ctx.regime)
    parts = (cal, ctx_cal, over, done)
    found = auto.judge_auto(ctx.db, ctx.env_key, plan.config, report.times, ctx.regime, sizes)
    return {"points measured": sum(p.measured for p in parts), "points already stored": sum(p.skipped for p in parts),
            **auto.with_judgement(report.summary(), found)}, report, found


# --------------------------------------------------------------------------- judging

def stored_sweep(db: ResultsDB, key: str, config: Config, sizes: Sequence[int] | None = None,
                 regime: str = "sustained") -> dict[int, dict[int, float]]:
    """{size: {level: seconds}} of the stored sweep of ``config`` in ``regime`` (sizes with level 0 only)."""
    times: dict[int, dict[int, float]] = {}
    for m in of_regime(db.measurements(EXPERIMENT, env_key=key, method=config.name), regime):
        p = m.params
        if p["dtype"] == DTYPE and (sizes is None or p["size"] in sizes):
            times.setdefault(p["size"], {})[p["level"]] = m.value
    return {n: t for n, t in sorted(times.items()) if 0 in t}


def best_levels(times: Mapping[int, Mapping[int, float]]) -> dict[int, int]:
    return {n: min(t, key=t.__getitem__) for n, t in times.items()}


def measured_boundaries(times: Mapping[int, Mapping[int, float]], max_level: int) -> list[float | None]:
    """Where each level 1..max_level overtakes the one below for good, between measured sizes."""
    out = []
    for lv in range(1, max_level + 1):
        sizes = [n for n, t in times.items() if lv in t and lv - 1 in t]
        gain = [np.log(times[n][lv - 1] / times[n][lv]) for n in sizes]
        out.append(interpolated_crossing(sizes, gain) if sizes else None)
    return out


@dataclass
class Verdict:
    """How one predictor does on a measured sweep."""

    name: str
    levels: dict[int, int]
    boundaries: list[float | None]
    errors_pct: list[float | None]
    time_lost_pct: float
    worst_loss_pct: float
    worst_size: int | None
    mispredicted: int
    detail: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {**self.detail,
                "boundaries": [None if b is None else round(b) for b in self.boundaries],
                "boundary error %": [None if e is None else round(e, 2) for e in self.errors_pct],
                "time lost over the sweep %": round(self.time_lost_pct, 3),
                "worst size": None if self.worst_size is None else
                f"{self.worst_loss_pct:.2f}% lost at N = {self.worst_size}",
                "sizes mispredicted": self.mispredicted}


def verdict(name: str, choose: Callable[[int, list[int]], int], boundaries: list[float | None],
            times: Mapping[int, Mapping[int, float]], measured: list[float | None], **detail: Any) -> Verdict:
    """Judge a predictor: ``choose(n, measured levels)`` picks a level at each size."""
    best = best_levels(times)
    picked = {n: choose(n, sorted(t)) for n, t in times.items()}
    lost = {n: times[n][picked[n]] / times[n][best[n]] - 1 for n in times}
    total = sum(times[n][picked[n]] for n in times) / sum(times[n][best[n]] for n in times) - 1
    worst = max(lost, key=lost.__getitem__) if lost else None
    errors = [None if b is None or m is None else 100 * (b - m) / m for b, m in zip(boundaries, measured)]
    return Verdict(name, picked, boundaries, errors, 100 * total, 100 * lost[worst] if worst else 0.0,
                   worst if worst and lost[worst] > 0 else None, sum(picked[n] != best[n] for n in times), detail)


def thesis_verdict(name: str, model: TimeModel, times, measured, max_level: int) -> Verdict:
    """The thesis rule of ``model`` (P from its fits; a, b from RUM's table, as the thesis)."""
    try:
        P = crossover_point(model)
    except ValueError as exc:
        return verdict(name, lambda n, levels: 0, [None] * max_level, times, measured, P=None, note=str(exc))
    return verdict(name, lambda n, levels: min(thesis_level(n, P, max_level), max(levels)),
                   thesis_boundaries(P, max_level), times, measured, P=round(P, 1),
                   **{"Gemm R^2": round(model.gemm.r2, 6), "Geam R^2": round(model.geam.r2, 6)})


def recursive_verdict(model: RecursiveModel, source: str, times, measured, max_level: int) -> Verdict:
    lo, hi = min(times) / 2, 4 * max(times)
    return verdict("recursive", lambda n, levels: model.level(n, levels), model.boundaries(max_level, lo, hi),
                   times, measured, **{"launch overhead": f"{1e3 * model.launch_ms:.1f} us per call ({source})"})


@dataclass
class Report:
    config: Config
    times: dict[int, dict[int, float]]
    measured: list[float | None]
    verdicts: list[Verdict]
    unit: str = "s"       # of ``times``: seconds, or "gemm" for times relative to the GEMM of a group
    left_out: list[int] = field(default_factory=list)   # sizes whose group is not credible (:func:`credible_sweep`)

    def summary(self) -> dict[str, Any]:
        best = best_levels(self.times)
        return {"configuration": self.config.name,
                "sizes": f"{min(self.times)} to {max(self.times)} ({len(self.times)} sizes)" if self.times else "none",
                "best level per size": " ".join(f"{n}:{lv}" for n, lv in best.items()),
                "measured boundaries": [None if b is None else round(b) for b in self.measured],
                **({"sizes left out": left_out_text(self.left_out)} if self.left_out else {}),
                **{v.name: v.summary() for v in self.verdicts}}

    def rows(self) -> list[dict[str, Any]]:
        best = best_levels(self.times)
        scale, key = (1e3, "times_ms") if self.unit == "s" else (1.0, "times_over_gemm")
        return [{"size": n, "best": best[n], **{v.name: v.levels[n] for v in self.verdicts},
                 key: {lv: scale * s for lv, s in t.items()}} for n, t in self.times.items()]


def speedup_sweep(db: ResultsDB, key: str, config: Config, regime: str = "sustained") -> dict[int, dict[int, float]]:
    """{size: {level: time}} from the ``strassen-speedup`` points of ``config``, each level's time
    relative to the GEMM of its own group (level 0 = 1): levels there are timed in separate groups."""
    times: dict[int, dict[int, float]] = {}
    for t in models.strassen_timings(db, key, config, regime=regime):
        times.setdefault(t.size, {0: 1.0})[t.level] = t.time_ms / t.gemm_ms
    return dict(sorted(times.items()))


def judge(db: ResultsDB, key: str, config: Config, sizes: Sequence[int] | None = None,
          regime: str = "sustained") -> Report:
    """Measured levels of the stored sweep in ``regime`` against the three predictors."""
    return judge_times(db, key, config, stored_sweep(db, key, config, sizes, regime), regime=regime)


def judged_range(db: ResultsDB, key: str, times: Mapping[int, Any], regime: str = "sustained"
                 ) -> tuple[float, float] | None:
    """Calibrated sizes the thesis rule fits for this sweep: up to its largest size (the range
    of interest), or all of them where that leaves fewer than five."""
    upto = (0, max(times))
    return upto if len(models.calibration_rows(db, key, upto, regime=regime)) >= 5 else None


def judge_times(db: ResultsDB, key: str, config: Config, times: dict[int, dict[int, float]],
                unit: str = "s", regime: str = "sustained") -> Report:
    """Measured best levels and boundaries of ``times`` ({size: {level: time}}) against the predictors
    made from the calibration of ``key``."""
    if not times:
        raise ValueError(f"no stored times of {config.name} for env {key}; run gemmlab levels "
                         "(or strassen) on that device, or import its results")
    times, left_out = credible_sweep(times, config)
    if not times:
        raise ValueError(f"every stored group of {config.name} for env {key} has a level faster than its operation "
                         "count allows (disturbed timings); measure again with gemmlab levels --force")
    max_level = max(max(t) for t in times.values())
    measured = measured_boundaries(times, max_level)
    fit_range = judged_range(db, key, times, regime)
    verdicts = [thesis_verdict(f"thesis rule ({w})", models.time_model(db, key, w, fit_range, regime=regime), times,
                               measured, max_level) for w in ("relative", "absolute")]
    model, source = models.stored_predictor(db, key, config, regime)
    verdicts.append(recursive_verdict(model, source, times, measured, max_level))
    return Report(config, times, measured, verdicts, unit, left_out)


def credible_sweep(times: Mapping[int, Mapping[int, float]], config: Config
                   ) -> tuple[dict[int, dict[int, float]], list[int]]:
    """``times`` without the sizes whose group has a level faster than its operation count allows
    (:func:`modeling.profile.credible`): such a group was disturbed (on a loaded CPU, a GEMM that
    waited out a time slice), and judging predictors on it would blame them for the noise. The kept
    times and the sizes left out."""
    kept = {n: dict(t) for n, t in times.items()
            if credible({lv: s / t[0] for lv, s in t.items()}, config.schedule, config.fused)}
    return kept, [n for n in times if n not in kept]


def left_out_text(sizes: Sequence[int]) -> str:
    """Why sizes were left out of a judgement, in words."""
    return (f"{', '.join(map(str, sizes))}: a level there ran faster than its operation count allows "
            "((8/7)^L over the GEMM), so the group was disturbed")
