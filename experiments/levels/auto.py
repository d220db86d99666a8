"""``level="auto"`` timed as itself in the level sweep, and judged against its targets (:data:`FLOOR`).

``gemmlab levels --auto`` times, at each size of the sweep, a call of
``gpu.strassen.matmul(A, B, level="auto", ...)`` with the sweep's configuration in
a group of its own (:func:`time_auto`): DGEMM, ``auto``, and the executor at the
level auto chose, interleaved under the sweep's protocol, inputs re-drawn before
every sample. Where auto chose level 0 the executor is DGEMM itself under another
name: the group then carries its own control, the ratio of DGEMM to itself, which
says how finely the protocol resolves a ratio at that size (the judgement reports
its range beside the floor). The call is the one a user makes, host work included (the profile
lookup, the checks, the executor), with the sweep's semantics where they differ
from the defaults: the inputs may be overwritten and ``out=C`` is given, as every
level of the sweep is timed, and ``check_finite=False`` (a scan of A and B that
the levels do not make). A sample issues its calls back to back for about
:data:`PIPELINE_S` of device time, as a loop of products runs (one call from 20 ms
of DGEMM up), rotating over operand sets that outsize the L2 cache: the host's
dispatch then counts where it outlasts the device's work, and the host time of one
call of each (``auto_host_s``, ``gemm_host_s``) is stored beside it. So a loss is
told apart as a wrong level, as work the call adds, or as dispatch. The group takes
at least :data:`REPEATS` samples per method, and more where its rounds are short
(:func:`repeats_for`).

The rows are their own experiment (:data:`AUTO_EXPERIMENT`, method: the
configuration), not level rows: what ``level="auto"`` chose is a result, and the
readers of the level sweep keep reading integer levels. Each row keeps the level
chosen, whether a device profile (which file, written from which environment, for
which regime) or the fixed rule chose it, and its speed-up over the DGEMM of its
own group. A size whose levels are stored and whose ``auto`` row is not times
DGEMM, ``auto`` and the executor's level only, so a stored sweep is not measured
again.

The judgement (:func:`judge_auto`) takes, per size, auto's speed-up over its
group's DGEMM and the best measured level's speed-up over its own group's DGEMM
(speed-ups, not times, so that drift between the two groups cancels), and checks
the target: never below :data:`FLOOR` x DGEMM at any swept size, and within
:data:`WITHIN` of the best measured configuration at :data:`SHARE` of the sizes.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from gpu.backend import Backend
from gpu.profile import (
    BUNDLED_DIR,
    ProfileError,
    current_profile,
    device_name,
    profile_path,
    profile_stamp,
    regime_levels,
    transfer_levels,
)
from gpu.strassen import Config, matmul, resolve_auto_level
from gpu.strassen.auto import profile_key

from ..core.ascalled import host_seconds
from ..core.database import ResultsDB
from ..core.lab import Operands, check_product, time_group
from ..core.regime import of_regime
from ..core.registry import Context
from ..core.summary import Check, Table
from ..core.timing import Comparison, call_seconds
from ..strassen.bench import DTYPE, point_params, strassen_work

AUTO_EXPERIMENT = "level-auto"
#: The key of ``level="auto"``'s judgement in a sweep's summary.
AUTO_KEY = "level='auto'"
#: Names of the two works ``--auto`` adds to a size's group.
AUTO, EXECUTOR = "auto", "auto-executor"
#: The targets of ``level="auto"``: never below 0.99x DGEMM, and within 2% of the best measured configuration
#: at 90% of sizes.
FLOOR, WITHIN, SHARE = 0.99, 0.02, 0.90
#: A sample of the ``auto`` group issues calls back to back for about this much device time (a loop of
#: products), so the host's dispatch counts only where it outlasts the device's work; at most MAX_CALLS
#: calls, over at most MAX_SETS operand sets. 64 calls made a sample of 2.7 ms at N = 1024 on the H100, where
#: the first call's host time (28 us for auto, 19 for DGEMM) and the host's hiccups weighed on one group.
PIPELINE_S, MAX_CALLS, MAX_SETS = 20e-3, 512, 8
#: Samples per method in the ``auto`` group: at least REPEATS, and as many rounds as last GROUP_S where that is
#: more, up to MAX_REPEATS. Per-sample spread under the power cap is 1-2% on the H100, so the ratio of two
#: 10-sample medians moves by about 0.9% (one sigma): at level 0, where ``auto`` is the DGEMM it is compared
#: with, a 10-sample sweep read 0.989x at two sizes of 13, and a 30-sample one (about 0.5%) at one of 13. The
#: FLOOR sits 1% below parity: 120 samples (about 0.26%) put it near four sigma, and cost seconds where a
#: round is short (N <= 12288), as the 13 level-0 sizes of the sweep are.
REPEATS, MAX_REPEATS, GROUP_S = 30, 120, 8.0
#: Confidence of the interval reported beside auto's speed-up (a percentile bootstrap of the ratio of medians).
CONFIDENCE = 0.90


def auto_params(n: int, config: Config, regime: str = "sustained") -> dict[str, Any]:
    """The stored parameters of the ``auto`` point at size n: the sweep's, without a level."""
    params = point_params(n, 0, config, DTYPE, regime)
    del params["level"]
    return params


def auto_call(config: Config, regime: str) -> str:
    """The call timed, as text for the stored record."""
    return (f"matmul(A, B, level='auto', schedule={config.schedule!r}, parallel={config.parallel}, "
            f"fused={config.fused}, overwrite_a=True, overwrite_b=True, out=C, check_finite=False, "
            f"graph={config.graph}, regime={regime!r})")


def auto_choice(backend: Backend, n: int, config: Config, regime: str) -> dict[str, Any]:
    """The level ``matmul(level="auto")`` runs at n x n x n, as matmul resolves it, and what chose it:
    the device profile's table of the configuration (``"profile"``: which file, environment, regime)
    or the fixed rule (``"fixed rule"``, no profile or none for this configuration)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        level = resolve_auto_level(n, n, n, backend, schedule=config.schedule, fused=config.fused, regime=regime)
    try:
        profile, problem = current_profile(backend), None
    except ProfileError as exc:
        profile, problem = None, str(exc)
    tables, stand_in = regime_levels(profile, regime)
    regimes = (profile or {}).get("regimes") or {}
    used = regime if regime in regimes else next(iter(regimes), regime)
    section = regimes.get(used) or profile or {}
    table = tables.get(profile_key(config.schedule, config.fused))
    transferred = None if table else transfer_levels(backend)[1]
    return {"level": int(level),
            "chosen_by": "profile" if table else f"transfer model ({transferred})" if transferred else "fixed rule",
            "profile": str(profile_path(backend.name, device_name(backend), None if profile_stamp(backend)[1] else
                                        BUNDLED_DIR)) if profile else None,
            "profile_env_key": section.get("env_key"), "profile_written_at": section.get("written_at"),
            "profile_regime": used if table else None, "profile_table": table,
            "notes": [str(w.message) for w in caught] + [m for m in (problem, stand_in) if m]}


def auto_work(ops: Operands, config: Config, regime: str) -> Callable[[], Any]:
    """``matmul(level="auto")`` on the group's operands, as :func:`auto_call` writes it."""
    be = ops.backend

    def work() -> None:
        matmul(ops.A, ops.B, level="auto", schedule=config.schedule, parallel=config.parallel, fused=config.fused,
               overwrite_a=True, overwrite_b=True, out=ops.C, backend=be, check_finite=False, graph=config.graph,
               regime=regime)

    return work


def group_works(ops: Operands, config: Config, level: int, regime: str) -> dict[str, Callable[[], Any]]:
    """The auto group's works on ``ops``: DGEMM, ``auto``, and the executor at auto's level (at level 0: DGEMM
    under another name, the group's control)."""
    return {"gemm": lambda: ops.backend.gemm(ops.A, ops.B, ops.C), AUTO: auto_work(ops, config, regime),
            EXECUTOR: strassen_work(config, level, ops)}


def calls_for(call_s: float) -> int:
    """Calls one sample issues back to back where one DGEMM takes ``call_s``: enough for :data:`PIPELINE_S`,
    at most :data:`MAX_CALLS`."""
    return min(MAX_CALLS, max(1, math.ceil(PIPELINE_S / max(call_s, 1e-9))))


def repeats_for(call_s: float, methods: int) -> int:
    """Samples per method of a group of ``methods`` where one DGEMM takes ``call_s``: as many rounds as last
    :data:`GROUP_S` (a round: each method's sample of :func:`calls_for` calls, priced as DGEMM's), at least
    :data:`REPEATS`, at most :data:`MAX_REPEATS`."""
    round_s = methods * calls_for(call_s) * max(call_s, 1e-9)
    return min(MAX_REPEATS, max(REPEATS, math.ceil(GROUP_S / round_s)))


def operand_sets(ops: Operands, calls: int) -> list[Operands]:
    """``ops`` and, where a sample makes several calls, enough more sets (at most :data:`MAX_SETS`) that the
    calls rotate over twice the last-level cache: each call then reads operands the previous one did not."""
    if calls == 1:
        return [ops]
    need = math.ceil(2 * ops.backend.cache_bytes() / max(1, 3 * ops.A.nbytes))
    return [ops] + [Operands.uniform(ops.backend, ops.size, seed=7 + i) for i in range(1, min(need, MAX_SETS, calls))]


def time_auto(ops: Operands, config: Config, level: int, regime: str, protocol: Mapping[str, int]
              ) -> tuple[Comparison, dict[str, float], dict[str, Any]]:
    """DGEMM, ``auto`` and the executor at auto's level, timed in a group of their own whose samples issue
    their calls back to back (:func:`calls_for`, over :func:`operand_sets`), :func:`repeats_for` samples each,
    as a loop of products runs; the comparison, the products' errors, and what the stored row adds:
    the calls per sample, the operand sets, and the host time of one ``auto`` and one DGEMM call."""
    be = ops.backend
    works = group_works(ops, config, level, regime)
    errors = {name: check_product(ops, works[name], f"{what} on N = {ops.size}")
              for name, what in ((AUTO, "matmul(level='auto')"), (EXECUTOR, f"{config.name} at level {level}"))}
    host = {"auto_host_s": host_seconds(be, works[AUTO]), "gemm_host_s": host_seconds(be, works["gemm"])}
    gemm_s = call_seconds(be, works["gemm"])
    calls = calls_for(gemm_s)
    per_set = [works] + [group_works(o, config, level, regime) for o in operand_sets(ops, calls)[1:]]
    rotation = {name: [w[name] for w in per_set] for name in works}
    result = time_group(ops, rotation, "gemm", regime=regime, calls=calls, repeats=repeats_for(gemm_s, len(works)),
                        **protocol)
    return result, errors, {**host, "calls_per_sample": calls, "operand_sets": len(per_set)}


def store_auto(ctx: Context, config: Config, n: int, result: Comparison, errors: Mapping[str, float],
               extra: Mapping[str, Any], choice: Mapping[str, Any]) -> None:
    """Store the ``auto`` row of size n: its timing, speed-up over the group's DGEMM, the level chosen
    and what chose it, the executor's time at that level in the same group, and ``extra``
    (:func:`time_auto`'s calls per sample and host times)."""
    timing, gemm = result.timings[AUTO], result.timings["gemm"]
    executor = result.timings[EXECUTOR]
    ctx.db.add(ctx.run_id, AUTO_EXPERIMENT, config.name, auto_params(n, config, ctx.regime), value=timing.median,
               unit="s", samples=timing.samples,
               meta={**timing.meta(), **choice, **extra, "speedup": result.ratio(AUTO), "gemm_s": gemm.median,
                     "gemm_samples": gemm.samples, "gemm_stable": gemm.stable, "executor_s": executor.median,
                     "executor_samples": executor.samples,
                     "executor_speedup": gemm.median / executor.median, "check_error": errors[AUTO],
                     "group": list(result.timings), "call": auto_call(config, ctx.regime),
                     "inputs": "re-drawn before every sample", "allocation_policy": "pooled"})


# --------------------------------------------------------------------------- judging

@dataclass(frozen=True)
class AutoPoint:
    """``level="auto"`` at one size against the best measured level there."""

    size: int
    level: int
    chosen_by: str
    speedup: float                   # over the DGEMM of its own group
    executor_speedup: float          # auto's level through the executor, same group
    host_s: float | None             # host time of one auto call (None: not recorded)
    gemm_host_s: float | None        # host time of one DGEMM call
    calls: int                       # calls per sample
    sm_clock_mhz: float | None
    best_level: int | None           # best of the stored level sweep at this size (None: no sweep there)
    best_speedup: float | None       # over the DGEMM of the sweep's group
    interval: tuple[float, float] | None = None   # of ``speedup`` (CONFIDENCE), where the samples are stored
    control: float | None = None     # at level 0, where the executor was timed: DGEMM over itself

    @property
    def ratio(self) -> float | None:
        """Auto's speed-up over the best measured level's (1: as fast)."""
        return None if self.best_speedup is None else self.speedup / self.best_speedup

    @property
    def within(self) -> bool | None:
        return None if self.ratio is None else self.ratio >= 1 - WITHIN


def speedup_interval(gemm: Sequence[float], timed: Sequence[float],
                     confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The ``confidence`` interval of median(gemm) / median(timed), by a percentile bootstrap of both sample
    sets (seeded: the same rows give the same interval); None with fewer than two samples of either. It
    tells a miss of the floor by noise from a real one: the ratio of two 10-sample medians moves by
    about 0.9% on the H100 under its power cap."""
    if min(len(gemm), len(timed)) < 2:
        return None
    res = stats.bootstrap((np.asarray(gemm), np.asarray(timed)),
                          lambda g, t, axis: np.median(g, axis=axis) / np.median(t, axis=axis),
                          confidence_level=confidence, method="percentile", n_resamples=4000, random_state=1)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def chosen_by(meta: Mapping[str, Any]) -> str:
    """What chose an ``auto`` row's level, in words: the fixed rule, or the profile of which env and regime."""
    if meta.get("chosen_by") != "profile":
        return str(meta.get("chosen_by", "unrecorded"))
    return f"profile of env {meta.get('profile_env_key') or '?'} ({meta.get('profile_regime') or '?'})"


def control(meta: Mapping[str, Any]) -> float | None:
    """An ``auto`` row's control: DGEMM's speed-up over itself (the executor at level 0, timed in the group
    under another name), which says how finely the group resolves a ratio; None above level 0 or where the
    row's group had no executor (rows from before the control)."""
    return float(meta["executor_speedup"]) if meta.get("level") == 0 and EXECUTOR in meta.get("group", ()) else None


def auto_points(db: ResultsDB, key: str, config: Config, times: Mapping[int, Mapping[int, float]],
                regime: str = "sustained", sizes: Sequence[int] | None = None) -> list[AutoPoint]:
    """The stored ``auto`` rows of ``config`` in ``regime`` (at ``sizes``, if given), each against the
    best level of ``times`` ({size: {level: seconds}}, level 0 = DGEMM, one group per size)."""
    out = []
    for m in of_regime(db.measurements(AUTO_EXPERIMENT, env_key=key, method=config.name), regime):
        n, meta = int(m.params["size"]), m.meta
        if m.params.get("dtype") != DTYPE or (sizes is not None and n not in sizes):
            continue
        t = times.get(n)
        best = min(t, key=t.__getitem__) if t and 0 in t else None
        out.append(AutoPoint(n, int(meta["level"]), chosen_by(meta), float(meta["speedup"]),
                             float(meta.get("executor_speedup", meta["speedup"])),
                             meta.get("auto_host_s"), meta.get("gemm_host_s"), int(meta.get("calls_per_sample", 1)),
                             meta.get("sm_clock_mhz"),
                             best, None if best is None else t[0] / t[best],
                             speedup_interval(meta.get("gemm_samples") or [], m.samples), control(meta)))
    return sorted(out, key=lambda p: p.size)


@dataclass(frozen=True)
class AutoJudgement:
    """The two checks of ``level="auto"``'s targets (:data:`FLOOR`, :data:`WITHIN`, :data:`SHARE`) on a set of
    :class:`AutoPoint`."""

    points: list[AutoPoint]

    def floor_check(self) -> Check:
        low = min(self.points, key=lambda p: p.speedup)
        below = sum(p.speedup < FLOOR for p in self.points)
        band = "" if low.interval is None else f", {100 * CONFIDENCE:g}% interval {_band(low.interval)}"
        controls = [p.control for p in self.points if p.control is not None]
        aa = (f"; DGEMM over itself at the {len(controls)} level-0 sizes: {_band((min(controls), max(controls)))}"
              if controls else "")
        return Check(f"level='auto' never below {FLOOR:g}x DGEMM at any swept size (same group)",
                     f"lowest {low.speedup:.3f}x at N = {low.size} (level {low.level}{band}); {below} of "
                     f"{len(self.points)} sizes below{aa}", below == 0)

    def within_check(self) -> Check:
        judged = [p for p in self.points if p.ratio is not None]
        if not judged:
            return Check(f"level='auto' within {100 * WITHIN:g}% of the best measured configuration at "
                         f">= {100 * SHARE:g}% of sizes", "no size with a stored level sweep", None)
        hits = sum(bool(p.within) for p in judged)
        worst = min(judged, key=lambda p: p.ratio)
        return Check(f"level='auto' within {100 * WITHIN:g}% of the best measured configuration at "
                     f">= {100 * SHARE:g}% of sizes",
                     f"{hits} of {len(judged)} sizes ({100 * hits / len(judged):.0f}%); worst {worst.ratio:.3f} of "
                     f"the best at N = {worst.size} (auto level {worst.level}, best {worst.best_level})",
                     100 * hits >= round(100 * SHARE) * len(judged))

    def checks(self) -> list[Check]:
        return [self.floor_check(), self.within_check()] if self.points else []

    def table(self) -> Table:
        """Per size: auto's level and its source, its speed-up over DGEMM (same group) with its interval, the best
        measured level and its speed-up, their ratio, the executor at auto's level, the host time of one
        auto and one DGEMM call, and the calls per sample."""
        columns = ("N", "auto level", "chosen by", "auto over DGEMM", f"{100 * CONFIDENCE:g}% interval", "best level",
                   "best over DGEMM",
                   "auto / best", f">= {FLOOR:g}x DGEMM", f"within {100 * WITHIN:g}%", "executor over DGEMM",
                   "auto host (us)", "DGEMM host (us)", "calls per sample", "SM clock (MHz)")
        us = [(None if p.host_s is None else 1e6 * p.host_s, None if p.gemm_host_s is None else 1e6 * p.gemm_host_s)
              for p in self.points]
        rows = [(p.size, p.level, p.chosen_by, p.speedup, p.interval and _band(p.interval), p.best_level,
                 p.best_speedup, p.ratio, p.speedup >= FLOOR,
                 p.within, p.executor_speedup, *host, p.calls, p.sm_clock_mhz) for p, host in zip(self.points, us)]
        fmt = ".3f"
        return Table("level='auto' timed in a group of its own at each size", columns, rows,
                     formats={"auto over DGEMM": fmt, "best over DGEMM": fmt, "auto / best": fmt,
                              "executor over DGEMM": fmt, "auto host (us)": ".0f", "DGEMM host (us)": ".0f",
                              "SM clock (MHz)": ".0f"})

    def summary(self) -> dict[str, Any]:
        """The checks and points as plain data (``gemmlab levels --json``)."""
        return {"sizes": len(self.points), "checks": [c.as_dict() for c in self.checks()],
                "points": self.table().records()}


def _band(interval: tuple[float, float]) -> str:
    return f"{interval[0]:.3f}-{interval[1]:.3f}"


def with_judgement(summary: Mapping[str, Any], found: AutoJudgement) -> dict[str, Any]:
    """A sweep's judgement as plain data (``summary``) with ``level="auto"``'s under :data:`AUTO_KEY`, where
    it was timed."""
    return {**summary, **({AUTO_KEY: found.summary()} if found.points else {})}


def judge_auto(db: ResultsDB, key: str, config: Config, times: Mapping[int, Mapping[int, float]],
               regime: str = "sustained", sizes: Sequence[int] | None = None) -> AutoJudgement:
    """:class:`AutoJudgement` of the stored ``auto`` rows against the level sweep ``times``."""
    return AutoJudgement(auto_points(db, key, config, times, regime, sizes))
