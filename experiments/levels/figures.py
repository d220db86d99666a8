"""The level-prediction figures: the calibration curves, the thesis's SpeedUp(x) with its crossover
(Fig. 4.2), and the best level measured against the predictors (Fig. 4.5)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from gpu.strassen import Config
from modeling.crossover import crossover_point, speedup
from modeling.fits import TimeModel

from ..core.database import ResultsDB
from ..core.plotting import (
    SMALL,
    finish,
    legend_entries,
    level_axis,
    new_figure,
    panel_devices,
    panel_grid,
    panel_title,
    plot_marked,
    series_styles,
    shared_legend,
    side_legend,
    size_axis,
)
from ..core.registry import figure
from . import calibration, models
from .auto import AUTO_EXPERIMENT, AutoPoint, auto_points
from .validation import EXPERIMENT, RUM, Report, best_levels, judge

#: Stored experiments the level figures draw on (for the regime in their footer).
CALIBRATION_SOURCES = (calibration.EXPERIMENT,)
VALIDATION_SOURCES = (EXPERIMENT, AUTO_EXPERIMENT, calibration.EXPERIMENT, models.OVERHEAD_EXPERIMENT)
HOLLOW = Line2D([], [], marker="o", color="0.35", mfc="white", linestyle="none")


@figure(calibration.EXPERIMENT, "Gemm/Geam time and achieved TFLOP/s and GB/s against size")
def render_calibration(db: ResultsDB) -> Figure | None:
    curves = defaultdict(list)
    for key in db.env_keys():
        for row in calibration.table(db, key):
            curves[(key, row.dtype)].append(row)
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return None
    devices = panel_devices(db, [key for key, _ in curves], CALIBRATION_SOURCES)
    styles = series_styles(list(curves))
    body, axes = new_figure(1, 3, width=12.6, height=3.6)
    ax_t, ax_f, ax_b = axes[0]
    for (key, dtype), rows in curves.items():
        name, color = ", ".join(p for p in (devices[key], dtype) if p), styles[(key, dtype)]["color"]
        n = [r.size for r in rows]
        gemm_ok, geam_ok = [r.gemm_stable for r in rows], [r.geam_stable for r in rows]
        plot_marked(ax_t, n, [1e3 * r.gemm_s for r in rows], gemm_ok, "o-", color=color, label=name)
        plot_marked(ax_t, n, [1e3 * r.geam_s for r in rows], geam_ok, "s--", color=color)
        plot_marked(ax_f, n, [r.tflops for r in rows], gemm_ok, "o-", color=color)
        plot_marked(ax_b, n, [r.gbs for r in rows], geam_ok, "s-", color=color)
    sizes = [r.size for rows in curves.values() for r in rows]
    ax_t.set_yscale("log")
    ax_t.set(ylabel="time (ms)", title="Gemm(N) (solid) and Geam(N) (dashed)")
    ax_f.set(ylabel="TFLOP/s", title="GEMM achieved rate (2N³ / t)")
    ax_b.set(ylabel="GB/s", title="GEAM achieved bandwidth (3·N²·size / t)")
    for ax in (ax_t, ax_f, ax_b):
        size_axis(ax, sizes)
        ax.title.set_fontsize(SMALL + 2)
        ax.grid(True, alpha=0.3)
    handles, labels = legend_entries([ax_t])
    shared_legend(body, handles=[*handles, Line2D([], [], color="0.3", marker="o"),
                                 Line2D([], [], color="0.3", marker="s", ls="--"), HOLLOW],
                  labels=[*labels, "Gemm", "Geam", "hollow: no batch within 95-105% of its mean after retries"])
    return finish(body, db, devices, CALIBRATION_SOURCES, "Calibration: the library GEMM and GEAM against N")


def _calibrated(db: ResultsDB) -> list[tuple[str, TimeModel]]:
    out = []
    for key, _ in models.calibrated_envs(db):
        try:
            out.append((key, models.time_model(db, key, "relative")))
        except ValueError:
            continue
    return out


@figure("speedup-model", "SpeedUp(x) = Gemm(x) / (7 Gemm(x/2) + 15 Geam(x/2)) from the fitted curves, "
                         "crossover P marked (thesis Fig. 4.2)", experiments=(calibration.EXPERIMENT,))
def render_speedup(db: ResultsDB) -> Figure | None:
    envs = _calibrated(db)
    if not envs:
        return None
    devices = panel_devices(db, [key for key, _ in envs], VALIDATION_SOURCES)
    body, axes = panel_grid(len(envs), panel_width=5.6, panel_height=3.8)
    for ax, (key, model) in zip(axes, envs):
        lo, hi = 2 * model.size_range[0], model.size_range[1]
        xs = np.geomspace(lo, hi, 400)
        top = 1.0
        for k, (fitted, style, color) in enumerate(((model, "-", "C0"),
                                                   (models.time_model(db, key, "absolute"), ":", "C1"))):
            s = np.array([speedup(fitted, x) for x in xs])
            s[(fitted.gemm(xs / 2) <= 0) | (fitted.geam(xs / 2) <= 0) | (s <= 0)] = np.nan  # fit below zero there
            name = "relative-error" if fitted.gemm.weighting == "relative" else "ordinary"
            ax.plot(xs, s, style, color=color, label=f"SpeedUp(x), {name} least squares"
                                                    f"{'' if k == 0 else ' (the thesis fit)'}")
            top = max(top, float(np.nanmax(s[xs >= lo * 4])) if np.any(np.isfinite(s[xs >= lo * 4])) else top)
            try:
                P = crossover_point(fitted)
                ax.axvline(P, color=color, ls="--", lw=1)
                right = np.log(P / lo) > 0.6 * np.log(hi / lo)   # label on the side with room
                ax.annotate(f"P = {P:.0f} ({name} fit)", (P, 1.0), textcoords="offset points",
                            xytext=(-4 if right else 4, -14 - 14 * k),
                            ha="right" if right else "left", color=color, fontsize=8,
                            bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 1})
            except ValueError:
                pass
        measured = [t for t in models.strassen_timings(db, key, RUM) if t.level == 1]
        if measured:
            ax.plot([t.size for t in measured], [t.gemm_ms / t.time_ms for t in measured], "o", color="C2",
                    label="measured, RUM level 1")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, min(2.0, 1.15 * top))
        ax.set(xlabel="x (matrix size)", ylabel="Gemm(x) / strassen_RUM(x)", title=devices[key])
        ax.title.set_fontsize(SMALL + 2)
        ax.grid(True, which="both", alpha=0.3)
    shared_legend(body, axes)
    return finish(body, db, devices, VALIDATION_SOURCES, "Thesis rule: SpeedUp(x) from the fitted curves, "
                  "crossover P where it reaches 1")


@figure(EXPERIMENT, "Best Strassen level against N: measured, thesis rule and recursive predictor; "
                    "level boundaries predicted against measured (thesis Fig. 4.5)")
def render_levels(db: ResultsDB) -> Figure | None:
    reports = []
    for key in db.env_keys():
        configs = {m.method for m in db.measurements(EXPERIMENT, env_key=key)}
        for name in sorted(configs):
            config = _config_of(db, key, name)
            try:
                report = judge(db, key, config)
            except ValueError:
                continue
            reports.append((key, report, auto_points(db, key, config, report.times, sizes=list(report.times))))
    if not reports:
        return None
    devices = panel_devices(db, [key for key, _, _ in reports], VALIDATION_SOURCES)
    styles = series_styles([v.name for _, r, _ in reports for v in r.verdicts])
    body, axes = new_figure(len(reports), 3, width=14.0, height=3.9 * len(reports))
    for row, (key, report, auto) in zip(axes, reports):
        _plot_levels(row, report, ", ".join(p for p in (devices[key], report.config.name) if p), styles)
        _plot_auto(row, auto)
    handles, labels = legend_entries(axes[:, 0])
    shared_legend(body, handles=handles, labels=labels)
    return finish(body, db, devices, VALIDATION_SOURCES, "Level validation: the best Strassen level measured "
                  "against the thesis rule and the recursive predictor")


def _config_of(db: ResultsDB, key: str, method: str) -> Config:
    p = db.measurements(EXPERIMENT, env_key=key, method=method)[0].params
    return Config(p["schedule"], p["parallel"], p["fused"])


#: Marker sizes of the predictors, largest first: where they agree the markers nest, never hide.
_SIZES = (7, 5, 3, 2)


def _plot_levels(axes: Sequence[Any], report: Report, title: str, styles: dict[Any, dict[str, Any]]) -> None:
    """One row: best level against N, level boundaries against L, time lost against N. Levels are
    drawn at their integer values (categories): agreeing predictors nest their markers."""
    ax_l, ax_b, ax_t = axes
    sizes = list(report.times)
    best = best_levels(report.times)
    levels = sorted({lv for t in report.times.values() for lv in t})
    ax_l.plot(sizes, [best[n] for n in sizes], "o", color="black", mfc="none", ms=10, label="measured best")
    for k, v in enumerate(report.verdicts):
        style = {**styles[v.name], "ms": _SIZES[min(k, len(_SIZES) - 1)]}
        ax_l.plot(sizes, [v.levels[n] for n in sizes], linestyle="none", label=v.name, **style)
        lost = [100 * (report.times[n][v.levels[n]] / report.times[n][best[n]] - 1) for n in sizes]
        ax_t.plot(sizes, lost, "-", ms=3, color=style["color"], marker=style["marker"],
                  label=f"{v.name}: {v.time_lost_pct:.2f}%")
    level_axis(ax_l, levels, axis="y", names={0: "0 (GEMM)"})
    ax_l.set(xlabel="N", ylabel="Strassen level", title=panel_title("best level", title))
    _plot_boundaries(ax_b, report, styles)
    ax_t.set(xlabel="N", ylabel="time lost against the best level (%)", title="cost of the predicted level")
    side_legend(ax_t, title="over the sweep", title_fontsize=SMALL)
    for ax in axes:
        ax.title.set_fontsize(SMALL + 2)
        ax.grid(True, alpha=0.3)


def _plot_auto(axes: Sequence[Any], points: Sequence[AutoPoint]) -> None:
    """``matmul(level="auto")`` timed in each size's group, where stored: the level it ran (red
    crosses) and its time lost against the best measured level, from speed-ups over each group's
    DGEMM (dashed; below zero where auto beat the best level's group)."""
    if not points:
        return
    ax_l, _, ax_t = axes
    ax_l.plot([p.size for p in points], [p.level for p in points], "x", color="red", ms=8, mew=1.5,
              label="level='auto', timed")
    judged = [p for p in points if p.ratio is not None]
    if judged:
        lost = [100 * (1 / p.ratio - 1) for p in judged]
        ax_t.plot([p.size for p in judged], lost, "x--", color="red", ms=5,
                  label=f"level='auto', timed: worst {max(lost):.2f}%")
        side_legend(ax_t, title="over the sweep", title_fontsize=SMALL)


def _plot_boundaries(ax: Any, report: Report, styles: dict[Any, dict[str, Any]]) -> None:
    """Where each level L starts, measured (hollow squares) and predicted, at integer L; each
    predictor's error against the measured boundary written beside its marker."""
    levels = list(range(1, len(report.measured) + 1))
    ax.set(xlabel="Strassen level L", ylabel="N where level L starts",
           title="level boundaries: predicted against measured")
    values = [b for b in report.measured if b] + [b for v in report.verdicts for b in v.boundaries if b]
    if not values:
        ax.text(0.5, 0.5, "no level boundary in the sweep:\nno level beat the one below it", ha="center",
                va="center", transform=ax.transAxes, fontsize=SMALL + 1)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    pts = [(lv, b) for lv, b in zip(levels, report.measured) if b]
    if pts:
        ax.plot(*zip(*pts), "s", color="black", mfc="none", ms=11)
    labels: dict[int, list[tuple[float, str, Any]]] = {lv: [] for lv in levels}
    for k, v in enumerate(report.verdicts):
        style = {**styles[v.name], "ms": _SIZES[min(k, len(_SIZES) - 1)]}
        for lv, b, e in zip(levels, v.boundaries, v.errors_pct):
            if b is None:
                continue
            ax.plot([lv], [b], linestyle="none", **style)
            if e is not None:
                labels[lv].append((np.log2(b), f"{e:+.1f}%", style["color"]))
    # errors in a column right of each level, in the order of their markers, spread so none overlap
    span = np.log2(max(values)) - np.log2(min(values))
    gap = max(0.09 * span, 0.12)
    for lv, items in labels.items():
        last = -np.inf
        for y, text, color in sorted(items):
            last = max(y, last + gap)
            ax.annotate(text, (lv, 2.0**y), xytext=(lv + 0.12, 2.0**last), textcoords="data", fontsize=6,
                        color=color, va="center", ha="left")
    ax.set_yscale("log", base=2)
    level_axis(ax, levels)
