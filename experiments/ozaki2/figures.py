"""Scheme II's figures, drawn from stored rows only: max relative error against the speed-up over DGEMM
per product and phi (``ozaki2-pareto``), and seconds per phase with the INT8 GEMM rate (``ozaki2-breakdown``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from accuracy.methods import ozaki2_level

from ..audit.bench import Shape
from ..core.database import ResultsDB
from ..core.labels import place_point_labels
from ..core.plotting import (
    SMALL,
    finish,
    legend_entries,
    log_axis,
    panel_devices,
    panel_grid,
    panel_title,
    series_styles,
    shared_legend,
)
from ..core.registry import figure
from ..ozaki.figures import HOLLOW, front_labels, skipped_phis, timed_phi
from ..ozaki.figures import _finish_panel as finish_panel
from .bench import BREAKDOWN, FAMILIES, PARETO, SEED, TIME, family, product_order, shape_text, sort_key
from .breakdown import PHASES, breakdown_rows, rate_text
from .errors import ErrorRow, error_rows
from .timing import TimeRow, time_rows

#: Where a max relative error of 0 (the correctly rounded product) is drawn: below every nonzero error
#: (a product that is not correctly rounded is off by an ulp somewhere, at least 2**-53 relative).
EXACT = 2.0**-54
#: Families whose points are joined in order of their count (slices, moduli).
JOINED = ("scheme I", "scheme II accurate", "scheme II fast")
DGEMM_LINE = Line2D([], [], color="black", lw=0.8, ls=":")
#: Scheme II's Winograd levels over the residues: a series of their own per family, in its colour, drawn with
#: these markers and lines (level 0 takes the family's own).
LEVEL_STYLES = {1: {"marker": "s", "linestyle": "--"}, 2: {"marker": "D", "linestyle": "-."}}


def series(name: str) -> tuple[str, int]:
    """The series of a method: its family and its Winograd level (0 but for ``ozaki2-...-w<level>``)."""
    return family(name)[0], ozaki2_level(name)


def series_label(key: tuple[str, int]) -> str:
    """``scheme II fast``, ``scheme II fast, level 1``."""
    fam, level = key
    return f"{fam}, level {level}" if level else fam


def _series_styles(keys: set[tuple[str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Each series' colour (its family's), marker and line (none for families not :data:`JOINED`), in the order the
    legend lists them: by family, then level."""
    base = series_styles(FAMILIES)
    out = {}
    for fam, level in sorted(keys, key=lambda key: (FAMILIES.index(key[0]), key[1])):
        style = {**base[fam], "linestyle": "-" if fam in JOINED else "none"}
        out[(fam, level)] = {**style, **LEVEL_STYLES.get(level, {})} if level else style
    return out


def _regime_title(shape: Shape, regime: str, regimes: set[str], *more: str) -> str:
    """``N = 8192`` (and the regime where the environment has several), then ``more``."""
    return ", ".join([shape_text(shape), *more, *([regime] if len(regimes) > 1 else [])])


def _latest_errors(errors: list[ErrorRow]) -> dict[tuple[Shape, float, str], float]:
    """Per (product, phi, method): the max relative error over the most rows stored (seed SEED)."""
    best: dict[tuple[Shape, float, str], ErrorRow] = {}
    for r in errors:
        key = (r.shape, r.phi, r.method)
        if r.seed == SEED and r.max_rel is not None and (key not in best or r.rows > best[key].rows):
            best[key] = r
    return {key: r.max_rel for key, r in best.items()}


def pareto_panels(db: ResultsDB) -> tuple[list[tuple[Any, ...]], dict[Any, set[float]]]:
    """(env, title, times by method, errors by method) per environment, regime and product, on the phi of the
    timing inputs (:func:`~experiments.ozaki.figures.timed_phi`); and the phis stored per panel."""
    panels, phis = [], {}
    for key in db.env_keys():
        times, errors = time_rows(db, key), _latest_errors(error_rows(db, key))
        regimes = {t.regime for t in times}
        for regime in sorted(regimes):
            for shape in sorted({t.shape for t in times if t.regime == regime}, key=product_order):
                timed = {t.method: t for t in times if t.shape == shape and t.regime == regime}
                stored = {p for s, p, m in errors if s == shape and m in timed}
                if not stored:
                    continue
                phi = timed_phi(stored)
                phis[(key, regime, shape, phi)] = stored
                errs = {m: e for (s, p, m), e in errors.items() if s == shape and p == phi and m in timed}
                panels.append((key, _regime_title(shape, regime, regimes, f"phi = {phi:g}"), timed, errs))
    return panels, phis


def _draw_series(ax: Any, label: str, points: list[tuple[str, TimeRow, float]], style: dict[str, Any]) -> None:
    """One series' points (speed-up, error), joined by count where its style has a line, hollow where timed by one
    run or unstable."""
    points = sorted(points, key=lambda p: sort_key(p[0]))
    xs = [t.speedup_vs_dgemm for _, t, _ in points]
    ys = [max(e, EXACT) for _, _, e in points]
    ax.plot(xs, ys, lw=0.8, ms=4, label=label, **style)
    shaky = [(x, y) for x, y, (_, t, _) in zip(xs, ys, points) if t.protocol == "single run" or not t.stable]
    if shaky:
        ax.plot(*zip(*shaky), ms=4, mfc="white", zorder=3, **{**style, "linestyle": "none"})


def _short(name: str) -> str:
    """A point label: ``fast-15``, ``fast-15 w1`` (a Winograd level), ``accurate-20``, ``int8-9``, ``emul-55``."""
    fam, param = family(name)
    return {"scheme II accurate": f"accurate-{param}", "scheme II fast": f"fast-{param}",
            "cuBLAS emulation": f"emul-{param}"}.get(fam, param or fam)


@figure(PARETO, "Max relative error against speed-up over DGEMM per product, on the timing inputs' phi: DGEMM, "
                "SGEMM, scheme I, scheme II (accurate, fast; by modulus count, a series per Winograd level) and "
                "cuBLAS's emulation")
def render_pareto(db: ResultsDB) -> Figure | None:
    """One panel per environment, regime and product; None when nothing is stored."""
    panels, phis = pareto_panels(db)
    if not panels:
        return None
    devices = panel_devices(db, [p[0] for p in panels], [TIME])
    styles = _series_styles({series(name) for *_, errs in panels for name in errs})
    body, axes = panel_grid(len(panels), panel_width=4.4, panel_height=3.6, max_cols=2)
    for ax, (key, title, timed, errs) in zip(axes, panels):
        by_series: dict[tuple[str, int], list[tuple[str, TimeRow, float]]] = defaultdict(list)
        for name, err in errs.items():
            by_series[series(name)].append((name, timed[name], err))
        for one in [s for s in styles if s in by_series]:
            _draw_series(ax, series_label(one), by_series[one], styles[one])
        front_labels(ax, [(timed[m].speedup_vs_dgemm, max(e, EXACT), _short(m), styles[series(m)]["color"])
                          for m, e in errs.items() if family(m)[0] not in ("DGEMM", "SGEMM")], "higher")
        if "fp64" in errs:
            ax.axhline(max(errs["fp64"], EXACT), color="black", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.margins(0.12)
        log_axis(ax, "x")
        finish_panel(ax, panel_title(title, devices[key]), "speed-up over DGEMM", "max relative error")
    handles, labels = legend_entries(axes)
    shared_legend(body, handles=[*handles, DGEMM_LINE, HOLLOW],
                  labels=[*labels, "DGEMM's error (at or below: as accurate)", "hollow: timed by one run or unstable"])
    fig = finish(body, db, devices, [TIME], "Ozaki scheme II against DGEMM: max relative error against speed-up "
                 "(lines join a series' points in count order, a series per Winograd level over the residues; labels: "
                 "the points no other beats in both; an error of 0 drawn at 2^-54)", note=skipped_phis(phis))
    return place_point_labels(fig)


def breakdown_panels(db: ResultsDB) -> list[tuple[str, str, list[Any]]]:
    """(env, title, rows) per environment, regime and product."""
    panels = []
    for key in db.env_keys():
        rows = breakdown_rows(db, key)
        regimes = {r.regime for r in rows}
        for regime in sorted(regimes):
            for shape in sorted({r.shape for r in rows if r.regime == regime}, key=product_order):
                panels.append((key, _regime_title(shape, regime, regimes),
                               [r for r in rows if r.shape == shape and r.regime == regime]))
    return panels


@figure(BREAKDOWN, "Seconds of scheme II's phases per configuration, stacked, per product, with the INT8 GEMM rate "
                   "of the GEMM phase")
def render_breakdown(db: ResultsDB) -> Figure | None:
    """One panel per environment, regime and product; None when nothing is stored."""
    panels = breakdown_panels(db)
    if not panels:
        return None
    devices = panel_devices(db, [p[0] for p in panels])
    styles = series_styles(PHASES)
    width = max(3.6, 1.2 + 0.9 * max(len(p[2]) for p in panels))
    body, axes = panel_grid(len(panels), panel_width=width, panel_height=3.4)
    for ax, (key, title, rows) in zip(axes, panels):
        xs, bottom = np.arange(len(rows)), np.zeros(len(rows))
        for phase in (p for p in PHASES if any(p in r.seconds for r in rows)):
            vals = np.array([1e3 * r.seconds.get(phase, 0.0) for r in rows])
            ax.bar(xs, vals, bottom=bottom, label=phase, color=styles[phase]["color"])
            bottom += vals
        for x, top, r in zip(xs, bottom, rows):
            ax.text(x, top, f"INT8 GEMM\n{rate_text(r.int8_ops_per_s)}", ha="center", va="bottom", fontsize=SMALL - 1)
        ax.set_ylim(0, 1.3 * max(bottom.max(), 1e-9))
        ax.set_xticks(xs)
        ax.set_xticklabels([r.method.removeprefix("ozaki2-") for r in rows], fontsize=SMALL)
        finish_panel(ax, panel_title(title, devices[key]), "scaling-moduli", "milliseconds")
    shared_legend(body, axes, title="phase")
    return finish(body, db, devices, [BREAKDOWN], "Ozaki scheme II: where the time goes (median of runs, each phase "
                  "synchronized); above each bar the INT8 rate of its GEMM phase, 2 m n k per modulus (accurate "
                  "scaling's bound GEMM is in scaling)")
