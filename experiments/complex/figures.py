"""The ``complex-pareto`` figure, drawn from stored rows only: per size N, each complex method's largest
componentwise error on the timing inputs' phi against its speed-up over ZGEMM as called, ZGEMM at x = 1."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..core.database import ResultsDB
from ..core.labels import place_point_labels, point_label
from ..core.plotting import (
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
from ..ozaki.figures import HOLLOW, skipped_phis, timed_phi
from ..ozaki.figures import _finish_panel as finish_panel
from .bench import FAMILIES, PARETO, SEED, TIME, ZGEMM, family, sort_key
from .errors import ErrorRow, error_rows
from .timing import SINGLE, TimeRow, time_rows

#: Where an error of 0 (every entry exact) is drawn on the log axis: below any error a product makes in practice.
EXACT = 2.0**-64
ZGEMM_LINE = Line2D([], [], color="black", lw=0.8, ls=":")

Panel = tuple[str, str, int, float, dict[str, TimeRow], dict[str, float], bool]


def latest_errors(errors: list[ErrorRow]) -> dict[tuple[int, float, str], float]:
    """Per (n, phi, method): the largest componentwise error over the most rows stored (seed SEED)."""
    best: dict[tuple[int, float, str], ErrorRow] = {}
    for r in errors:
        key = (r.n, r.phi, r.method)
        if r.seed == SEED and r.max_comp is not None and (key not in best or r.rows > best[key].rows):
            best[key] = r
    return {key: r.max_comp for key, r in best.items()}


def pareto_panels(db: ResultsDB) -> tuple[list[Panel], dict[Any, set[float]]]:
    """(env, regime, n, phi, times by method, errors by method, several regimes) per environment, regime and size,
    on the phi of the timing inputs (:func:`~experiments.ozaki.figures.timed_phi`); and the phis stored per panel."""
    panels: list[Panel] = []
    phis: dict[Any, set[float]] = {}
    for key in db.env_keys():
        times, errors = time_rows(db, key), latest_errors(error_rows(db, key))
        regimes = sorted({t.regime for t in times})
        for regime in regimes:
            for n in sorted({t.n for t in times if t.regime == regime}):
                timed = {t.method: t for t in times if t.n == n and t.regime == regime}
                stored = {p for nn, p, m in errors if nn == n and m in timed}
                if not stored:
                    continue
                phi = timed_phi(stored)
                phis[(key, regime, n, phi)] = stored
                errs = {m: e for (nn, p, m), e in errors.items() if nn == n and p == phi and m in timed}
                panels.append((key, regime, n, phi, timed, errs, len(regimes) > 1))
    return panels, phis


def shaky(t: TimeRow) -> bool:
    """Whether a time is drawn hollow: timed by one call, or its batch was not stable."""
    return t.protocol == SINGLE or not t.stable


def draw_panel(ax: Any, timed: dict[str, TimeRow], errs: dict[str, float], styles: dict[str, Any]) -> bool:
    """One marker per method, a series per family, each method labelled; whether any point is drawn hollow."""
    by_family: dict[str, list[str]] = defaultdict(list)
    for name in sorted(errs, key=sort_key):
        by_family[family(name)[0]].append(name)
    hollow = False
    for fam, names in by_family.items():
        style = styles.get(fam, {"color": "0.4", "marker": "o"})
        xs = [timed[m].speedup_vs_zgemm for m in names]
        ys = [max(errs[m], EXACT) for m in names]
        ax.plot(xs, ys, linestyle="none", ms=5, label=fam, **style)
        weak = [(x, y) for x, y, m in zip(xs, ys, names) if shaky(timed[m])]
        if weak:
            ax.plot(*zip(*weak), linestyle="none", ms=5, mfc="white", zorder=3, **style)
            hollow = True
        for x, y, m in zip(xs, ys, names):
            if m != ZGEMM:
                point_label(ax, family(m)[1], (x, y), color=style["color"])
    if ZGEMM in errs:
        ax.axhline(max(errs[ZGEMM], EXACT), color="black", lw=0.8, ls=":")
    ax.axvline(1.0, color="0.6", lw=0.6, ls="-")
    return hollow


def _title(db: ResultsDB, panels: list[Panel]) -> str:
    """The figure's title: what it shows, on which devices and in which regimes."""
    devices = ", ".join(dict.fromkeys(str(db.environment(p[0]).get("device") or p[0]) for p in panels))
    regimes = ", ".join(sorted({p[1] for p in panels}))
    return (f"Complex products (complex128) against ZGEMM on {devices}, regime {regimes}: largest componentwise error "
            "(each part against its own scale) against the speed-up over ZGEMM, both as called")


@figure(PARETO, "Largest componentwise error against speed-up over ZGEMM as called, per size N on the timing "
                "inputs' phi: ZGEMM, 3M and 4M over real methods, Ozaki scheme II over both parts and the front door")
def render_pareto(db: ResultsDB) -> Figure | None:
    """One panel per environment, regime and size; None when nothing is stored."""
    panels, phis = pareto_panels(db)
    if not panels:
        return None
    devices = panel_devices(db, [p[0] for p in panels], [TIME])
    styles = series_styles(FAMILIES)
    body, axes = panel_grid(len(panels), panel_width=4.6, panel_height=3.8, max_cols=2)
    hollow = False
    for ax, (key, regime, n, phi, timed, errs, several) in zip(axes, panels):
        hollow |= draw_panel(ax, timed, errs, styles)
        ax.set_yscale("log")
        ax.margins(0.15)
        log_axis(ax, "x")
        head = f"N = {n}, phi = {phi:g}" + (f", {regime}" if several else "")
        finish_panel(ax, panel_title(head, devices[key]), "speed-up over ZGEMM, as called", "max componentwise error")
    handles, labels = legend_entries(axes)
    extra = [(ZGEMM_LINE, "ZGEMM's error (at or below: as accurate)"),
             *([(HOLLOW, "hollow: timed by one call, or unstable")] if hollow else [])]
    shared_legend(body, handles=[*handles, *(h for h, _ in extra)], labels=[*labels, *(t for _, t in extra)])
    zeros = any(e == 0 for p in panels for e in p[5].values())
    notes = [n for n in (skipped_phis(phis), "An error of 0 is drawn at 2^-64." if zeros else None) if n]
    fig = finish(body, db, devices, [TIME], _title(db, panels), note=" ".join(notes) or None)
    return place_point_labels(fig)
