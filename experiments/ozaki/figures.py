"""The Ozaki figures, drawn from stored rows only: error against the number of FP32 splits
(``ozaki-accuracy``), time against N (``ozaki-time``), where the time goes (``ozaki-breakdown``)
and error against time with each format's Pareto front (``ozaki-pareto``)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from accuracy.methods import OZAKI_VARIANTS, parse_ozaki_method

from ..audit.bench import audit_rows
from ..core.database import ResultsDB
from ..core.plotting import device_label, new_figure, save_figure
from ..core.registry import figure
from .bench import BREAKDOWN, DGEMM, LABELS, SEED, SGEMM, TIME
from .errors import error_rows
from .experiments import PHASES, breakdown_rows, paper_methods
from .timing import time_rows


def _grid(count: int, width: float, height: float, cols: int = 3) -> tuple[Any, list[Any]]:
    """A figure with ``count`` panels of width x height inches, at most ``cols`` per row."""
    cols = min(cols, count)
    rows = -(-count // cols)
    fig, axes = new_figure(rows, cols, width=width * cols, height=height * rows)
    flat = list(np.array(axes, dtype=object).reshape(-1))
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def _finish(ax: Any, title: str, xlabel: str, ylabel: str) -> None:
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.title.set_fontsize(8)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)


@figure("ozaki-accuracy", "Max relative error against the number of FP32 splits, with SGEMM and DGEMM, per phi and N")
def render_accuracy(db: ResultsDB, out_dir: Path) -> list[Path]:
    wanted = set(paper_methods())
    panels = []
    for key in db.env_keys():
        rows = [r for r in audit_rows(db, key) if r.method in wanted and r.max_rel]
        splits = {r.n for r in rows if parse_ozaki_method(r.method)}
        panels += [(key, n, phi, [r for r in rows if r.n == n and r.phi == phi])
                   for n in sorted(splits) for phi in sorted({r.phi for r in rows if r.n == n})]
    if not panels:
        return []
    fig, axes = _grid(len(panels), 4.2, 3.4)
    for ax, (key, n, phi, rows) in zip(axes, panels):
        by_split: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            parsed = parse_ozaki_method(r.method)
            if parsed:
                by_split[parsed[0]][parsed[1]].append(r.max_rel)
        for variant, label in (("fp32r", "FP32 splits, paper's form"), ("fp32", "FP32, exact digits only")):
            xs = sorted(by_split[variant])
            if not xs:
                continue
            line, = ax.plot(xs, [statistics.median(by_split[variant][s]) for s in xs], "o-", ms=3,
                            label=f"{label} (median)")
            ax.fill_between(xs, [min(by_split[variant][s]) for s in xs], [max(by_split[variant][s]) for s in xs],
                            alpha=0.2, color=line.get_color())
        for method, style in ((SGEMM, "--"), (DGEMM, ":")):
            vals = [r.max_rel for r in rows if r.method == method]
            if vals:
                ax.axhline(statistics.median(vals), ls=style, color="black", lw=0.9, label=LABELS[method])
        ax.set_yscale("log")
        ax.xaxis.get_major_locator().set_params(integer=True)
        _finish(ax, f"phi = {phi:g}, N = {n}\n{device_label(db, key)}", "splits", "max relative error")
    fig.suptitle("Ozaki scheme with FP32 splits: maximum relative error against the correctly rounded product "
                 "(bands: min-max over seeds)", fontsize=9)
    return save_figure(fig, out_dir, "ozaki-accuracy")


@figure(TIME, "Ozaki time relative to DGEMM against N, one line per slice count, one panel per format")
def render_time(db: ResultsDB, out_dir: Path) -> list[Path]:
    panels = [(key, fmt, [r for r in rows if r.format == fmt]) for key in db.env_keys()
              if (rows := time_rows(db, key))
              for fmt in [f for f in OZAKI_VARIANTS if any(r.format == f for r in rows)]]
    if not panels:
        return []
    fig, axes = _grid(len(panels), 4.4, 3.5)
    for ax, (key, fmt, rows) in zip(axes, panels):
        for s in sorted({r.slices for r in rows}):
            pts = sorted((r.n, 1 / r.speedup_vs_dgemm, r.stable) for r in rows if r.slices == s)
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, label=f"{s} slices")
            shaky = [(x, y) for x, y, ok in pts if not ok]
            if shaky:
                ax.plot(*zip(*shaky), "o", color=line.get_color(), mfc="white", zorder=3)
        sg = sorted({(r.n, r.sgemm_s / r.dgemm_s) for r in rows})
        ax.plot([p[0] for p in sg], [p[1] for p in sg], "k--", lw=0.9, label="SGEMM")
        ax.axhline(1.0, color="black", lw=0.8, ls=":", label="DGEMM")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _finish(ax, f"{fmt} slices, {device_label(db, key)}", "N", "time / DGEMM time")
    fig.suptitle("Ozaki scheme: time relative to DGEMM (interleaved; hollow: single run, predicted or unstable)",
                 fontsize=9)
    return save_figure(fig, out_dir, TIME)


@figure(BREAKDOWN, "Split, GEMM and sum seconds of Ozaki configurations, stacked, per N")
def render_breakdown(db: ResultsDB, out_dir: Path) -> list[Path]:
    panels = [(key, n, [r for r in rows if r.n == n]) for key in db.env_keys()
              if (rows := breakdown_rows(db, key)) for n in sorted({r.n for r in rows})]
    if not panels:
        return []
    fig, axes = _grid(len(panels), max(4.5, 1.0 + 0.8 * max(len(p[2]) for p in panels)), 4.0, cols=len(panels))
    for ax, (key, n, rows) in zip(axes, panels):
        xs = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        for phase in PHASES:
            vals = np.array([1e3 * r.seconds()[phase] for r in rows])
            ax.bar(xs, vals, bottom=bottom, label=phase)
            bottom += vals
        ax.set_xticks(xs)
        ax.set_xticklabels([r.method.removeprefix("ozaki-") for r in rows], rotation=45, fontsize=7)
        _finish(ax, f"N = {n}, {device_label(db, key)}", "format-slices", "milliseconds")
    fig.suptitle("Ozaki scheme: where the time goes (median of runs, each phase synchronized)", fontsize=9)
    return save_figure(fig, out_dir, BREAKDOWN)


def pareto_front(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats in both time and error, by increasing time."""
    front, best = [], math.inf
    for t, e in sorted(points):
        if e < best:
            front.append((t, e))
            best = e
    return front


@figure("ozaki-pareto", "Max relative error against time relative to DGEMM, per format with its Pareto front")
def render_pareto(db: ResultsDB, out_dir: Path) -> list[Path]:
    panels = []
    for key in db.env_keys():
        times = {(r.n, r.method): r for r in time_rows(db, key)}
        errors = [r for r in error_rows(db, key) if r.seed == SEED and r.max_rel]
        for n in sorted({r.n for r in errors if (r.n, r.method) in times}):
            for phi in sorted({r.phi for r in errors if r.n == n}):
                panels.append((key, n, phi, times, [r for r in errors if r.n == n and r.phi == phi]))
    if not panels:
        return []
    fig, axes = _grid(len(panels), 4.6, 3.8)
    for ax, (key, n, phi, times, errors) in zip(axes, panels):
        by_format = defaultdict(list)
        for r in errors:
            parsed, t = parse_ozaki_method(r.method), times.get((n, r.method))
            if parsed and t:
                by_format[parsed[0]].append((1 / t.speedup_vs_dgemm, r.max_rel, parsed[1], t.protocol == "predicted"))
        for fmt in [f for f in OZAKI_VARIANTS if f in by_format]:
            pts = by_format[fmt]
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", ms=3, label=fmt)
            guessed = [(x, y) for x, y, _, g in pts if g]
            if guessed:
                ax.plot(*zip(*guessed), "o", ms=3, color=line.get_color(), mfc="white", zorder=3)
            for x, y, s, _ in pts:
                ax.annotate(str(s), (x, y), fontsize=5, xytext=(2, 2), textcoords="offset points")
            front = pareto_front((x, y) for x, y, _, _ in pts)
            ax.plot([p[0] for p in front], [p[1] for p in front], "-", color=line.get_color(), lw=0.8)
        group = [t for (size, _), t in times.items() if size == n]
        for method, marker in ((DGEMM, "s"), (SGEMM, "^")):
            err = next((r.max_rel for r in errors if r.method == method), None)
            if err and group:
                x = 1.0 if method == DGEMM else statistics.median(t.sgemm_s / t.dgemm_s for t in group)
                ax.plot([x], [err], marker, color="black", label=LABELS[method])
        ax.set_xscale("log")
        ax.set_yscale("log")
        _finish(ax, f"phi = {phi:g}, N = {n}\n{device_label(db, key)}", "time / DGEMM time", "max relative error")
    fig.suptitle("Ozaki scheme: error against time (labels: slices; lines: Pareto fronts per format; hollow: "
                 "time predicted, not run)", fontsize=9)
    return save_figure(fig, out_dir, "ozaki-pareto")
