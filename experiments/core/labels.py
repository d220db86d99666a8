"""Figure helpers that keep every series and every label in sight: series whose data coincide are
drawn once under a joint name (``rum = rum2``), and point labels are moved apart so that none covers
another.

Drawing a second series exactly on top of the first hides it: :func:`merge_coincident` names the
coincident series together instead. Labels beside points collide where points crowd:
:func:`point_label` marks an annotation as movable and :func:`place_point_labels` moves each, once
the layout is fixed, to the first of a few offsets where it overlaps no label already placed nor a
marker, lies no nearer another marker than its own point, and stays inside its panel, with a thin leader to its
point (matplotlib alone; no layout package).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

#: ``gid`` of a point label that :func:`place_point_labels` may move.
POINT_LABEL = "point-label"
#: Directions a label may lie from its point, in the order tried: right, left, above, below, diagonals.
DIRECTIONS = ((1, 0.5), (1, -0.75), (-1, 0.5), (-1, -0.75), (0, 1), (0, -1), (1, 1), (1, -1), (-1, 1), (-1, -1),
              (1, 0), (-1, 0))


def _offset(dx: float, dy: float) -> tuple[float, float, str, str]:
    """An offset (points) with the alignment that keeps the text on that side of its point."""
    return (dx, dy, "left" if dx > 0 else "right" if dx < 0 else "center",
            "bottom" if dy > 0 else "top" if dy < 0 else "center")


#: Offsets tried in turn: every direction at 4 points, then further out (a leader joins a far label to its point).
OFFSETS = tuple(_offset(r * ux, r * uy) for r in (4, 10, 18, 28, 40) for ux, uy in DIRECTIONS)
#: Pixels within which another marker makes a label ambiguous (:func:`place_point_labels`).
PAD = 16.0
#: Pixels within which another marker is taken as drawn at the label's own point (a hollow overlay, a tie).
SAME = 4.0
#: Pixels kept clear around a placed label: labels that merely touch read as one ("ozaki2c 3M autoozaki2c 2M auto").
LABEL_GAP = 4.0
#: A thin leader from a label to its point: where labels crowd, which point each names stays plain.
LEADER = {"arrowstyle": "-", "color": "0.55", "lw": 0.4, "shrinkA": 0, "shrinkB": 2}


def merge_coincident(series: Mapping[str, Sequence[Any]], rtol: float = 0.0) -> dict[str, Any]:
    """Series by name, those whose data agree within ``rtol`` (relative, at every value) joined under one
    name and drawn once, with the first one's data: an identical series drawn on top of another hides it.
    The joint name says how they agree: ``"rum = rum2"`` where every value is equal, ``"rum ≈ rum2"``
    where some differ (by less than ``rtol``)."""
    groups: list[list[str]] = []
    for name, data in series.items():
        values = np.asarray(data, dtype=float)
        for group in groups:
            first = np.asarray(series[group[0]], dtype=float)
            if first.shape == values.shape and np.allclose(values, first, rtol=rtol, atol=0.0, equal_nan=True):
                group.append(name)
                break
        else:
            groups.append([name])
    out = {}
    for group in groups:
        exact = all(np.array_equal(np.asarray(series[g], dtype=float), np.asarray(series[group[0]], dtype=float),
                                   equal_nan=True) for g in group)
        out[(" = " if exact else " ≈ ").join(group)] = series[group[0]]
    return out


def members(name: str) -> list[str]:
    """The series a :func:`merge_coincident` name joins (``"rum = rum2"``: rum and rum2)."""
    return [part for chunk in name.split(" = ") for part in chunk.split(" ≈ ")]


def point_label(ax: Any, text: str, xy: tuple[float, float], **kw: Any) -> Any:
    """An annotation beside the point ``xy`` that :func:`place_point_labels` may move (kept out of the
    layout, so that moving it changes nothing else)."""
    kw.setdefault("fontsize", 6)
    ann = ax.annotate(text, xy, xytext=OFFSETS[0][:2], textcoords="offset points", ha=OFFSETS[0][2],
                      va=OFFSETS[0][3], gid=POINT_LABEL, arrowprops=LEADER, **kw)
    ann.set_in_layout(False)
    return ann


def _overlap(a: Any, b: Any) -> float:
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def _marker_boxes(ax: Any) -> list[Any]:
    """The window extent of every marker the panel's data lines draw (a label should cover none)."""
    boxes = []
    for line in ax.get_lines():
        if line.get_transform() != ax.transData or line.get_marker() in (None, "None", "none", "", " "):
            continue
        half = line.get_markersize() * ax.figure.dpi / 72 / 2
        for x, y in ax.transData.transform(np.asarray(line.get_xydata(), dtype=float)):
            if np.isfinite(x) and np.isfinite(y):
                boxes.append(Bbox.from_extents(x - half, y - half, x + half, y + half))
    return boxes


def place_point_labels(fig: Figure) -> Figure:
    """Move every :func:`point_label` of ``fig`` to the first offset where it covers no label placed
    before it (in drawing order) and no marker, and stays inside its panel; where none is free, to the
    offset that covers least (another label weighs most, then leaving the panel, then a marker). Lays the
    figure out first (its
    layout is final: point labels are not part of it)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        placed: list[Any] = []
        markers = _marker_boxes(ax)
        centres = [m.get_points().mean(axis=0) for m in markers]
        for ann in [t for t in ax.texts if t.get_gid() == POINT_LABEL]:
            best, best_cost = OFFSETS[0], np.inf
            own = ax.transData.transform(ann.xy)
            far, near = _neighbours(centres, own)
            for offset in OFFSETS:
                _move(ann, offset)
                box = text_box(ann, renderer)
                outside = box.width * box.height - _overlap(box, ax.bbox)
                cost = (1000 * sum(_overlap(box, other) for other in placed) + 100 * outside
                        + sum(_overlap(box, m) for m in markers)
                        + box.width * box.height * _nearer_other(box, own, far, near))
                if cost < best_cost:
                    best, best_cost = offset, cost
                if cost < 1:
                    break
            _move(ann, best)
            placed.append(text_box(ann, renderer).padded(LABEL_GAP))
    return fig


def _neighbours(centres: list[Any], own: Any) -> tuple[list[Any], list[Any]]:
    """The marker centres other than the label's own point (within :data:`SAME` pixels of it), split by distance from
    the point: (more than two :data:`PAD` away, nearer), as :func:`_nearer_other` weighs them; once per label."""
    far, near = [], []
    for c in centres:
        d = np.hypot(*(c - own))
        if d > 2 * PAD:
            far.append(c)
        elif d > SAME:
            near.append(c)
    return far, near


def _nearer_other(box: Any, own: Any, far: list[Any], near: list[Any]) -> bool:
    """Whether another marker lies nearer the label than its point, or, for a marker more than two :data:`PAD` from
    the point (``far``), within :data:`PAD` pixels of it: the label would read as the other point's (weighed as
    covering its own area of a marker). A ``near`` neighbour counts only where it is nearer than the point itself:
    where points crowd, the label goes on the side away from them (at N = 32768 "fast-14 w1" had sat over level 0's
    fast-14, 31 pixels to its left)."""
    def gap(x: float, y: float) -> float:
        return float(np.hypot(max(box.x0 - x, 0.0, x - box.x1), max(box.y0 - y, 0.0, y - box.y1)))
    mine = gap(*own)
    return any(gap(*c) < max(PAD, mine - 1.0) for c in far) or any(gap(*c) < mine - 1.0 for c in near)


def text_box(ann: Any, renderer: Any) -> Any:
    """The window extent of an annotation's text alone (matplotlib's includes its leader)."""
    ann.update_positions(renderer)
    return Text.get_window_extent(ann, renderer)


def _move(ann: Any, offset: tuple[float, float, str, str]) -> None:
    dx, dy, ha, va = offset
    ann.xyann = (dx, dy)
    ann.set_horizontalalignment(ha)
    ann.set_verticalalignment(va)

