"""The split-K figures, drawn from stored ``splitk`` rows only: the fraction of the copy's
bandwidth each method reaches against k (``splitk-roofline``), and each split-K mode's speed-up
over the library GEMM against k (``splitk-speedup``); one panel per output size m = n."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

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
    thinned,
)
from ..core.registry import figure
from .rows import COPY, EXPERIMENT, GEMM, METHODS, SPLITK_METHODS, SplitkRow, method_order, splitk_rows

Panel = tuple[str, int, str, list[SplitkRow]]
HOLLOW = Line2D([], [], marker="o", color="0.35", mfc="white", linestyle="none")


def panels(db: ResultsDB) -> list[Panel]:
    """(environment, m, group, rows) per output size, of every environment (most recent first)."""
    out = []
    for key in db.env_keys():
        mine: dict[tuple[int, str], list[SplitkRow]] = defaultdict(list)
        for row in splitk_rows(db, key):
            mine[(row.m, row.group)].append(row)
        out += [(key, m, group, mine[(m, group)]) for m, group in sorted(mine)]
    return out


def _k_label(v: float) -> str:
    k = round(v)
    return f"$2^{{{k.bit_length() - 1}}}$" if k > 0 and k & (k - 1) == 0 else f"{k:.3g}"


def k_axis(ax: Any, ks: Sequence[int]) -> None:
    """A log2 axis of inner dimensions labelled at measured k (powers of two as 2^e), thinned so
    that labels stay apart."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(thinned(ks, 6)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _k_label(v)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("inner dimension k")


def _power_of_two(k: int) -> bool:
    return k > 0 and k & (k - 1) == 0


def draw(db: ResultsDB, methods: Sequence[str], value: Callable[[SplitkRow], float], ylabel: str,
         reference: tuple[float, str], title: str) -> Figure | None:
    """One panel per (environment, m, group): ``value`` of each of ``methods`` against k, a dotted
    line at ``reference`` (its value and legend label), hollow markers on unstable points. Lines
    join the powers of two; other k (10^6 + 3, no chunk width divides it) are markers alone, so a
    line does not zigzag through a point of another kind."""
    found = [(key, m, group, [r for r in rows if r.method in methods]) for key, m, group, rows in panels(db)]
    found = [p for p in found if p[3]]
    if not found:
        return None
    devices = panel_devices(db, [p[0] for p in found])
    groups = {p[2] for p in found}
    styles = series_styles(METHODS)       # one colour per method in both figures
    body, axes = panel_grid(len(found), panel_width=3.8, panel_height=3.0)
    for ax, (key, m, group, rows) in zip(axes, found):
        ax.axhline(reference[0], color="black", lw=0.8, ls=":", label=reference[1])
        for method in method_order(r.method for r in rows):
            pts = sorted((r for r in rows if r.method == method), key=lambda r: r.k)
            label = method
            for joined, fmt in ((True, "-"), (False, "")):
                part = [r for r in pts if _power_of_two(r.k) == joined]
                if part:
                    plot_marked(ax, [r.k for r in part], [value(r) for r in part], [r.stable for r in part], fmt,
                                ms=4, label=label, **styles[method])
                    label = "_nolegend_"
        k_axis(ax, [r.k for r in rows])
        ax.set_ylabel(ylabel)
        where = ", ".join(p for p in (devices[key], group if len(groups) > 1 else "") if p)
        ax.set_title(panel_title(f"m = n = {m}", where), fontsize=SMALL + 1)
        ax.grid(True, alpha=0.3)
    handles, labels = legend_entries(axes)
    shared_legend(body, handles=[*handles, HOLLOW], labels=[*labels, "hollow: no stable batch"])
    return finish(body, db, devices, [EXPERIMENT], title)


@figure("splitk-roofline", "Fraction of the copy's measured bandwidth against k, one line per method, one panel "
                           "per output size m = n", experiments=(EXPERIMENT,))
def render_roofline(db: ResultsDB) -> Figure | None:
    return draw(db, (GEMM, *SPLITK_METHODS), lambda r: 100 * r.roofline, "% of copy bandwidth",
                (100.0, f"{COPY} (same group)"),
                "Split-K and the library GEMM: bandwidth over the bytes of A and B, as a share of a device copy's")


@figure("splitk-speedup", "Speed-up of each split-K mode over the library GEMM against k, one panel per output "
                          "size m = n", experiments=(EXPERIMENT,))
def render_speedup(db: ResultsDB) -> Figure | None:
    return draw(db, SPLITK_METHODS, lambda r: r.speedup, "speed-up over GEMM", (1.0, GEMM),
                "Split-K speed-up over the library GEMM (cuBLAS on GPU), interleaved in one group per point")
