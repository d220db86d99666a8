"""The level-prediction experiments: ``calibration`` and ``level-validation``. Each writes the
device profile afterwards, so ``level="auto"`` follows the newest measurements."""

from __future__ import annotations

from ..core.registry import Context, experiment
from ..core.summary import Check, Summary, Table, spread
from . import calibration, validation
from .auto import AutoJudgement
from .profile import update_profile

#: A predictor is good enough when the levels it picks cost at most this much time over the sweep
#: against the best measured levels (the time a user loses by trusting it).
TIME_LOST_TARGET_PCT = 1.0


@experiment(calibration.EXPERIMENT, "Gemm(x) and Geam(x) medians over a size sweep")
def run_calibration(ctx: Context) -> Summary:
    rows, outcome = calibration.calibrate(ctx)
    best_gemm = max(rows, key=lambda r: r.tflops)
    best_geam = max(rows, key=lambda r: r.gbs)
    stable = sum(r.gemm_stable and r.geam_stable for r in rows)
    return Summary(
        scope=f"N = {spread([r.size for r in rows])}; {', '.join(sorted({r.dtype for r in rows}))}",
        facts={"points measured": outcome.measured, "points already stored": outcome.skipped,
               "sizes": spread([r.size for r in rows]),
               "best GEMM rate": f"{best_gemm.tflops:.3g} TFLOP/s at N = {best_gemm.size}",
               "best GEAM rate": f"{best_geam.gbs:.4g} GB/s at N = {best_geam.size}",
               "device profile": update_profile(ctx)},
        tables=[Table("calibration", ("N", "dtype", "Gemm (ms)", "Geam (ms)", "TFLOP/s", "GB/s", "stable"),
                      [(r.size, r.dtype, 1e3 * r.gemm_s, 1e3 * r.geam_s, r.tflops, r.gbs,
                        r.gemm_stable and r.geam_stable) for r in rows],
                      formats={"Gemm (ms)": ".4g", "Geam (ms)": ".4g", "TFLOP/s": ".3g", "GB/s": ".4g"})],
        checks=[Check("every point stable (a batch within 95-105% of its mean)", f"{stable} of {len(rows)} points",
                      stable == len(rows))])


@experiment(validation.EXPERIMENT, "Best Strassen level over a dense size sweep against the thesis rule and the "
                                   "recursive predictor")
def run_validation(ctx: Context) -> Summary:
    plan = validation.PLANS[(ctx.backend.name, ctx.quick)]
    counts, report, found = validation.run_plan(ctx, plan)
    return validation_summary(counts, report, update_profile(ctx), found)


def _listed(values: list) -> str:
    return ", ".join("n/a" if v is None else f"{v:.0f}" if isinstance(v, float) else str(v) for v in values) \
        or "none"


def predictor_check(v: validation.Verdict, sizes: int, crossed: bool) -> Check:
    """One predictor against :data:`TIME_LOST_TARGET_PCT`. A sweep that crosses no level boundary (no level
    overtakes the one below it for good) cannot show that a predictor places the boundaries: there a
    predictor that lost no more than the target is not judged (one that lost more still fails)."""
    target = f"{v.name}: time lost over the sweep <= {TIME_LOST_TARGET_PCT:g}%"
    measured = f"{v.time_lost_pct:.2f}% ({v.mispredicted} of {sizes} sizes mispredicted)"
    met = v.time_lost_pct <= TIME_LOST_TARGET_PCT
    if not crossed and met:
        return Check(target, f"{measured}; not judged: the sweep crosses no level boundary (no level overtakes "
                             "the one below it for good within the swept sizes), so there is none to place", None)
    return Check(target, measured, met)


def validation_summary(counts: dict, report: validation.Report, profile: str,
                       found: AutoJudgement | None = None) -> Summary:
    """The sweep's best levels and each predictor's boundaries, errors and time lost, judged against
    :data:`TIME_LOST_TARGET_PCT` (not judged where the sweep crosses no level boundary: :func:`predictor_check`);
    where ``matmul(level="auto")`` was timed in the sweep's groups (``found`` has points), its table and the
    two checks on it."""
    sizes = list(report.times)
    levels = sorted({lv for t in report.times.values() for lv in t})
    best = validation.best_levels(report.times)
    crossed = any(b is not None for b in report.measured)
    rows, checks = [], []
    for v in report.verdicts:
        errors = ", ".join("n/a" if e is None else f"{e:+.1f}" for e in v.errors_pct) or "none"
        worst = f"{v.worst_loss_pct:.2f}% at N = {v.worst_size}" if v.worst_size else None
        rows.append((v.name, _listed(v.boundaries), errors, v.time_lost_pct, worst, v.mispredicted,
                           v.detail.get("note") or v.detail.get("launch overhead")))
        checks.append(predictor_check(v, len(sizes), crossed))
    table = Table("predictors", ("predictor", "boundaries (N)", "boundary error %", "time lost over the sweep %",
                                 "worst size", "sizes mispredicted", "note"), rows,
                  formats={"time lost over the sweep %": ".3f"})
    return Summary(
        scope=f"{report.config.name} at N = {spread(sizes)}; levels {spread(levels, 'levels')}",
        facts={"points measured": counts["points measured"], "points already stored": counts["points already stored"],
               "configuration": report.config.name, "sizes": spread(sizes),
               "best level per size": " ".join(f"{n}:{lv}" for n, lv in best.items()),
               "measured boundaries": _listed(report.measured),
               **({"sizes left out": validation.left_out_text(report.left_out)} if report.left_out else {}),
               "device profile": profile},
        tables=[table, *([found.table()] if found and found.points else [])],
        checks=checks + (found.checks() if found else []))
