"""The front door's figure, drawn from stored ``frontdoor`` rows only: which method wins where, by shape and
accuracy (``frontdoor-choice``).

One panel per accuracy (and per environment and power regime stored): x is the shape, square products N x N x N
on a log axis, then the tall-skinny and rectangular products as labelled categories past a divider; y is each
call's speed-up over the library GEMM as called (the dotted line at 1). Every candidate timed beside the front
door is a marker coloured by its family; the front door's own call is a large star filled with the colour of the
family it ran, so the star's colour says what it chose and its height how that call did against the others.
Points the front door refused are named under the figure, as are panels of a single point (left out).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

from ..core.database import ResultsDB
from ..core.plotting import (
    SMALL,
    finish,
    log_axis,
    panel_devices,
    panel_grid,
    panel_title,
    regime_label,
    series_styles,
    shared_legend,
)
from ..core.registry import figure
from .points import Shape, accuracy_order, shape_order, shape_text
from .rows import EXPERIMENT, FRONTDOOR, LIBRARY, FrontdoorRow, frontdoor_rows

NAME = "frontdoor-choice"
#: Method families in the order of their colours and legend entries.
FAMILIES = ("gemm", "strassen", "ozaki2", "ozaki", "splitk", "exact")
FAMILY_NAMES = {"gemm": "library GEMM", "strassen": "Strassen", "ozaki2": "Ozaki II", "ozaki": "Ozaki I",
                "splitk": "split-K", "exact": "exact product"}
#: A log y axis where the speed-ups drawn span more than this factor, else a linear one.
LOG_SPAN = 4.0
#: Candidates of different families stand this far apart around their shape's x (log2 units), so that two of
#: equal speed stay in sight side by side.
DODGE = 0.14
Panel = tuple[str, str, str, list[FrontdoorRow]]


def family_name(family: str) -> str:
    return FAMILY_NAMES.get(family, family)


def positions(shapes: Sequence[Shape]) -> tuple[dict[Shape, float], float | None]:
    """x of each shape: log2 N for a square, then one unit apart past the largest square for the rest, in
    :func:`~experiments.frontdoor.points.shape_order`; and the x of the divider between them (None without both)."""
    ordered = sorted(set(shapes), key=shape_order)
    square = [s for s in ordered if s[0] == s[1] == s[2]]
    others = [s for s in ordered if s not in square]
    x = {s: math.log2(s[0]) for s in square}
    start = max(x.values(), default=-1.0) + 1.0
    x.update({s: start + i for i, s in enumerate(others)})
    return x, (start - 0.5 if square and others else None)


def tick_label(shape: Shape, math: bool = True) -> str:
    """N for a square, else m×k×n with powers of two as 2^e (typeset where ``math``)."""
    m, k, n = shape
    text = str(n) if m == k == n else shape_text(shape).replace(" x ", "×")
    return re.sub(r"2\^(\d+)", r"$2^{\1}$", text) if math else text


def panels(db: ResultsDB) -> tuple[list[Panel], list[str]]:
    """(environment, regime, accuracy, rows) per panel, of every environment, and what was left out: panels of
    a single point, and points the front door refused."""
    found, left = [], []
    for key in db.env_keys():
        rows = frontdoor_rows(db, key)
        left += [f"{tick_label(r.shape, math=False)} at {r.accuracy} (refused: {r.refused.get(FRONTDOOR, '')[:90]})"
                 for r in rows if r.was_refused]
        drawn = [r for r in rows if r.method != LIBRARY and r.ratio_as_called is not None]
        for regime, acc in sorted({(r.regime, r.accuracy) for r in drawn}, key=lambda p: (p[0], accuracy_order(p[1]))):
            mine = [r for r in drawn if (r.regime, r.accuracy) == (regime, acc)]
            if len(mine) < 2:
                left.append(f"accuracy {acc} ({regime}): one call drawn, no panel")
                continue
            found.append((key, regime, acc, mine))
    return found, left


def shape_axis(ax: Any, x: dict[Shape, float], divider: float | None) -> None:
    """Ticks at every shape, labelled upright (squares by N, the others as m×k×n), a divider before the
    categories."""
    ticks = sorted(x.items(), key=lambda item: item[1])
    ax.xaxis.set_major_locator(FixedLocator([v for _, v in ticks]))
    ax.xaxis.set_major_formatter(FixedFormatter([tick_label(s) for s, _ in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.tick_params(axis="x", labelrotation=90, labelsize=SMALL)
    ax.set_xlim(ticks[0][1] - 0.6, ticks[-1][1] + 0.6)
    if divider is not None:
        ax.axvline(divider, color="0.6", lw=0.8)


def shape_label(ax: Any, divider: float | None) -> None:
    ax.set_xlabel("square N x N x N (log scale)" + (" | then m×k×n" if divider is not None else ""), fontsize=SMALL + 1)


def draw_panel(ax: Any, rows: Sequence[FrontdoorRow], x: dict[Shape, float], styles: dict) -> None:
    """The candidates' markers by family, side by side around their shape and drawn over the front door's stars
    (by the family it ran), so that a candidate as fast as the front door, or as another, stays in sight."""
    ax.axhline(1.0, color="black", lw=0.8, ls=":", label="library GEMM as called (= 1)")
    families = [f for f in styles if any(r.family == f and r.method != FRONTDOOR for r in rows)]
    for i, family in enumerate(families):
        mine = sorted((r for r in rows if r.family == family and r.method != FRONTDOOR), key=lambda r: x[r.shape])
        dodge = (i - (len(families) - 1) / 2) * DODGE
        ax.plot([x[r.shape] + dodge for r in mine], [r.ratio_as_called for r in mine], linestyle="none", ms=6,
                marker=styles[family]["marker"], color=styles[family]["color"], mec="white", mew=0.5, zorder=5,
                label=f"{family_name(family)} (candidate)")
    for family in [f for f in styles if any(r.family == f and r.method == FRONTDOOR for r in rows)]:
        mine = sorted((r for r in rows if r.family == family and r.method == FRONTDOOR), key=lambda r: x[r.shape])
        ax.plot([x[r.shape] for r in mine], [r.ratio_as_called for r in mine], linestyle="none", marker="*", ms=14,
                color=styles[family]["color"], mec="black", mew=0.7, zorder=3,
                label=f"front door, running {family_name(family)}")
    ys = [r.ratio_as_called for r in rows] + [1.0]
    if max(ys) / min(ys) > LOG_SPAN:
        log_axis(ax, "y")
    ax.set_ylabel("speed-up over the library\nGEMM as called", fontsize=SMALL + 1)
    ax.grid(True, alpha=0.3)


def title_of(db: ResultsDB, keys: Sequence[str]) -> str:
    """The figure's title, naming each device drawn and the power regime of its stored run."""
    runs = [f"{db.environment(k).get('device', k)} ({regime_label(db, k, [EXPERIMENT])})" for k in keys]
    return ("Which method wins where: gpu.matmul as called and its candidates against the library GEMM, by shape "
            "and accuracy, on " + "; ".join(runs))


@figure(NAME, "Speed-up over the library GEMM as called of the front door (gpu.matmul) and of each candidate timed "
              "beside it, by shape, one panel per accuracy; the front door's choice highlighted, colours by family",
        experiments=(EXPERIMENT,))
def render_choice(db: ResultsDB) -> Figure | None:
    found, left = panels(db)
    if not found:
        return None
    keys = list(dict.fromkeys(p[0] for p in found))
    devices = panel_devices(db, keys, [EXPERIMENT])
    regimes = {p[1] for p in found}
    families = {r.family for p in found for r in p[3]}
    styles = series_styles([f for f in FAMILIES if f in families] + sorted(families - set(FAMILIES)))
    where = {key: positions([r.shape for p in found if p[0] == key for r in p[3]]) for key in keys}
    body, axes = panel_grid(len(found), panel_width=9.0, panel_height=3.4, max_cols=1)
    for i, (ax, (key, regime, acc, rows)) in enumerate(zip(axes, found)):
        x, divider = where[key]
        draw_panel(ax, rows, x, styles)
        shape_axis(ax, x, divider)
        if i + 1 == len(found) or found[i + 1][0] != key:      # under each environment's last panel
            shape_label(ax, divider)
        ax.set_title(panel_title(f"accuracy {acc}", ", ".join(p for p in (devices[key],
                                 regime if len(regimes) > 1 else "") if p)), fontsize=SMALL + 2)
    shared_legend(body, axes)
    note = ("Not drawn: " + "; ".join(left)) if left else None
    return finish(body, db, keys, [EXPERIMENT], title_of(db, keys), note=note)
