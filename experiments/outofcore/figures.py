"""The out-of-core figures, drawn from stored rows only. ``outofcore-tflops``: TFLOP/s against N, one
line per method of the ``outofcore`` experiment (the engine, and the in-core DGEMMs where they fitted)
and, dashed, of the ``segmented`` experiment (the paper's plain kernel unsplit, with index translation,
and over 1-D and 2-D segments), one panel per environment and
group (dtype, regime) (``outofcore-tflops``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

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
from ..core.regime import panel_group
from ..core.registry import figure
from ..segmented.report import EXPERIMENT as SEGMENTED
from ..segmented.report import ONE_D, TRANSLATED, TWO_D, WHOLE, SegmentedRow, segmented_rows
from .rows import EXPERIMENT, LABELS, METHODS, outofcore_rows
from .timeline import EXPERIMENT as TIMELINE
from .timeline import timeline_rows

Panel = tuple[str, str, list[Any]]
#: How the figure names the segmented kernel's methods.
SEGMENT_LABELS = {WHOLE: "plain kernel, whole arrays", TRANSLATED: "plain kernel, index translation (one segment)",
                  ONE_D: "plain kernel, 1-D segments", TWO_D: "plain kernel, 2-D segments"}
HOLLOW = Line2D([], [], marker="o", color="0.35", mfc="white", linestyle="none")


def panels(db: ResultsDB) -> list[Panel]:
    """(environment, group, rows) of every environment (most recent first)."""
    out = []
    for key in db.env_keys():
        mine: dict[str, list[Any]] = defaultdict(list)
        for row in outofcore_rows(db, key):
            mine[row.group].append(row)
        for srow in segmented_rows(db, key):
            mine[panel_group(srow.dtype, srow.regime)].append(srow)
        out += [(key, group, mine[group]) for group in sorted(mine)]
    return out


def _label(row: Any) -> str:
    if isinstance(row, SegmentedRow):
        return SEGMENT_LABELS.get(row.method, row.method) + (f" (M = {row.m})" if row.method in (ONE_D, TWO_D) else "")
    return LABELS.get(row.method, row.method)


@figure("outofcore-tflops", "TFLOP/s of the out-of-core engine, the in-core DGEMM (where it fits) and the segmented "
                            "plain kernel (unsplit, translated, 1-D, 2-D) against N",
        experiments=(EXPERIMENT, SEGMENTED))
def render_tflops(db: ResultsDB) -> Figure | None:
    found = panels(db)
    if not found:
        return None
    devices = panel_devices(db, [p[0] for p in found])
    groups = {p[1] for p in found}
    styles = series_styles([*METHODS, *SEGMENT_LABELS])
    body, axes = panel_grid(len(found), panel_width=4.2, panel_height=3.2)
    for ax, (key, group, rows) in zip(axes, found):
        for label in dict.fromkeys(_label(r) for r in rows):
            pts = sorted((r for r in rows if _label(r) == label), key=lambda r: r.n)
            dashed = isinstance(pts[0], SegmentedRow)
            plot_marked(ax, [r.n for r in pts], [r.tflops for r in pts], [r.stable for r in pts],
                        "--" if dashed else "-", ms=4, label=label, **styles[pts[0].method])
        size_axis(ax, [r.n for r in rows])
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(bottom=0)
        ax.set_title(panel_title(devices[key], group if len(groups) > 1 else ""), fontsize=SMALL + 1)
        ax.grid(True, alpha=0.3)
    handles, labels = legend_entries(axes)
    shared_legend(body, handles=[*handles, HOLLOW], labels=[*labels, "hollow: no stable batch"])
    return finish(body, db, devices, [EXPERIMENT, SEGMENTED],
                  "Out-of-core engine, in-core DGEMM and the segmented plain kernel (2 N^3 over the median time)")


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
            for tag in sorted({s.tag for s in row.spans if s.lane == lane}):
                bars = [(s.start, s.end - s.start) for s in row.spans if s.lane == lane and s.tag == tag]
                ax.broken_barh(bars, (y - 0.38, 0.76), facecolors=colours[lane]["color"], edgecolor="none",
                               alpha=1.0 if tag % 2 == 0 else 0.55)
        ax.set_yticks(range(len(LANES)), list(reversed(LANES)))
        ax.set_xlim(0, row.seconds * 1.01)
        gemm = row.busy("GEMM") / row.seconds
        hidden = overlap(list(row.spans), "H2D", "GEMM") / max(row.busy("H2D"), 1e-12)
        ax.set_xlabel(f"seconds from the start of the run (GEMM busy {gemm:.0%} of it; {hidden:.0%} of the H2D "
                      "copies under GEMMs)", fontsize=SMALL + 1)
        ax.set_title(panel_title(devices[key], f"N = {row.n}, block {row.block[0]} x {row.block[1]}, "
                                               f"panel {row.panel}, {row.regime}"), fontsize=SMALL + 1)
        ax.grid(True, axis="x", alpha=0.3)
    return finish(body, db, devices, [TIMELINE], "Out-of-core engine: copy and compute overlap in one run "
                                                 "(CUDA events; host spans from the host clock)")
