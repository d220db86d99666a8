"""Hattori's split-K, Sakai's decomposition and Nanai's Ozaki numbers drawn on the axes of ours.

As in :mod:`experiments.papers.figures_strassen`: a paper's number is a black-edged marker, a band (a
range) or a segment over the sizes it covers; ours are lines; legends sit beside the panels and the
footer names every device drawn.
"""

from __future__ import annotations

import math
from typing import Any

from matplotlib.figure import Figure

from modeling import published as pub

from ..core.csvio import ExportRow
from ..core.plotting import (
    SMALL,
    finish,
    log_axis,
    panel_grid,
    series_styles,
    shared_legend,
    side_legend,
    size_axis,
)
from ..splitk.figures import k_axis
from .exports import Exports, env_keys
from .figures_strassen import PAPER_MARK
from .methods import SPLITK, ozaki_errors, segmented

SHORT = {"hattori2016": "Hattori & Fujimoto 2016", "sakai2016": "Sakai et al. 2016",
         "nanai2021": "Nanai & Fujimoto 2021"}
PAPER = "0.15"     # the colour of a paper's bands and segments


#: The paper's own name of a device the hardware table names shorter.
NAMED = {("hattori2016", "K20"): "Tesla K20c"}


def paper_key(ex: Exports, row: Any) -> str:
    name = NAMED.get((row.paper, row.device), row.device)
    return ex.add_paper(f"{row.paper}:{row.device}", name, SHORT[row.paper], row.library)


def _reference(ax: Any, label: str) -> None:
    ax.axhline(1.0, color="black", lw=0.8, ls=":", label=label)
    ax.grid(True, alpha=0.3)


def hattori_figure(ex: Exports) -> Figure:
    """Speed-up over cuBLAS against k at m = n = 16 and 32: ours per mode, the paper's statement over its k."""
    rows = [r for r in ex.rows("h100-splitk", "splitk")
            if r.method in SPLITK and r.params["k"] & (r.params["k"] - 1) == 0]
    styles = series_styles(SPLITK)
    published = pub.load().splitk
    body, axes = panel_grid(len(published), panel_width=4.8, panel_height=3.4)
    drawn: list[ExportRow] = []
    for ax, row in zip(axes, published):
        _reference(ax, "cuBLAS DGEMM (same group)")
        mine = [r for r in rows if (r.params["m"], r.params["n"]) == (row.m, row.n)]
        for method, what in SPLITK.items():
            pts = sorted((r.params["k"], r.meta["speedup"]) for r in mine if r.method == method)
            ax.plot(*zip(*pts), "-", ms=4, label=f"H100 (ours) {method}: {what}", **styles[method])
        said = f"up to {row.speedup:g}x at m = n = {row.m}" if row.statistic == "max" else \
            f"above {row.speedup:g}x at every k, m = n = {row.m}"
        ax.axvspan(*row.k, color=PAPER, alpha=0.08, label="the paper's k range")
        ax.plot(row.k, [row.speedup] * 2, color=PAPER, lw=3, label=f"K20c (paper): {said}")
        if row.strict:
            ax.plot([(row.k[0] * row.k[1]) ** 0.5], [row.speedup], marker="^", color=PAPER, ms=9, ls="none")
        k_axis(ax, [r.params["k"] for r in mine])
        ax.set_ylabel("speed-up over cuBLAS")
        ax.set_title(f"m = n = {row.m}", fontsize=SMALL + 1)
        drawn += mine
    shared_legend(body, axes, ncol=2)
    keys = [*env_keys(drawn), *dict.fromkeys(paper_key(ex, r) for r in published)]
    return finish(body, ex.drawn(drawn), keys, ["splitk"], "Split-K over cuBLAS DGEMM for tiny outputs: Hattori & "
                  "Fujimoto's K20c (FP64) beside the toolkit's H100, over the paper's inner dimensions and beyond")


def _largest(ax: Any, ex: Exports, rows: list[ExportRow], keys: list[str]) -> None:
    """The paper's largest N per method as bars; ours: the largest N run, as hatched bars."""
    published = [d for d in pub.load().decomposition if d.quantity == "largest_n"]
    names = {"unsplit": "whole", "1d": "1d", "2d": "2d"}
    xs = range(len(published))
    ax.bar([x - 0.2 for x in xs], [d.value for d in published], 0.4, color=PAPER, alpha=0.6,
           label="K40 (paper): largest N")
    ran = [max(r.params["n"] for r in rows if r.method == names[d.method]) for d in published]
    ax.bar([x + 0.2 for x in xs], ran, 0.4, color="white", edgecolor="tab:blue", hatch="//",
           label="H100 (ours): largest N run (the sweep's choice, not a limit)")
    for x, d, n in zip(xs, published, ran):
        ax.annotate(f"{d.value:,.0f}\n({d.memory:g} GiB)", (x - 0.2, d.value), ha="center", va="bottom",
                    fontsize=SMALL)
        ax.annotate(f"{n:,}", (x + 0.2, n), ha="center", va="bottom", fontsize=SMALL)
    ax.set_xticks(list(xs), [{"unsplit": "unsplit", "1d": "1-D blocks", "2d": "2-D blocks"}[d.method]
                             for d in published])
    ax.set_yscale("log")
    ax.set_ylim(2e3, max(d.value for d in published) * 4)
    log_axis(ax)
    ax.set_ylabel("N")
    ax.set_title("largest N per decomposition", fontsize=SMALL + 1)
    keys += [paper_key(ex, d) for d in published]


def _translation(ax: Any, ex: Exports, rows: list[ExportRow], keys: list[str]) -> None:
    (row,) = [d for d in pub.load().decomposition if d.quantity == "translation_speed_loss"]
    ax.axhspan(100 * row.value, 100 * row.high, color=PAPER, alpha=0.3,
               label=f"K40 (paper), FP32, N not given: {100 * row.value:g}-{100 * row.high:g}%")
    styles = series_styles(["float32", "float64"])
    sizes = []
    for dtype in ("float32", "float64"):
        over = segmented(rows, dtype)["translated"]
        sizes += list(over)
        ax.plot(list(over), [100 * (1 - 1 / t) for t in over.values()], "-", label=f"H100 (ours), {dtype}",
                **styles[dtype])
    size_axis(ax, sizes)
    ax.set_ylim(0, 35)
    ax.set_ylabel("kernel speed lost, %")
    ax.set_title("index translation (the same kernel, one segment)", fontsize=SMALL + 1)
    keys.append(paper_key(ex, row))


def _two_d(ax: Any, ex: Exports, rows: list[ExportRow], keys: list[str]) -> None:
    (row,) = [d for d in pub.load().decomposition if d.quantity == "slowdown_2d_over_1d"]
    _reference(ax, "equal times")
    ax.axhline(1 + row.value, color=PAPER, lw=3, label=f"K40 (paper): 2-D up to {100 * row.value:g}% slower")
    styles = series_styles(["float32", "float64"])
    sizes = []
    for dtype in ("float32", "float64"):
        over = segmented(rows, dtype)
        sizes += list(over["2d"])
        ax.plot(list(over["2d"]), [over["2d"][n] / over["1d"][n] for n in over["2d"]], "-",
                label=f"H100 (ours), {dtype}, M = 4", **styles[dtype])
    size_axis(ax, sizes)
    ax.set_ylim(0.9, 1.35)
    ax.set_ylabel("2-D time over 1-D time")
    ax.set_title("2-D against 1-D blocks, host to host", fontsize=SMALL + 1)
    keys.append(paper_key(ex, row))


def sakai_figure(ex: Exports) -> Figure:
    """Largest N, index-translation cost, and 2-D against 1-D: Sakai's K40 beside the H100."""
    rows = ex.rows("h100-segmented", "segmented")
    body, axes = panel_grid(3, max_cols=1, panel_width=7.5, panel_height=2.8)
    keys: list[str] = []
    for ax, draw in zip(axes, (_largest, _translation, _two_d)):
        draw(ax, ex, rows, keys)
        ax.grid(True, alpha=0.3)
        side_legend(ax)
    return finish(body, ex.drawn(rows), [*env_keys(rows), *dict.fromkeys(keys)], ["segmented"],
                  "Data decomposition: Sakai, Ino & Hagihara's K40 (FP32) beside the toolkit's segmented kernel "
                  "on the H100")


def _digits(ax: Any, ex: Exports, rows: list[ExportRow], n: int, keys: list[str]) -> None:
    published = [o for o in pub.load().ozaki if o.quantity == "digits_gained_over_sgemm"]
    splits = [o.splits for o in published]
    ax.vlines(splits, [o.value for o in published], [o.high for o in published], color=PAPER, lw=6, alpha=0.5,
              label=f"RTX 2080 SUPER (paper): range over N = 1024-4096, phi = {published[0].phi:g}")
    for phi, style in zip((0.1, 1.0, 2.0), series_styles(["0.1", "1", "2"]).values()):
        errors = ozaki_errors(rows, n, phi)
        gained = [errors["fp32"] / errors[f"ozaki-fp32r-{s}"] for s in splits]
        ax.plot(splits, [math.log10(g) for g in gained], "-", label=f"H100 (ours), N = {n}, "
                f"phi = {phi:g}", **style)
    ax.axhline(0, color="black", lw=0.8, ls=":", label="SGEMM")
    ax.set_xticks(splits)
    ax.set_xlabel("splits")
    ax.set_ylabel("digits gained over SGEMM")
    ax.set_title("accuracy: max relative error, SGEMM over the scheme's, in decimal digits", fontsize=SMALL + 1)
    keys.append(paper_key(ex, published[0]))


def _speed(ax: Any, ex: Exports, rows: list[ExportRow], n: int, keys: list[str]) -> None:
    published = [o for o in pub.load().ozaki if o.quantity == "speedup_over_dgemm"]
    sizes = sorted({o.sizes[0] for o in published})
    styles = series_styles([*(str(s) for s in sizes), "ours"])
    _reference(ax, "DGEMM")
    for size in sizes:
        mine = sorted((o.splits, o.value) for o in published if o.sizes[0] == size)
        ax.plot(*zip(*mine), label=f"RTX 2080 SUPER (paper), N = {size}", **{**styles[str(size)], **PAPER_MARK,
                                                                               "markersize": 9})
    ours = sorted((r.params["slices"], r.meta["speedup_vs_dgemm"]) for r in rows
                  if r.experiment == "ozaki-time" and r.params["format"] == "fp32r" and r.params["n"] == n
                  and r.method.startswith("ozaki-fp32r-") and r.params["slices"] <= 6)
    ax.plot(*zip(*ours), "-", label=f"H100 (ours), N = {n}", **styles["ours"])
    log_axis(ax)
    ax.set_xticks([s for s, _ in ours])
    ax.set_xlabel("splits")
    ax.set_ylabel("speed-up over DGEMM")
    ax.set_title("speed: FP64 at 1/32 of FP32 (paper) against one rate (H100)", fontsize=SMALL + 1)
    keys.append(paper_key(ex, published[0]))


def nanai_figure(ex: Exports, n: int = 4096) -> Figure:
    """Digits gained over SGEMM and speed-up over DGEMM against splits: Nanai's RTX 2080 SUPER beside the H100."""
    rows = ex.rows("h100-ozaki")
    body, axes = panel_grid(2, max_cols=1, panel_width=7.5, panel_height=3.0)
    keys: list[str] = []
    for ax, draw in zip(axes, (_digits, _speed)):
        draw(ax, ex, rows, n, keys)
        ax.grid(True, alpha=0.3)
        side_legend(ax)
    drawn = [r for r in rows if r.params.get("n") == n and (r.method == "fp32" or "fp32r" in r.method)]
    return finish(body, ex.drawn(drawn), [*env_keys(drawn), *dict.fromkeys(keys)], ["ozaki-error", "ozaki-time"],
                  "Ozaki scheme with FP32 splits: Nanai & Fujimoto's RTX 2080 SUPER beside the toolkit's H100")
