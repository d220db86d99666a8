"""The accuracy figures: the papers' Figs. 8-16 (``accuracy-phi``) and the bits Strassen-Winograd
loses per level against DGEMM (``accuracy-strassen``), drawn from stored audit rows only."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from accuracy.methods import default_methods

from ..core.database import ResultsDB
from ..core.labels import merge_coincident
from ..core.plotting import (
    SMALL,
    finish,
    level_axis,
    panel_devices,
    panel_grid,
    panel_title,
    series_styles,
    shared_legend,
)
from ..core.registry import figure
from .rows import EXPERIMENT, AuditRow, audit_rows, bits_per_level


def _phi_figure_methods(methods: Iterable[str]) -> list[str]:
    """The default methods stored, in their order: what the accuracy-phi experiment audits and its table
    lists (other methods audited at the same points, such as the Ozaki splits, have figures of their own)."""
    present = set(methods)
    return [m for m in default_methods() if m in present]


@figure("accuracy-phi", "Max relative error of each method over seeds (median, min-max whiskers, each seed a dot), "
                       "one panel per phi and N (Figs. 8-16)")
def render_phi(db: ResultsDB) -> Figure | None:
    groups = [(key, rows) for key in db.env_keys() if (rows := audit_rows(db, key))]
    panels = [(key, n, phi, [r for r in rows if r.n == n and r.phi == phi and r.max_rel])
              for key, rows in groups for n in sorted({r.n for r in rows})
              for phi in sorted({r.phi for r in rows})]
    panels = [p for p in panels if _phi_figure_methods(r.method for r in p[3])]
    if not panels:
        return None
    methods = _phi_figure_methods(r.method for p in panels for r in p[3])
    styles = series_styles(methods)
    devices = panel_devices(db, [p[0] for p in panels])
    body, axes = panel_grid(len(panels), panel_width=max(3.6, 0.26 * len(methods) + 0.9), panel_height=3.8)
    for ax, (key, n, phi, rows) in zip(axes, panels):
        for i, method in enumerate(methods):
            vals = sorted(r.max_rel for r in rows if r.method == method)
            if not vals:
                continue
            style = styles[method]
            spread = [i + 0.3 * (k / max(1, len(vals) - 1) - 0.5) for k in range(len(vals))]
            ax.plot(spread, vals, linestyle="none", marker=".", ms=3, color=style["color"], alpha=0.5)
            ax.vlines(i, vals[0], vals[-1], color=style["color"], lw=1.2)
            ax.plot([i], [statistics.median(vals)], linestyle="none", ms=6, label=method, **style)
        ax.set_yscale("log")
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels(methods, rotation=90, fontsize=SMALL)
        ax.set_xlim(-0.6, len(methods) - 0.4)
        ax.set(ylabel="max relative error", title=panel_title(f"phi = {phi:g}, N = {n}", devices[key]))
        ax.title.set_fontsize(SMALL + 2)
        ax.grid(True, axis="y", alpha=0.3)
    key_handles = [Line2D([], [], color="0.3", marker="o", linestyle="none"),
                   Line2D([], [], color="0.3", marker="|", ms=10, linestyle="none"),
                   Line2D([], [], color="0.3", marker=".", linestyle="none", alpha=0.5)]
    shared_legend(body, handles=key_handles, labels=["median over seeds", "min to max over seeds", "one seed"])
    return finish(body, db, devices, [EXPERIMENT], "Maximum relative error against the correctly rounded "
                  "product, per method over seeds")


def _seeds(rows: Sequence[AuditRow], n: int, phi: float) -> int:
    """How many seeds DGEMM and every Strassen method audited at (n, phi) share: what the medians are over."""
    by_method: dict[str, set[int]] = {}
    for r in rows:
        if r.n == n and r.phi == phi and r.max_rel and (r.method == "fp64" or r.method.startswith("strassen-")):
            by_method.setdefault(r.method, set()).add(r.seed)
    return len(set.intersection(*by_method.values())) if by_method else 0


def strassen_panels(db: ResultsDB) -> tuple[list[tuple[Any, ...]], str | None]:
    """(env, N, phi, curves by joint schedule name, fitted slopes) per (N, phi) audited on two seeds or more,
    schedules of equal curves joined (``lai = rum``); and a note naming the (N, phi) of one seed, which make no
    median and no panel."""
    panels, skipped = [], []
    for key in db.env_keys():
        rows = audit_rows(db, key)
        for (size, phi), schedules in sorted(bits_per_level(rows).items()):
            if _seeds(rows, size, phi) < 2:
                skipped.append(f"N = {size}, phi = {phi:g}")
                continue
            curves = merge_coincident({s: pts for s, (pts, _) in sorted(schedules.items())})
            panels.append((key, size, phi, curves, [slope for _, slope in schedules.values()]))
    return panels, (f"Not drawn, audited on one seed only (no median over seeds): {'; '.join(skipped)}"
                    if skipped else None)


@figure("accuracy-strassen", "Bits lost against DGEMM per Strassen level, one line per schedule (schedules of equal "
                             "errors share one), one panel per phi and N audited on two seeds or more")
def render_strassen(db: ResultsDB) -> Figure | None:
    panels, note = strassen_panels(db)
    if not panels:
        return None
    styles = series_styles(dict.fromkeys(name for p in panels for name in p[3]))
    devices = panel_devices(db, [p[0] for p in panels], [EXPERIMENT])
    body, axes = panel_grid(len(panels), panel_width=4.0, panel_height=3.3)
    for ax, (key, size, phi, curves, slopes) in zip(axes, panels):
        levels = [0]
        for k, (name, pts) in enumerate(curves.items()):     # later lines thinner: where curves meet, both show
            ax.plot(*zip(*pts), "-", lw=max(0.8, 2.6 - 0.7 * k), ms=max(3, 7 - 1.5 * k), label=name, **styles[name])
            levels += [lv for lv, _ in pts]
        ax.set(xlabel="Strassen level (0: DGEMM)", ylabel="bits lost against DGEMM\n(median over seeds)",
               title=panel_title(f"phi = {phi:g}, N = {size}", devices[key],
                                 f"fit: {min(slopes):.2f} to {max(slopes):.2f} bits per level"))
        ax.title.set_fontsize(SMALL + 1)
        level_axis(ax, levels)
        ax.grid(True, alpha=0.3)
    shared_legend(body, axes, title="schedule (a = b: equal errors at every level)")
    return finish(body, db, devices, [EXPERIMENT], "Strassen-Winograd: log2(max relative error / DGEMM's) by "
                  "level and schedule", note=note)
