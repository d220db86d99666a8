"""The level-prediction figures: the calibration curves, the thesis's SpeedUp(x) with its crossover
(Fig. 4.2), and the best level measured against the predictors (Fig. 4.5)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpu.strassen import Config
from modeling.crossover import crossover_point, speedup
from modeling.fits import TimeModel

from ..core.database import ResultsDB
from ..core.plotting import device_label, new_figure, plot_marked, save_figure
from ..core.registry import figure
from . import calibration, models
from .validation import EXPERIMENT, RUM, Report, best_levels, judge


@figure(calibration.EXPERIMENT, "Gemm/Geam time and achieved TFLOP/s and GB/s against size")
def render_calibration(db: ResultsDB, out_dir: Path) -> list[Path]:
    curves = defaultdict(list)
    for key in db.env_keys():
        for row in calibration.table(db, key):
            curves[(device_label(db, key), row.dtype)].append(row)
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return []
    fig, (ax_t, ax_f, ax_b) = new_figure(1, 3, width=15, height=4.2)
    for (label, dtype), rows in sorted(curves.items()):
        name, n = f"{label} {dtype}", [r.size for r in rows]
        gemm_ok, geam_ok = [r.gemm_stable for r in rows], [r.geam_stable for r in rows]
        color = plot_marked(ax_t, n, [1e3 * r.gemm_s for r in rows], gemm_ok, "o-",
                            label=f"Gemm, {name}").get_color()
        plot_marked(ax_t, n, [1e3 * r.geam_s for r in rows], geam_ok, "s--", color=color, label=f"Geam, {name}")
        plot_marked(ax_f, n, [r.tflops for r in rows], gemm_ok, "o-", color=color, label=name)
        plot_marked(ax_b, n, [r.gbs for r in rows], geam_ok, "s-", color=color, label=name)
    ax_t.set(xscale="log", yscale="log")
    for ax in (ax_f, ax_b):
        ax.set_xscale("log")
    fig.suptitle("hollow markers: no batch within 95-105% of its mean after retries", fontsize=8)
    ax_t.set(xlabel="N", ylabel="time (ms)", title="Gemm(N) and Geam(N)")
    ax_f.set(xlabel="N", ylabel="TFLOP/s", title="GEMM achieved rate (2N³ / t)")
    ax_b.set(xlabel="N", ylabel="GB/s", title="GEAM achieved bandwidth (3·N²·size / t)")
    for ax in (ax_t, ax_f, ax_b):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "calibration")


def _calibrated(db: ResultsDB) -> list[tuple[str, TimeModel]]:
    out = []
    for key, _ in models.calibrated_envs(db):
        try:
            out.append((key, models.time_model(db, key, "relative")))
        except ValueError:
            continue
    return out


@figure("speedup-model", "SpeedUp(x) = Gemm(x) / (7 Gemm(x/2) + 15 Geam(x/2)) from the fitted curves, "
                         "crossover P marked (thesis Fig. 4.2)")
def render_speedup(db: ResultsDB, out_dir: Path) -> list[Path]:
    envs = _calibrated(db)
    if not envs:
        return []
    fig, axes = new_figure(1, len(envs), width=5.5 * len(envs), height=4.2)
    for ax, (key, model) in zip(np.atleast_1d(axes), envs):
        lo, hi = 2 * model.size_range[0], model.size_range[1]
        xs = np.geomspace(lo, hi, 400)
        top = 1.0
        for fitted, style in ((model, "-"), (models.time_model(db, key, "absolute"), ":")):
            s = np.array([speedup(fitted, x) for x in xs])
            s[(fitted.gemm(xs / 2) <= 0) | (fitted.geam(xs / 2) <= 0) | (s <= 0)] = np.nan  # fit below zero there
            name = "relative-error" if fitted.gemm.weighting == "relative" else "ordinary (thesis)"
            line, = ax.plot(xs, s, style, label=f"SpeedUp(x), {name} least squares")
            top = max(top, float(np.nanmax(s[xs >= lo * 4])) if np.any(np.isfinite(s[xs >= lo * 4])) else top)
            try:
                P = crossover_point(fitted)
                ax.axvline(P, color=line.get_color(), ls="--", lw=1)
                ax.annotate(f"P = {P:.0f}", (P, 1.0), textcoords="offset points", xytext=(4, -14),
                            color=line.get_color(), fontsize=8)
            except ValueError:
                pass
        measured = [t for t in models.strassen_timings(db, key, RUM) if t.level == 1]
        if measured:
            ax.plot([t.size for t in measured], [t.gemm_ms / t.time_ms for t in measured], "o",
                    label="measured, RUM level 1")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, min(2.0, 1.15 * top))
        ax.set(xlabel="x (matrix size)", ylabel="Gemm(x) / strassen_RUM(x)", title=device_label(db, key))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "speedup-model")


@figure(EXPERIMENT, "Best Strassen level against N: measured, thesis rule and recursive predictor; "
                    "level boundaries predicted against measured (thesis Fig. 4.5)")
def render_levels(db: ResultsDB, out_dir: Path) -> list[Path]:
    reports = []
    for key in db.env_keys():
        configs = {m.method for m in db.measurements(EXPERIMENT, env_key=key)}
        for name in sorted(configs):
            config = _config_of(db, key, name)
            try:
                reports.append((key, judge(db, key, config)))
            except ValueError:
                continue
    if not reports:
        return []
    fig, axes = new_figure(len(reports), 3, width=16, height=4.3 * len(reports))
    for row, (key, report) in zip(np.array(axes, dtype=object).reshape(len(reports), 3), reports):
        _plot_levels(row, report, f"{device_label(db, key)}, {report.config.name}")
    return save_figure(fig, out_dir, EXPERIMENT)


def _config_of(db: ResultsDB, key: str, method: str) -> Config:
    p = db.measurements(EXPERIMENT, env_key=key, method=method)[0].params
    return Config(p["schedule"], p["parallel"], p["fused"])


def _plot_levels(axes: Sequence[Any], report: Report, title: str) -> None:
    ax_l, ax_b, ax_t = axes
    sizes = list(report.times)
    best = best_levels(report.times)
    ax_l.plot(sizes, [best[n] for n in sizes], "ko", label="measured best")
    for k, v in enumerate(report.verdicts):
        ax_l.step(sizes, [v.levels[n] + 0.06 * (k + 1) for n in sizes], where="mid", label=v.name)
        lost = [100 * (report.times[n][v.levels[n]] / report.times[n][best[n]] - 1) for n in sizes]
        ax_t.plot(sizes, lost, "o-", ms=3, label=f"{v.name}: {v.time_lost_pct:.2f}% over the sweep")
    ax_l.set(xlabel="N", ylabel="level", title=f"best level, {title}")
    ax_l.title.set_fontsize(8)
    levels = range(1, len(report.measured) + 1)
    ax_b.plot(levels, report.measured, "ks", ms=8, label="measured")
    for k, v in enumerate(report.verdicts):
        ax_b.plot([lv + 0.08 * (k + 1) for lv in levels], v.boundaries, "o", label=v.name)
        for lv, b, e in zip(levels, v.boundaries, v.errors_pct):
            if b is not None and e is not None:
                ax_b.annotate(f"{e:+.1f}%", (lv + 0.08 * (k + 1), b), fontsize=6, xytext=(3, 0),
                              textcoords="offset points")
    ax_b.set_yscale("log", base=2)
    ax_b.set(xlabel="level L", ylabel="N where level L starts", title="level boundaries: predicted against measured")
    ax_t.set(xlabel="N", ylabel="time lost against the best level (%)", title="cost of the predicted level")
    ax_b.xaxis.get_major_locator().set_params(integer=True)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
