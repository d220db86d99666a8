"""Scheme II in a bounded workspace: C in tiles, each tile a scheme II product of one row panel of A and one
column panel of B, so that only those panels' residues and the tile's products are held at once.

``ozaki2.matmul(..., workspace=bytes)`` caps the bytes a call takes beyond A, B and C (:func:`tile_bytes`: the
tile's workspace block and its scratch, as :func:`gpu.ozaki2.memory.peak_bytes` counts them). Where the whole
product's plan fits the cap it runs as one product; otherwise :func:`panels` picks the largest square tiles
that fit (rows and columns within one of each other, halving from the whole product) and each tile runs as its
own scheme II product straight into its block of C, one plan per tile shape, freed before the next shape is
planned. A cap that not even tiles of :data:`MIN_TILE` lines fit is a :class:`~gpu.backend.MemoryPlanError`
before any work.

What a tile computes is the whole product's: the fast scaling's shifts depend on a row's (column's) own
entries only, so with a modulus count given (``moduli=N``) and ``scaling="fast"`` the tiled product is
**bitwise** the untiled one. Under ``moduli="auto"`` each tile takes the fewest moduli whose proven bound holds
on its own entries (a count read per tile), and the accurate scaling bounds each tile's own product: the
result keeps the same proven bound, and may differ from the untiled one in the last bits. The row panels'
residues are formed again for each column panel (and the columns' for each row panel): at a cap of 2 FP64
matrices at 15 moduli the tiles are about 0.4 N wide, so each operand's residues are formed 2-3 times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..backend import Array, Backend, MemoryPlanError
from ..backend.checks import gib
from .memory import peak_bytes
from .moduli import MAX_MODULI

#: The narrowest tile side a capped product is cut into.
MIN_TILE = 64


def tile_bytes(be: Backend, m: int, k: int, n: int, count: int | None, scaling: str, bound: str,
               level: int = 0) -> int:
    """Bytes a tile of m x n over k takes beyond A, B and C in its least layout (``count`` None: ``"auto"``)."""
    return peak_bytes(be, m, k, n, count, scaling, direct=False, out_given=True, bound=bound, level=level)


def panels(be: Backend, m: int, k: int, n: int, count: int | None, scaling: str, bound: str, cap: int,
           level: int = 0) -> tuple[int, int]:
    """(rows, columns) of the largest tiles whose :func:`tile_bytes` fit in ``cap`` (see the module); the whole
    product where it fits; MemoryPlanError where tiles of :data:`MIN_TILE` do not."""
    side = max(m, n)
    while True:
        rows, cols = min(m, side), min(n, side)
        if tile_bytes(be, rows, k, cols, count, scaling, bound, level) <= cap:
            return rows, cols
        if side <= MIN_TILE:
            least = tile_bytes(be, min(m, MIN_TILE), k, min(n, MIN_TILE), count, scaling, bound, level)
            raise MemoryPlanError(
                f"Ozaki scheme II on {m} x {k} x {n} with {count or f'up to {MAX_MODULI}'} moduli needs "
                f"{least:,} bytes ({gib(least)}) beyond A, B and C even in tiles of {MIN_TILE} x {MIN_TILE}, more "
                f"than the workspace of {cap:,} bytes allowed; allow a larger workspace, pass fewer moduli, or "
                "split k")
        side = max(MIN_TILE, -(-side // 2))


def tiles(m: int, n: int, rows: int, cols: int) -> Iterator[tuple[slice, slice]]:
    """C's tiles, those of one shape together (the full ones first, then the last column, row and corner)."""
    full_r, full_c = m // rows * rows, n // cols * cols
    row_parts = [(slice(i, i + rows)) for i in range(0, full_r, rows)]
    col_parts = [(slice(j, j + cols)) for j in range(0, full_c, cols)]
    last_r = [slice(full_r, m)] if full_r < m else []
    last_c = [slice(full_c, n)] if full_c < n else []
    for rs, cs in ((row_parts, col_parts), (row_parts, last_c), (last_r, col_parts), (last_r, last_c)):
        for r in rs:
            for c in cs:
                yield r, c


def run_tiles(A: Array, B: Array, C: Array, rows: int, cols: int,
              plan_of: Callable[[Array, Array, Array], Any]) -> Array:
    """Every tile of C as its own product, one plan per tile shape (``plan_of``), freed before the next."""
    plan, shape = None, None
    try:
        for r, c in tiles(C.shape[0], C.shape[1], rows, cols):
            a, b, out = A[r], B[:, c], C[r, c]
            if out.shape != shape:
                if plan is not None:
                    plan.free()
                plan, shape = plan_of(a, b, out), out.shape
            plan.execute(a, b, out)
    finally:
        if plan is not None:
            plan.free()
    return C
