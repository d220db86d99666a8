"""The out-of-core figure, drawn from stored ``outofcore`` rows only: TFLOP/s against N, one line
per method (the engine, and the in-core DGEMM where it fitted), one panel per environment and
group (dtype, regime) (``outofcore-tflops``)."""

from __future__ import annotations

from collections import defaultdict

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

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
from .rows import EXPERIMENT, METHODS, OutofcoreRow, method_order, outofcore_rows

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
                        label="in-core DGEMM" if method == "gemm" else "out-of-core engine", **styles[method])
        size_axis(ax, [r.n for r in rows])
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(bottom=0)
        ax.set_title(panel_title(devices[key], group if len(groups) > 1 else ""), fontsize=SMALL + 1)
        ax.grid(True, alpha=0.3)
    handles, labels = legend_entries(axes)
    shared_legend(body, handles=[*handles, HOLLOW], labels=[*labels, "hollow: no stable batch"])
    return finish(body, db, devices, [EXPERIMENT],
                  "Out-of-core engine and in-core DGEMM, host memory to host memory (2 N^3 over the median time)")
