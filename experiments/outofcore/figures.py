"""The out-of-core figure, drawn from stored ``outofcore`` rows only: TFLOP/s against N, one line
per method (the engine, and the in-core DGEMMs where they fitted), one panel per environment and
group (dtype, regime) (``outofcore-tflops``)."""

from __future__ import annotations

from collections import defaultdict

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from gpu.outofcore import LANES
from gpu.outofcore.timeline import overlap

from ..core.database import ResultsDB
from ..core.plotting import (
    SMALL,
    finish,
    legend_entries,
    panel_devices,
    panel_grid,
    panel_title,
    plot_marked,
    series_styles,
    shared_legend,
    size_axis,
)
from ..core.registry import figure
from .rows import EXPERIMENT, LABELS, METHODS, OutofcoreRow, method_order, outofcore_rows
from .timeline import EXPERIMENT as TIMELINE
from .timeline import timeline_rows

Panel = tuple[str, str, list[OutofcoreRow]]
HOLLOW = Line2D([], [], marker="o", color="0.35", mfc="white", linestyle="none")


def panels(db: ResultsDB) -> list[Panel]:
    """(environment, group, rows) of every environment (most recent first)."""
    out = []
    for key in db.env_keys():
        mine: dict[str, list[OutofcoreRow]] = defaultdict(list)
        for row in outofcore_rows(db, key):
            mine[row.group].append(row)
        out += [(key, group, mine[group]) for group in sorted(mine)]
    return out


@figure("outofcore-tflops", "TFLOP/s of the out-of-core engine and the in-core DGEMM (where it fits) against N, "
                            "host memory to host memory", experiments=(EXPERIMENT,))
def render_tflops(db: ResultsDB) -> Figure | None:
    found = panels(db)
    if not found:
        return None
    devices = panel_devices(db, [p[0] for p in found])
    groups = {p[1] for p in found}
    styles = series_styles(METHODS)
    body, axes = panel_grid(len(found), panel_width=4.2, panel_height=3.2)
    for ax, (key, group, rows) in zip(axes, found):
        for method in method_order(r.method for r in rows):
            pts = sorted((r for r in rows if r.method == method), key=lambda r: r.n)
            plot_marked(ax, [r.n for r in pts], [r.tflops for r in pts], [r.stable for r in pts], "-", ms=4,
                        label=LABELS.get(method, method), **styles[method])
        size_axis(ax, [r.n for r in rows])
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(bottom=0)
        ax.set_title(panel_title(devices[key], group if len(groups) > 1 else ""), fontsize=SMALL + 1)
        ax.grid(True, alpha=0.3)
    handles, labels = legend_entries(axes)
    shared_legend(body, handles=[*handles, HOLLOW], labels=[*labels, "hollow: no stable batch"])
    return finish(body, db, devices, [EXPERIMENT],
                  "Out-of-core engine and in-core DGEMM (2 N^3 over the median time)")


@figure("outofcore-timeline", "A time-line of one out-of-core engine run: host staging, H2D copies, GEMMs, D2H "
                              "copies and placement into the output, lane by lane", experiments=(TIMELINE,))
def render_timeline(db: ResultsDB) -> Figure | None:
    found = [(key, row) for key in db.env_keys() for row in timeline_rows(db, key)]
    if not found:
        return None
    devices = panel_devices(db, [key for key, _ in found])
    colours = series_styles(LANES)
    body, axes = panel_grid(len(found), panel_width=6.4, panel_height=2.6, max_cols=1)
    for ax, (key, row) in zip(axes, found):
        for y, lane in enumerate(reversed(LANES)):
            bars = [(s.start, s.end - s.start) for s in row.spans if s.lane == lane]
            ax.broken_barh(bars, (y - 0.38, 0.76), facecolors=colours[lane]["color"], edgecolor="white",
                           linewidth=0.3)
        ax.set_yticks(range(len(LANES)), list(reversed(LANES)))
        ax.set_xlim(0, row.seconds * 1.01)
        ax.set_xlabel("seconds from the start of the run")
        gemm = row.busy("GEMM") / row.seconds
        hidden = overlap(list(row.spans), "H2D", "GEMM") / max(row.busy("H2D"), 1e-12)
        ax.set_title(panel_title(devices[key], f"N = {row.n}, block {row.block[0]} x {row.block[1]}, "
                                               f"panel {row.panel}, {row.regime}"), fontsize=SMALL + 1)
        ax.text(0.99, 0.02, f"GEMM busy {gemm:.0%} of the run; {hidden:.0%} of H2D under GEMMs",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=SMALL)
        ax.grid(True, axis="x", alpha=0.3)
    return finish(body, db, devices, [TIMELINE], "Out-of-core engine: copy and compute overlap in one run "
                                                 "(CUDA events; host spans from the host clock)")
