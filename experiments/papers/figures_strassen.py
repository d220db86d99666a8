"""Otsuka's and the thesis's published Strassen numbers drawn on the axes of our measurements.

A paper's number is a large marker with a black edge (it is one point, never joined to ours); ours are
lines, one per device or level. Each panel's legend sits beside it, the footer names every device drawn:
our environments (device, backend, regime, versions) and the papers' (device, paper, library version).
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from modeling import published as pub

from ..core.csvio import ExportRow
from ..core.plotting import (
    SMALL,
    finish,
    level_axis,
    panel_grid,
    series_styles,
    shared_legend,
    side_legend,
    size_axis,
)
from .exports import Exports, env_keys
from .strassen import DEVICES, sweeps
from .sweeps import LevelSweep, best_configurations, level_sweep, memory_by_level

PAPER_MARK = {"markersize": 11, "markeredgecolor": "black", "linestyle": "none", "zorder": 4}
SHORT = {"otsuka2020": "Otsuka & Iguchi 2020", "thesis2023": "Li 2023"}


def paper_key(ex: Exports, row: Any) -> str:
    """The footer environment of a published row's device (one per paper and device)."""
    return ex.add_paper(f"{row.paper}:{row.device}", row.device, SHORT[row.paper], row.library)


def _level_curve(ax: Any, sw: LevelSweep, level: int, label: str, style: dict[str, Any]) -> list[int]:
    sizes = sorted(n for n in sw.speedups if level in sw.speedups[n])
    ax.plot(sizes, [sw.speedups[n][level] for n in sizes], "-", ms=4, label=label, **style)
    return sizes


def _reference(ax: Any) -> None:
    ax.axhline(1.0, color="black", lw=0.8, ls=":", label="DGEMM")
    ax.grid(True, alpha=0.3)
    ax.set_ylabel("speed-up over DGEMM")


def otsuka_figure(ex: Exports) -> Figure:
    """Level 1 and level 2 speed-up against N on the H100 and the H200, with Otsuka's V100 points."""
    found = sweeps(ex)
    data = pub.load()
    points = {1: [(b.size, 1.0, b, "equal to DGEMM") for b in data.boundaries if b.paper == "otsuka2020"],
              2: [(s.size, s.speedup, s, f"{s.speedup:g}x") for s in data.speedups if s.paper == "otsuka2020"]}
    styles = series_styles([*found, "V100"])
    body, axes = panel_grid(2, panel_width=4.8, panel_height=3.4)
    keys: list[str] = []
    drawn = [r for sw in found.values() for r in sw.rows]
    for ax, level in zip(axes, (1, 2)):
        _reference(ax)
        sizes: list[int] = []
        for name, sw in found.items():
            sizes += _level_curve(ax, sw, level, f"{name} (ours): {sw.method}, {sw.regime}", styles[name])
        for n, s, row, what in points[level]:
            ax.plot([n], [s], label=f"V100 (paper): {what} at N = {n}", **{**styles["V100"], "marker": "*"},
                    **PAPER_MARK)
            keys.append(paper_key(ex, row))
            sizes.append(n)
        size_axis(ax, sizes)
        ax.set_title(f"level {level}", fontsize=SMALL + 1)
    shared_legend(body, axes, ncol=3)
    return finish(body, ex.drawn(drawn), [*env_keys(drawn), *keys], ["level-validation"],
                  "Strassen's speed-up over DGEMM against N: Otsuka & Iguchi's V100 (their schedule) beside the "
                  "toolkit's H100 and H200 (RUM, fused additions)")


def _thesis_speedups(ax: Any, ex: Exports, keys: list[str]) -> list[ExportRow]:
    sw = level_sweep(ex.rows(DEVICES["H100"]))
    rows = [s for s in pub.load().speedups if s.paper == "thesis2023"]
    best = best_configurations(ex.rows("h100-strassen"))
    names = [f"H100 level {lv}" for lv in range(1, 5)] + ["H100 best configuration", *(r.device for r in rows)]
    styles = series_styles(names)
    _reference(ax)
    sizes: list[int] = []
    for level in range(1, 5):
        sizes += _level_curve(ax, sw, level, f"H100 (ours) level {level}: {sw.method}", styles[f"H100 level {level}"])
    ax.plot(list(best), [b.speedup for b in best.values()], "--", ms=4, label="H100 (ours): best configuration "
            "stored", **styles["H100 best configuration"])
    for r in rows:
        level = f"level {r.level}" if r.level else "level not given"
        ax.plot([r.size], [r.speedup], label=f"{r.device} (thesis): {r.schedule}, {level}",
                **{**styles[r.device], "marker": "*"}, **PAPER_MARK)
        keys.append(paper_key(ex, r))
    size_axis(ax, [*sizes, *best])
    ax.set_title("speed-up over DGEMM against N (ours: sustained)", fontsize=SMALL + 1)
    side_legend(ax)
    return [*sw.rows, *(b.row for b in best.values())]


def _thesis_memory(ax: Any, ex: Exports, keys: list[str]) -> list[ExportRow]:
    ours = memory_by_level(ex.rows("h100-memory"))
    rows = [f for f in pub.load().figures if f.paper == "thesis2023" and f.quantity == "peak_memory"]
    styles = series_styles(r.schedule for r in rows)
    n = ex.rows("h100-memory")[0].params["size"]
    for r in rows:
        by_level = ours[r.schedule]
        ax.plot(list(by_level), list(by_level.values()), "-", ms=5, label=f"H100 (ours) {r.schedule}, "
                f"N = {n}, inputs kept", **styles[r.schedule])
        units = r.value * 2**30 / (8 * (r.sizes[0] // 2) ** 2)
        ax.plot([r.level], [units], label=f"A100 (thesis) {r.schedule}: {r.value:g} GiB at N = {r.sizes[0]}",
                **{**styles[r.schedule], "marker": "*"}, **PAPER_MARK)
        keys.append(paper_key(ex, r))
    ax.axhline(12, color="black", lw=0.8, ls=":", label="A, B and C alone (12)")
    level_axis(ax, [lv for s in ours.values() for lv in s])
    ax.set_xlabel("level")
    ax.set_ylabel("peak memory, (N/2)^2 quadrants")
    ax.set_title("peak memory in units of one (N/2)^2 FP64 quadrant: the same at every N", fontsize=SMALL + 1)
    ax.grid(True, alpha=0.3)
    side_legend(ax)
    return [r for r in ex.rows("h100-memory") if r.method in ours and r.method in {x.schedule for x in rows}]


def thesis_figure(ex: Exports) -> Figure:
    """The thesis's speed-ups and memory table beside the H100's per-level sweep and measured memory."""
    body, (top, bottom) = panel_grid(2, max_cols=1, panel_width=7.5, panel_height=3.6)
    keys: list[str] = []
    drawn = [*_thesis_speedups(top, ex, keys), *_thesis_memory(bottom, ex, keys)]
    experiments = ["level-validation", "strassen-speedup", "strassen-memory"]
    return finish(body, ex.drawn(drawn), [*env_keys(drawn), *keys], experiments,
                  "Li's Strassen-RUM (thesis, 2023): speed-ups on A100, V100, P100 and peak memory at level 4, "
                  "beside the toolkit's H100")
