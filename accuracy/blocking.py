"""The memory plan of :func:`accuracy.reference.exact_matmul`: blocks of A's rows and B's columns that fit.

The exact product splits A's rows and B's columns into integer slices (:mod:`accuracy.slicing`): 8 bytes per
entry and slice, with the split's working copies on top, and sums the slice products in int64 limbs per
output tile (:mod:`accuracy.limbs`). On a large operand that is many times the operand's size (B of
32768 x 32768 took more than the 80 GB an H200 had free beside a caller's 52 GB), so the product runs in
blocks: A's rows in blocks of ``rows`` (A is split once per block), and for each, B's columns in blocks of
``cols`` (split once per pair of blocks), chosen before any work so that the peak of the call, by the
model below, stays within the memory that is free. Every row of A and column of B is split exactly as
without blocks (a row's digits depend on that row alone, and the digit width is chosen from all of them),
so the result is bitwise the same; it is correctly rounded anyway, and the exact value is unique.

The model, in bytes, per entry of the part it works on (tracemalloc's peaks on NumPy, with some room;
``tests/accuracy/test_reference_memory.py`` checks the peak against it), within a budget of :data:`SHARE` of
the free memory that the device can give as one block (:func:`one_block`):

* the exponent spans that choose the digit width (:func:`accuracy.slicing.row_spans`): :data:`SPANS` an
  entry, read in chunks of rows before anything else;
* splitting r rows of k entries into S slices: 8 S r k kept, and :data:`SPLIT` r k while it runs
  (remainders, scaled values, digits); a zeroed copy of the rows where some of them hold NaN or infinity;
* one output tile of T entries with L limbs: (:data:`TILE_PER_LIMB` L + :data:`TILE`) T (the limbs, the GEMM
  result and its int64 copy, the carries and the rounding);
* the exact IEEE values of rows and columns holding NaN or infinity (:mod:`accuracy.special`):
  :data:`IEEE_OPERAND` per entry of the operands' parts and :data:`IEEE_OUTPUT` per output entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu.backend import Array, Backend, MemoryPlanError
from gpu.backend.checks import gib

from .slicing import row_spans

#: Bytes per entry of :func:`accuracy.slicing.row_spans` at its peak (41 measured).
SPANS = 48
#: Bytes per entry of a split at its peak beyond the slices it keeps (42 measured).
SPLIT = 48
#: Bytes per output entry of a tile: per limb (the limbs and their nonzero flags: 9 measured), and besides.
TILE_PER_LIMB, TILE = 10, 160
#: Bytes of :func:`accuracy.special.ieee_product` per operand entry (indicators and their float64 copies)
#: and per output entry (the counts and their sums).
IEEE_OPERAND, IEEE_OUTPUT = 24, 96
#: Share of the free memory the plan may take (the rest: the library's own workspace, the pool's slack).
SHARE = 0.9
#: A block of B's columns at least this wide (or all of them) keeps the GEMMs efficient; A's rows are
#: blocked only below it.
MIN_COLS = 256


@dataclass(frozen=True)
class Shape:
    """What the model needs: the product's shape, the most slices of a row of A (``slices_a``) and of a
    column of B, the limbs of a tile, the longest tile by the limbs' cap, and whether lines hold NaN or
    infinity (zeroed copies of the blocks, and their IEEE values)."""

    m: int
    k: int
    n: int
    slices_a: int
    slices_b: int
    limbs: int
    max_tile: int
    nonfinite: bool = False


@dataclass(frozen=True)
class BlockPlan:
    """Rows of A and columns of B per block, output entries per tile, and the model's peak in bytes."""

    rows: int
    cols: int
    tile: int
    peak: int

    def row_blocks(self, m: int) -> list[slice]:
        return _cuts(m, self.rows)

    def col_blocks(self, n: int) -> list[slice]:
        return _cuts(n, self.cols)


def _cuts(total: int, step: int) -> list[slice]:
    return [slice(lo, min(lo + step, total)) for lo in range(0, total, step)]


def split_bytes(lines: int, k: int, slices: int) -> tuple[int, int]:
    """(kept, at the peak) bytes of splitting ``lines`` lines of k entries into ``slices`` slices."""
    kept = 8 * lines * (slices * k + 1)
    return kept, kept + SPLIT * lines * k


def ieee_bytes(rows: int, k: int, cols: int) -> int:
    return IEEE_OPERAND * (rows + cols) * k + IEEE_OUTPUT * rows * cols


def block_peak(s: Shape, rows: int, cols: int, tile: int) -> int:
    """The model's peak of one block of ``rows`` x ``cols`` with tiles of ``tile`` entries, C included: A's
    rows split (from a zeroed copy where lines hold NaN or infinity), then beside their slices B's columns
    split, then beside both the tiles, and the IEEE values."""
    copy_a, copy_b = (8 * rows * s.k, 8 * cols * s.k) if s.nonfinite else (0, 0)
    kept_a, split_a = split_bytes(rows, s.k, s.slices_a)
    kept_b, split_b = split_bytes(cols, s.k, s.slices_b)
    inner = max(copy_b + split_b, kept_b + (TILE_PER_LIMB * s.limbs + TILE) * tile,
                kept_b + (ieee_bytes(rows, s.k, cols) if s.nonfinite else 0))
    return 8 * s.m * s.n + max(copy_a + split_a, kept_a + inner)


def _tile(s: Shape, rows: int, cols: int, budget: int) -> int:
    """The longest tile of a ``rows`` x ``cols`` block within ``budget`` (0: none fits)."""
    fixed = block_peak(s, rows, cols, 0)
    room = (budget - fixed) // (TILE_PER_LIMB * s.limbs + TILE)
    return int(max(0, min(rows * cols, s.max_tile, room)))


def _widest(s: Shape, rows: int, budget: int) -> tuple[int, int]:
    """The most columns of B beside ``rows`` rows of A within ``budget``, and their tile (0, 0: none)."""
    lo, hi = 0, s.n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _tile(s, rows, mid, budget) >= 1 and block_peak(s, rows, mid, 1) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo, _tile(s, rows, lo, budget) if lo else 0


def plan_blocks(s: Shape, budget: int) -> BlockPlan:
    """The blocks of the product within ``budget`` bytes (see the module): all of A's rows where B's
    columns then come in blocks of at least :data:`MIN_COLS`, else fewer rows, down to one row and one
    column; MemoryPlanError where even that does not fit."""
    best = None
    rows = s.m
    while True:
        cols, tile = _widest(s, rows, budget)
        if cols and (best is None or rows * cols > best.rows * best.cols):
            best = BlockPlan(rows, cols, tile, block_peak(s, rows, cols, tile))
        if cols >= min(s.n, MIN_COLS) or rows == 1:
            break
        rows = -(-rows // 2)
    if best is None:
        need = block_peak(s, 1, 1, 1)
        raise MemoryPlanError(f"the exact {s.m} x {s.k} x {s.n} product needs {gib(need)} even for one row of A "
                              f"and one column of B (with its {gib(8 * s.m * s.n)} output) but {gib(budget)} "
                              "may be used; free memory, or compute it in blocks of rows and columns")
    return best


def one_block(be: Backend, budget: int, least: int) -> int:
    """``budget``, halved until the device can give it as one block (CuPy's cached blocks may be split across
    sizes; asking costs no wait where a cached block holds it), or below ``least``: every allocation of the
    call then comes out of room that one block holds."""
    while budget >= least and budget > 0 and not be.can_allocate(budget):
        budget //= 2
    return budget


def spans_in_chunks(xp: Any, X: Array, bad: Array | None, budget: int, spans: Any = row_spans) -> Array:
    """``spans`` (:func:`accuracy.slicing.row_spans`, or the CUDA kernel's twin) of X's rows (NaN and infinity
    zeroed) in chunks of rows whose temporaries take at most ``budget`` bytes; MemoryPlanError where one row does
    not fit."""
    rows, k = X.shape
    per_row = (SPANS + (8 if bad is not None and bad.size else 0)) * max(k, 1)
    chunk = min(rows, budget // per_row)
    if rows and chunk < 1:
        raise MemoryPlanError(f"reading the exponents of one row of {k} entries takes {gib(per_row)} but "
                              f"{gib(budget)} may be used; free memory")
    parts = [spans(xp, lines(xp, X, part, bad)) for part in _cuts(rows, max(chunk, 1))]
    if len(parts) == 1:
        return parts[0]                          # no concatenation (on CuPy: no kernel to compile)
    return xp.concatenate(parts) if parts else xp.zeros(0, dtype=np.int64)


def nonfinite_in_chunks(xp: Any, X: Array, budget: int) -> Array:
    """Indices of X's rows holding NaN or infinity, reading at most ``budget`` bytes of flags at once."""
    rows, k = X.shape
    chunk = max(1, min(rows, budget // max(1, 2 * k)))
    parts = [xp.flatnonzero(~xp.isfinite(X[part]).all(axis=1)) + part.start for part in _cuts(rows, chunk)]
    return xp.concatenate(parts) if parts else xp.zeros(0, dtype=np.int64)


def within(xp: Any, bad: Array | None, part: slice) -> Array | None:
    """The indices of ``bad`` inside ``part``, counted from its start (None where there are none)."""
    if bad is None or not bad.size:
        return None
    local = bad[(bad >= part.start) & (bad < part.stop)] - part.start
    return local if local.size else None


def lines(xp: Any, X: Array, part: slice, bad: Array | None) -> Array:
    """X's rows ``part``: a view, or a copy with the rows holding NaN or infinity zeroed."""
    local = within(xp, bad, part)
    if local is None:
        return X[part]
    Y = X[part].copy()
    Y[local] = 0
    return Y
