"""Launch geometry of a segmented product, and the checks of a list of tasks before any work.

A task (any object with ``.blocks``, ``.a``, ``.b``, ``.c``, as :class:`modeling.decomposition.Task`
gives them; gpu imports nothing from modeling) runs the thread blocks ``blocks = ((by0, by1),
(bx0, bx1))`` of the plain kernel and holds the segments ``a``, ``b``, ``c`` of A, B and C, each
``((row0, row1), (col0, col1))``; every interval is inclusive. :func:`launches` turns the tasks into
:class:`Launch` records (grid, block offsets, and per array the origin and width the ``translated``
accessor needs), after checking that

* the blocks lie in the N/T x N/T grid and the tasks cover every C tile exactly once (a tile run
  twice is written twice, a tile never run is never written);
* every segment lies in its N x N matrix and holds everything its task's blocks touch: the block
  rows of A across all of k, all of k of B's block columns, and the C tile(s) it writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Interval = tuple[int, int]


@dataclass(frozen=True)
class Segment:
    """A sub-rectangle of an N x N matrix: ``rows`` and ``cols`` inclusive, held packed row-major."""

    rows: Interval
    cols: Interval

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows[1] - self.rows[0] + 1, self.cols[1] - self.cols[0] + 1

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def slices(self) -> tuple[slice, slice]:
        """The segment as a NumPy index of its matrix."""
        return slice(self.rows[0], self.rows[1] + 1), slice(self.cols[0], self.cols[1] + 1)

    @property
    def origin(self) -> tuple[int, int, int]:
        """(ox, oy, U) of the ``translated`` accessor: first column, first row, width."""
        return self.cols[0], self.rows[0], self.shape[1]

    def holds(self, other: Segment) -> bool:
        return (self.rows[0] <= other.rows[0] and other.rows[1] <= self.rows[1]
                and self.cols[0] <= other.cols[0] and other.cols[1] <= self.cols[1])

    def text(self) -> str:
        return f"rows {self.rows[0]}..{self.rows[1]} x cols {self.cols[0]}..{self.cols[1]}"


@dataclass(frozen=True)
class Launch:
    """One kernel launch: ``grid`` (x: block columns, y: block rows) of ``tile x tile`` blocks, offset by
    (``by0``, ``bx0``), over N x N matrices, reading segments ``a`` and ``b`` and writing ``c``."""

    n: int
    tile: int
    by0: int
    bx0: int
    grid: tuple[int, int]
    a: Segment
    b: Segment
    c: Segment

    @property
    def block(self) -> tuple[int, int]:
        return self.tile, self.tile

    @property
    def rows(self) -> Interval:
        """Rows of C the launch computes."""
        return self.by0 * self.tile, (self.by0 + self.grid[1]) * self.tile - 1

    @property
    def cols(self) -> Interval:
        """Columns of C the launch computes."""
        return self.bx0 * self.tile, (self.bx0 + self.grid[0]) * self.tile - 1

    def needs(self) -> dict[str, Segment]:
        """What the launch's blocks touch, per array: A's rows across all k, B's columns across all k, C's tile."""
        everything = (0, self.n - 1)
        return {"A": Segment(self.rows, everything), "B": Segment(everything, self.cols),
                "C": Segment(self.rows, self.cols)}

    def arguments(self) -> tuple[int, ...]:
        """The kernel's integer arguments after the three pointers: n, by0, bx0, then (ox, oy, U) of A, B, C."""
        return (self.n, self.by0, self.bx0, *self.a.origin, *self.b.origin, *self.c.origin)


def check_square(n_rows: int, n_cols: int, other: tuple[int, ...], tile: int) -> int:
    """N where A (``n_rows x n_cols``) and B (``other``) are square, equal, and N a multiple of ``tile``."""
    if n_rows != n_cols or tuple(other) != (n_rows, n_cols):
        raise ValueError(f"the plain kernel multiplies square matrices of one size; got A {n_rows} x {n_cols} and "
                         f"B {' x '.join(map(str, other))}")
    if n_rows < 1 or n_rows % tile:
        pad = max(tile, -(-n_rows // tile) * tile)
        raise ValueError(f"N = {n_rows} is not a positive multiple of the tile {tile}: the kernel covers whole "
                         f"tiles; pad to {pad}")
    return n_rows


def whole_launch(n: int, tile: int) -> Launch:
    """All blocks in one launch, every array one segment: the whole matrix."""
    everything = Segment((0, n - 1), (0, n - 1))
    return Launch(n, tile, 0, 0, (n // tile, n // tile), everything, everything, everything)


def _interval(value: Any, what: str) -> Interval:
    try:
        lo, hi = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be an inclusive interval (lo, hi) of integers, got {value!r}") from None
    if lo > hi:
        raise ValueError(f"{what} = ({lo}, {hi}) runs backwards")
    return lo, hi


def _segment(value: Any, what: str, n: int) -> Segment:
    try:
        rows, cols = value
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be ((row0, row1), (col0, col1)), got {value!r}") from None
    seg = Segment(_interval(rows, f"{what} rows"), _interval(cols, f"{what} cols"))
    if seg.rows[0] < 0 or seg.cols[0] < 0 or seg.rows[1] >= n or seg.cols[1] >= n:
        raise ValueError(f"{what} ({seg.text()}) leaves the {n} x {n} matrix")
    return seg


def launch_of(task: Any, n: int, tile: int, index: int = 0) -> Launch:
    """The launch of one task, its blocks in the grid and its segments holding what they touch; ValueError
    naming task ``index`` otherwise."""
    blocks = n // tile
    try:
        by, bx = task.blocks
        segments = task.a, task.b, task.c
    except (AttributeError, TypeError, ValueError):
        raise TypeError(f"task {index} is a {type(task).__name__}; a task has .blocks ((by0, by1), (bx0, bx1)) "
                        "and segments .a, .b, .c ((row0, row1), (col0, col1))") from None
    (by0, by1), (bx0, bx1) = _interval(by, f"task {index} block rows"), _interval(bx, f"task {index} block cols")
    if by0 < 0 or bx0 < 0 or by1 >= blocks or bx1 >= blocks:
        raise ValueError(f"task {index} runs blocks ({by0}..{by1}, {bx0}..{bx1}) outside the {blocks} x {blocks} "
                         f"grid of N = {n} in tiles of {tile}")
    a, b, c = (_segment(s, f"task {index}'s {x} segment", n) for s, x in zip(segments, "ABC"))
    launch = Launch(n, tile, by0, bx0, (bx1 - bx0 + 1, by1 - by0 + 1), a, b, c)
    for name, need in launch.needs().items():
        held = getattr(launch, name.lower())
        if not held.holds(need):
            raise ValueError(f"task {index}'s {name} segment ({held.text()}) does not hold {need.text()}, which its "
                             f"blocks ({by0}..{by1}, {bx0}..{bx1}) touch; estimate the ranges from the kernel's "
                             "index maps (modeling.decomposition.plan_segments)")
    return launch


def launches(tasks: Sequence[Any], n: int, tile: int) -> tuple[Launch, ...]:
    """The tasks as launches, after every check (see the module notes)."""
    tasks = list(tasks)
    if not tasks:
        raise ValueError("no tasks: a segmented product needs at least one task covering C")
    found = tuple(launch_of(t, n, tile, i) for i, t in enumerate(tasks))
    owner = np.full((n // tile, n // tile), -1)
    for i, ln in enumerate(found):
        rows, cols = slice(ln.by0, ln.by0 + ln.grid[1]), slice(ln.bx0, ln.bx0 + ln.grid[0])
        taken = owner[rows, cols]
        if (taken >= 0).any():
            by, bx = (int(v[0]) for v in np.nonzero(taken >= 0))
            raise ValueError(f"tasks {int(taken[by, bx])} and {i} both run C tile ({ln.by0 + by}, {ln.bx0 + bx}): "
                             "each tile of C must be in exactly one task")
        owner[rows, cols] = i
    if (owner < 0).any():
        by, bx = (int(v[0]) for v in np.nonzero(owner < 0))
        raise ValueError(f"no task runs C tile ({by}, {bx}) of the {n // tile} x {n // tile} grid: the tasks must "
                         "cover C")
    return found


def buffer_elements(found: Sequence[Launch]) -> tuple[int, int, int]:
    """Elements of the A, B and C buffers that hold every launch's segments (the largest of each)."""
    return tuple(max(getattr(ln, x).size for ln in found) for x in "abc")
