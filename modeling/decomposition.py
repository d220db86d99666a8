"""Segment sizes and plans of a matrix product cut into blocks (Sakai, Ino & Hagihara 2016).

With M segments per matrix and N x N operands (the paper's 1-D and 2-D blocks):

    1-D blocks (rows of A and C; B whole):  itemsize N^2 (M + 2) / M
    2-D blocks (A, B and C all tiled):      itemsize N^2 (2 sqrt(M) + 1) / M

A 1-D segment never drops below all of B, so the largest product stays bound
by one GPU's memory; a 2-D segment shrinks with M, so only the host bounds it.
The paper used FP32 (itemsize 4), the default here.

:func:`plan_segments` lists the tasks of a plan and what each reads and writes. The ranges come
from the plain kernel's affine index maps (:func:`matmul_maps`) through the access-range estimator
(:mod:`modeling.access`), so a plan and the estimate read the same data.

Published sizes (K40: 12 GB; buffers of 6 GB, half a K40; host 512 GB), against :func:`largest_n`.
The spec's "GB" are GiB: 12 N^2 bytes is 11.15, 16.56 and 482.03 GiB for the three sizes below.

* Unsplit, 31,584 (M = 1: A, B and C on one GPU). 12e9 bytes gives 31,622, or 31,616 in whole
  32-element tiles, one tile above the paper; 31,584 needs a budget in [11,970,588,672,
  11,994,857,472) bytes with ``multiple=32`` (12e9 less 5 to 29 MB). The paper does not say what
  it left free, so the formula bounds the figure but does not reproduce it from a stated budget.
* 1-D, 38,496. A 6e9 buffer gives 38,729 as M grows (38,720 in whole tiles). With ``multiple=32``
  exactly 38,496 for M from 165 to 190; never exactly with ``multiple=1`` (M = 164 gives 38,495 and
  M = 165 gives 38,497). The paper does not state M, so this reproduces it up to that choice.
* 2-D, 207,680: bound by the host holding A, B and C (M = 1 against the host memory). 512 GiB gives
  214,039 (214,016 in whole tiles); the paper's run used 482 GiB of it, and the remaining 30 GiB
  (OS, buffers) are not stated, so the figure is not reproduced. Read as 512e9 bytes, the bound
  is 206,559, below the published size: the host was 512 GiB. Its segments fit a 6e9 buffer from
  M = 59^2 = 3,481 (58^2 allows 207,673 only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .access import AffineMap, Interval, dimension_ranges

FP32 = 4
#: The plain kernel's ids: block row and column, thread row and column in the tile, and the k loop.
MATMUL_IDS = ("by", "bx", "ty", "tx", "k")


def _segments(m: int, square: bool = False) -> None:
    if m < 1:
        raise ValueError(f"the number of segments must be at least 1, got {m}")
    if square and math.isqrt(m) ** 2 != m:
        raise ValueError(f"2-D blocks need a perfect square number of segments, got {m}")


def segment_bytes_1d(n: int, m: int, itemsize: int = FP32) -> float:
    """Bytes one task holds with 1-D blocks: a row block of A and of C, and all of B."""
    _segments(m)
    return itemsize * n * n * (m + 2) / m


def segment_bytes_2d(n: int, m: int, itemsize: int = FP32) -> float:
    """Bytes one task holds with 2-D blocks: sqrt(M) tiles of A and of B, one tile of C."""
    _segments(m, square=True)
    return itemsize * n * n * (2 * math.isqrt(m) + 1) / m


def largest_n(memory_bytes: float, m: int, two_d: bool = True, itemsize: int = FP32, multiple: int = 1) -> int:
    """Largest N, a multiple of ``multiple`` (the kernel's tile), whose segment fits in ``memory_bytes``
    (a buffer, e.g. half a GPU's memory; or with M = 1, the whole A, B and C in one memory)."""
    if memory_bytes <= 0:
        raise ValueError(f"memory must be positive, got {memory_bytes}")
    if multiple < 1:
        raise ValueError(f"N is rounded down to a multiple of a positive tile, got multiple={multiple}")
    per_n2 = (segment_bytes_2d if two_d else segment_bytes_1d)(1, m, itemsize)
    n = math.isqrt(int(memory_bytes / per_n2))
    while per_n2 * (n + 1) ** 2 <= memory_bytes:
        n += 1
    while n and per_n2 * n * n > memory_bytes:
        n -= 1
    return n - n % multiple


def matmul_maps(n: int, tile: int) -> dict[str, AffineMap]:
    """The index maps of the plain kernel ``C[row, col] = sum_k A[row, k] B[k, col]`` on row-major
    N x N matrices, with ``row = by T + ty`` and ``col = bx T + tx``, over the whole grid.

    Flat indices: A at ``row N + k``, B at ``k N + col``, C at ``row N + col``; ids :data:`MATMUL_IDS`,
    the k loop counted as one more id. Analyse a task with ``amap.over(by=..., bx=...)``.
    """
    _tiles(n, tile)
    blocks = (0, n // tile - 1)
    ranges = (blocks, blocks, (0, tile - 1), (0, tile - 1), (0, n - 1))
    coefficients = {"A": (tile * n, 0, n, 0, 1), "B": (0, tile, 0, 1, n), "C": (tile * n, tile, n, 1, 0)}
    return {name: AffineMap(0, c, ranges, MATMUL_IDS) for name, c in coefficients.items()}


@dataclass(frozen=True)
class Task:
    """One task: the thread blocks it runs and the element ranges of A, B and C it needs.

    Block ranges are ``(by, bx)`` ids; every matrix range is ``(rows, cols)``, inclusive.
    """

    blocks: tuple[Interval, Interval]
    a: tuple[Interval, Interval]
    b: tuple[Interval, Interval]
    c: tuple[Interval, Interval]
    itemsize: int = FP32

    @property
    def bytes(self) -> int:
        """Bytes of the three segments the task holds."""
        return self.itemsize * sum((r[1] - r[0] + 1) * (c[1] - c[0] + 1) for r, c in (self.a, self.b, self.c))


@dataclass(frozen=True)
class SegmentPlan:
    """The M tasks of C = A B on N x N matrices, with 1-D or 2-D blocks."""

    n: int
    m: int
    two_d: bool
    tile: int
    itemsize: int
    tasks: tuple[Task, ...]

    @property
    def max_bytes(self) -> int:
        """Bytes of the largest task: what one buffer must hold."""
        return max(t.bytes for t in self.tasks)

    @property
    def formula_bytes(self) -> float:
        """The spec's segment bytes; the tasks' mean always, each task's when the tile rows split evenly."""
        return (segment_bytes_2d if self.two_d else segment_bytes_1d)(self.n, self.m, self.itemsize)


def _tiles(n: int, tile: int) -> None:
    if tile < 1:
        raise ValueError(f"the tile side must be positive, got {tile}")
    if n < 1 or n % tile:
        raise ValueError(f"N = {n} is not a positive multiple of the tile {tile}: the plain kernel covers "
                         f"whole tiles; pad N to {max(tile, -(-n // tile) * tile)} or pick a tile dividing N")


def _split(count: int, parts: int) -> list[Interval]:
    """``count`` block ids cut into ``parts`` contiguous runs whose lengths differ by at most one."""
    return [(j * count // parts, (j + 1) * count // parts - 1) for j in range(parts)]


def _rows_cols(amap: AffineMap, n: int) -> tuple[Interval, Interval]:
    cols, rows = dimension_ranges(amap, (n, n))
    return rows, cols


def plan_segments(n: int, m: int, two_d: bool = True, tile: int = 32, itemsize: int = FP32) -> SegmentPlan:
    """The tasks of C = A B cut into M segments per matrix.

    1-D: task j runs block rows ``j`` of M (all block columns) and holds rows of A and C and all of B.
    2-D: M = s^2 tasks, task (i, j) runs C tile (i, j) and holds row panel i of A and column panel j of B.
    Block rows and columns are split as evenly as whole tiles allow; ranges are estimated from
    :func:`matmul_maps`. The default tile of 32 is a guess: the paper's sizes are all multiples of 32.
    """
    _segments(m, square=two_d)
    _tiles(n, tile)
    if itemsize < 1:
        raise ValueError(f"itemsize must be a positive number of bytes, got {itemsize}")
    blocks = n // tile
    side = math.isqrt(m) if two_d else m
    if side > blocks:
        what = f"sqrt(M) = {side} tile rows and columns" if two_d else f"M = {m} tile rows"
        raise ValueError(f"{what} do not fit N = {n} with tile {tile} ({blocks} per side); "
                         f"use fewer segments or a smaller tile")
    maps = matmul_maps(n, tile)
    row_runs = _split(blocks, side)
    col_runs = _split(blocks, side) if two_d else [(0, blocks - 1)]
    tasks = []
    for by in row_runs:
        for bx in col_runs:
            ranges = {name: _rows_cols(amap.over(by=by, bx=bx), n) for name, amap in maps.items()}
            tasks.append(Task((by, bx), ranges["A"], ranges["B"], ranges["C"], itemsize))
    return SegmentPlan(n, m, two_d, tile, itemsize, tuple(tasks))
