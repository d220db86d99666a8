"""The Ozaki figures, drawn from stored rows only: error against the number of FP32 splits
(``ozaki-accuracy``), time against N (``ozaki-time``), where the time goes (``ozaki-breakdown``)
and error against time with each format's Pareto front (``ozaki-pareto``)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from accuracy.methods import OZAKI_VARIANTS, parse_ozaki_method

from ..audit.bench import EXPERIMENT as AUDIT
from ..audit.rows import audit_rows
from ..core.database import ResultsDB
from ..core.labels import place_point_labels, point_label
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
    size_axis,
)
from ..core.registry import figure
from .bench import BREAKDOWN, DGEMM, ERROR, LABELS, SEED, SGEMM, TIME, TIME_PHI
from .errors import error_rows
from .experiments import PHASES, breakdown_rows, paper_methods
from .timing import time_rows

HOLLOW = Line2D([], [], marker="o", color="0.35", mfc="white", linestyle="none")


def _count(label: str) -> int:
    """The slice count of a legend label such as ``"4 slices"`` (0 for SGEMM and DGEMM)."""
    head = label.split()[0]
    return int(head) if head.isdigit() else 0


def _finish_panel(ax: Any, title: str, xlabel: str, ylabel: str) -> None:
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.title.set_fontsize(SMALL + 1)
    ax.grid(True, alpha=0.3)


@figure("ozaki-accuracy", "Max relative error against the number of FP32 splits, with SGEMM and DGEMM, per phi and N")
def render_accuracy(db: ResultsDB) -> Figure | None:
    wanted = set(paper_methods())
    panels = []
    for key in db.env_keys():
        rows = [r for r in audit_rows(db, key) if r.method in wanted and r.max_rel]
        splits = {r.n for r in rows if parse_ozaki_method(r.method)}
        panels += [(key, n, phi, [r for r in rows if r.n == n and r.phi == phi])
                   for n in sorted(splits) for phi in sorted({r.phi for r in rows if r.n == n})]
    if not panels:
        return None
    devices = panel_devices(db, [p[0] for p in panels])
    body, axes = panel_grid(len(panels), panel_width=4.2, panel_height=3.3)
    for ax, (key, n, phi, rows) in zip(axes, panels):
        by_split: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            parsed = parse_ozaki_method(r.method)
            if parsed:
                by_split[parsed[0]][parsed[1]].append(r.max_rel)
        for variant, label, color in (("fp32r", "FP32 splits, paper's form", "C0"),
                                      ("fp32", "FP32, exact digits only", "C1")):
            xs = sorted(by_split[variant])
            if not xs:
                continue
            ax.plot(xs, [statistics.median(by_split[variant][s]) for s in xs], "o-", ms=3, color=color,
                    label=f"{label} (median)")
            ax.fill_between(xs, [min(by_split[variant][s]) for s in xs], [max(by_split[variant][s]) for s in xs],
                            alpha=0.2, color=color)
        for method, style in ((SGEMM, "--"), (DGEMM, ":")):
            vals = [r.max_rel for r in rows if r.method == method]
            if vals:
                ax.axhline(statistics.median(vals), ls=style, color="black", lw=0.9, label=LABELS[method])
        ax.set_yscale("log")
        ax.xaxis.get_major_locator().set_params(integer=True)
        _finish_panel(ax, panel_title(f"phi = {phi:g}, N = {n}", devices[key]), "splits", "max relative error")
    shared_legend(body, axes)
    return finish(body, db, devices, [AUDIT], "Ozaki scheme with FP32 splits: maximum relative error against the "
                  "correctly rounded product (bands: min to max over seeds)")


@figure(TIME, "Ozaki time relative to DGEMM against N, one line per slice count, one panel per format")
def render_time(db: ResultsDB) -> Figure | None:
    panels = [(key, fmt, [r for r in rows if r.format == fmt]) for key in db.env_keys()
              if (rows := time_rows(db, key))
              for fmt in [f for f in OZAKI_VARIANTS if any(r.format == f for r in rows)]]
    if not panels:
        return None
    devices = panel_devices(db, [p[0] for p in panels])
    styles = series_styles(sorted({r.slices for p in panels for r in p[2]}))
    body, axes = panel_grid(len(panels), panel_width=4.2, panel_height=3.3)
    for ax, (key, fmt, rows) in zip(axes, panels):
        for s in sorted({r.slices for r in rows}):
            pts = sorted((r.n, 1 / r.speedup_vs_dgemm, r.stable) for r in rows if r.slices == s)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", ms=4, label=f"{s} slices", **styles[s])
            shaky = [(x, y) for x, y, ok in pts if not ok]
            if shaky:
                ax.plot(*zip(*shaky), linestyle="none", ms=4, mfc="white", zorder=3, **styles[s])
        sg = sorted({(r.n, r.sgemm_s / r.dgemm_s) for r in rows})
        ax.plot([p[0] for p in sg], [p[1] for p in sg], "k--", lw=0.9, label="SGEMM")
        ax.axhline(1.0, color="black", lw=0.8, ls=":", label="DGEMM")
        size_axis(ax, [r.n for r in rows])
        log_axis(ax, "y")
        _finish_panel(ax, panel_title(f"{fmt} slices", devices[key]), "N", "time / DGEMM time")
    entries = sorted(zip(*legend_entries(axes)), key=lambda e: (not e[1].endswith(" slices"), _count(e[1])))
    shared_legend(body, handles=[*(h for h, _ in entries), HOLLOW],
                  labels=[*(label for _, label in entries), "hollow: single run, predicted or unstable"])
    return finish(body, db, devices, [TIME], "Ozaki scheme: time relative to DGEMM (interleaved timings)")


@figure(BREAKDOWN, "Split, GEMM and sum seconds of Ozaki configurations, stacked, per N")
def render_breakdown(db: ResultsDB) -> Figure | None:
    panels = [(key, n, [r for r in rows if r.n == n]) for key in db.env_keys()
              if (rows := breakdown_rows(db, key)) for n in sorted({r.n for r in rows})]
    if not panels:
        return None
    devices = panel_devices(db, [p[0] for p in panels])
    styles = series_styles(PHASES)
    width = max(3.6, 1.0 + 0.55 * max(len(p[2]) for p in panels))
    body, axes = panel_grid(len(panels), panel_width=width, panel_height=3.4)
    for ax, (key, n, rows) in zip(axes, panels):
        xs = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        for phase in PHASES:
            vals = np.array([1e3 * r.seconds()[phase] for r in rows])
            ax.bar(xs, vals, bottom=bottom, label=phase, color=styles[phase]["color"])
            bottom += vals
        ax.set_xticks(xs)
        ax.set_xticklabels([r.method.removeprefix("ozaki-") for r in rows], rotation=45, ha="right",
                           fontsize=SMALL)
        _finish_panel(ax, panel_title(f"N = {n}", devices[key]), "format-slices", "milliseconds")
    shared_legend(body, axes, title="phase")
    return finish(body, db, devices, [BREAKDOWN], "Ozaki scheme: where the time goes (median of runs, each phase "
                  "synchronized)")


def pareto_front(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats in both time and error, by increasing time."""
    front, best = [], math.inf
    for t, e in sorted(points):
        if e < best:
            front.append((t, e))
            best = e
    return front


def timed_phi(phis: Iterable[float]) -> float:
    """The phi a Pareto panel draws: that of the timing inputs (:data:`TIME_PHI`) where its errors are stored,
    else the stored phi nearest to it (on a log scale). The times hold for every phi; the errors at the
    others are in the experiment's table."""
    return min(phis, key=lambda p: (abs(math.log((p or 1e-300) / TIME_PHI)), p))


def skipped_phis(phis: dict[Any, set[float]]) -> str | None:
    """A footer note naming the stored phi values a Pareto figure does not draw, or None."""
    others = sorted({p for drawn, stored in phis.items() for p in stored if p != drawn[-1]})
    if not others:
        return None
    return (f"Errors on phi = {', '.join(f'{p:g}' for p in others)} are stored but not drawn: one phi a product "
            "(that of the timing inputs) keeps the panels few; the experiment's table lists every phi")


def front_labels(ax: Any, points: Iterable[tuple[float, float, str, Any]], faster: str) -> None:
    """Label the points no other beats in both time and error (the front of every format or family), each
    by its name in its series' colour; the labels are moved apart by
    :func:`~experiments.core.labels.place_point_labels`. ``points`` are (time or speed-up, error, name, colour)."""
    pts = list(points)
    sign = 1.0 if faster == "lower" else -1.0
    front = set(pareto_front((sign * x, y) for x, y, _, _ in pts))
    for x, y, text, color in pts:
        if (sign * x, y) in front:
            point_label(ax, text, (x, y), color=color)


@figure("ozaki-pareto", "Max relative error against time relative to DGEMM, per format with its Pareto front, one "
                        "panel per N on the timing inputs' phi")
def render_pareto(db: ResultsDB) -> Figure | None:
    panels, phis = [], {}
    for key in db.env_keys():
        times = {(r.n, r.method): r for r in time_rows(db, key)}
        errors = [r for r in error_rows(db, key) if r.seed == SEED and r.max_rel]
        for n in sorted({r.n for r in errors if (r.n, r.method) in times}):
            stored = {r.phi for r in errors if r.n == n}
            phi = timed_phi(stored)
            phis[(key, n, phi)] = stored
            panels.append((key, n, phi, times, [r for r in errors if r.n == n and r.phi == phi]))
    if not panels:
        return None
    devices = panel_devices(db, [p[0] for p in panels], [ERROR, TIME])
    styles = series_styles(OZAKI_VARIANTS)
    body, axes = panel_grid(len(panels), panel_width=4.4, panel_height=3.6)
    for ax, (key, n, phi, times, errors) in zip(axes, panels):
        by_format = defaultdict(list)
        for r in errors:
            parsed, t = parse_ozaki_method(r.method), times.get((n, r.method))
            if parsed and t:
                by_format[parsed[0]].append((1 / t.speedup_vs_dgemm, r.max_rel, parsed[1], t.protocol == "predicted"))
        for fmt in [f for f in OZAKI_VARIANTS if f in by_format]:
            pts, color = by_format[fmt], styles[fmt]["color"]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="none", ms=4, label=fmt, **styles[fmt])
            guessed = [(x, y) for x, y, _, g in pts if g]
            if guessed:
                ax.plot(*zip(*guessed), linestyle="none", ms=4, mfc="white", zorder=3, **styles[fmt])
            front = pareto_front((x, y) for x, y, _, _ in pts)
            ax.plot([p[0] for p in front], [p[1] for p in front], "-", color=color, lw=0.8)
        front_labels(ax, [(x, y, f"{fmt}-{s}", styles[fmt]["color"]) for fmt, pts in by_format.items()
                          for x, y, s, _ in pts], "lower")
        group = [t for (size, _), t in times.items() if size == n]
        for method, marker in ((DGEMM, "s"), (SGEMM, "^")):
            err = next((r.max_rel for r in errors if r.method == method), None)
            if err and group:
                x = 1.0 if method == DGEMM else statistics.median(t.sgemm_s / t.dgemm_s for t in group)
                ax.plot([x], [err], marker, color="black", label=LABELS[method])
        ax.set_yscale("log")
        log_axis(ax, "x")
        _finish_panel(ax, panel_title(f"phi = {phi:g}, N = {n}", devices[key]), "time / DGEMM time",
                      "max relative error")
    handles, labels = legend_entries(axes)
    shared_legend(body, handles=[*handles, HOLLOW], labels=[*labels, "hollow: time predicted, not run"])
    fig = finish(body, db, devices, [ERROR, TIME], "Ozaki scheme: error against time (lines: Pareto front of each "
                 "format; labels: format-slices of the points on the front of all formats)",
                 note=skipped_phis(phis))
    return place_point_labels(fig)
