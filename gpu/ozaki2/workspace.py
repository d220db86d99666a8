"""Scheme II's workspace: every large buffer of one product, as views of one block allocated before any work.

Beyond A, B and C a product needs the INT8 residues of A's rows and B's columns (N planes each), then either
the INT32 products of every modulus (``direct``: one k block; the CRT reduces them as it reads them), whole or
for a panel of C's rows at a time (the INT8 GEMMs and the CRT then run panel by panel), or, per
modulus, one INT32 product reduced into INT8 planes (added modulo m across k blocks), and before those the
scaling's scratch: the tile sums of the one read of each operand (:func:`gpu.ozaki2.fused.workspace_bytes`),
and in accurate mode the bars, their INT32 product and, where the bound's GEMM is blocked, its int64 sum
Cbar. A Winograd level in its fused form (:mod:`gpu.ozaki2.fused_level`) holds instead, beside the residues, each
operand's four sums per modulus and the 7 INT32 products of every modulus for a span of the top half's rows.
Where the INT8 GEMMs write residues (the CUTLASS kernel built), the direct layouts hold their products as INT8, a
quarter of the bytes: at 15 moduli the fused level's whole layout is then 10.8 FP64 matrices against 20.6, and level
0's direct layout 5.6 against 11.25, within the planes layout's 6.12 (GEMMul8's workspace).
The scratch is dead before the first residue is written (one stream orders them), so it shares the
start of the block with the residues (and the tile sums, dead before the bars are written, with the bars):
the block holds the largest of the phases.

One block makes the memory check exact (:func:`gpu.backend.checks.reserve`): CuPy's pool serves a block of
one size or refuses it, where separate buffers could find the pool's free bytes split across sizes that
cannot hold the largest of them (on the H200 at N = 32768, fast-15 after fast-14 asked the pool for 60 GiB
of INT32 products while it held 82 GiB, and died in the middle of the call). Every buffer starts on a
multiple of :data:`ALIGNMENT` bytes, as CuPy's own allocations do (the INT8 GEMMs and the CRT's vector loads
need aligned views).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backend import Array
from ..ozaki.plan import ALIGN, _round_up
from .scaling import MAX_K_BOUND_GEMM

#: Every buffer of the block starts on a multiple of this many bytes.
ALIGNMENT = 512
#: Entries of k per tile of fast mode's tile sums (:mod:`gpu.ozaki2.fused`).
TILE_K = 32


@dataclass(frozen=True)
class Buffer:
    """One view of the block: its byte offset, shape and dtype."""

    offset: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


@dataclass(frozen=True)
class Workspace:
    """Where each buffer of one product lies in its block (see the module); ``nbytes``: the block's size."""

    direct: bool
    buffers: dict[str, Buffer] = field(default_factory=dict)
    levels: int = 0                # fused Winograd levels (1: :mod:`~gpu.ozaki2.fused_level`, 2: ``fused_level2``)

    @property
    def nbytes(self) -> int:
        return _round_up(max((b.end for b in self.buffers.values()), default=0), ALIGNMENT)

    @property
    def rows(self) -> int | None:
        """Rows of C whose INT32 products the direct layout holds at a time (of the top half's rows in the fused
        level's layout; None in the planes layout)."""
        return self.buffers["products"].shape[-2] if self.direct else None

    @property
    def fused(self) -> bool:
        """Whether this is a fused Winograd level's layout (its sums and 7 products per modulus)."""
        return self.levels == 1

    def view(self, block: Array, name: str) -> Array:
        """Buffer ``name`` as a view of ``block`` (a uint8 array of at least :attr:`nbytes`)."""
        b = self.buffers[name]
        return block[b.offset:b.end].view(b.dtype).reshape(b.shape)

    def region(self, block: Array, name: str) -> Array:
        """Buffer ``name`` as uint8 bytes of ``block``, for a step that carves its own views from it."""
        b = self.buffers[name]
        return block[b.offset:b.end]


def _stack(entries: list[tuple[str, tuple[int, ...], Any]], offset: int = 0) -> dict[str, Buffer]:
    """Buffers one after the other from ``offset``, each aligned."""
    out = {}
    for name, shape, dtype in entries:
        out[name] = Buffer(offset, tuple(int(s) for s in shape), np.dtype(dtype))
        offset = _round_up(out[name].end, ALIGNMENT)
    return out


def bound_blocks(k: int) -> int:
    """How many k blocks accurate mode's bound GEMM takes (more than one: Cbar is summed in int64)."""
    ldk = _round_up(max(k, 1))
    return -(-ldk // (MAX_K_BOUND_GEMM // ALIGN * ALIGN))


def product_type(narrow: bool) -> np.dtype:
    """What a direct layout holds per product entry: INT8 residues where the INT8 GEMMs write them (``narrow``),
    else INT32 products."""
    return np.dtype(np.int8 if narrow else np.int32)


def layout(m: int, k: int, n: int, count: int, scaling: str, direct: bool, level: int = 0,
           rows: int | None = None, keep_a: bool = False, narrow: bool = False) -> Workspace:
    """The buffers of an m x k x n product with ``count`` moduli (see the module); ``direct``: the INT32
    products of every modulus (one k block) for ``rows`` rows of C at a time (default: all m), else INT8 planes
    and one INT32 product (none with Winograd ``level``s, whose products come out as residues and take their
    scratch beside the block). ``direct`` with ``level`` 1: the fused level's sums and 7 products per modulus,
    for ``rows`` of the top half's m / 2 rows at a time (even m, n and k blocks: :mod:`gpu.ozaki2.fused_level`);
    with ``level`` 2 the fused second level's 49 operands of B and, for ``rows`` of A's quarters' rows at a time,
    of A and their 49 INT8 products per modulus, in place of the residues (:mod:`gpu.ozaki2.fused_level2`).
    ``keep_a``: the scratch starts after A's residues, which then outlive a call (a row panel's residues kept for
    its next column tile: :mod:`gpu.ozaki2.tiled`). ``narrow``: the direct layouts' products as INT8 residues, a
    quarter of the bytes, for INT8 GEMMs that write residues (:func:`gpu.ozaki2.gemms.writes_residues`)."""
    ldk, n_pad = _round_up(max(k, 1)), _round_up(max(n, 1))
    product = product_type(narrow)
    main = [("res_a", (count, m, ldk), np.int8), ("res_b", (count, n_pad, ldk), np.int8)]
    if direct and level == 2:
        h, w, d = m // 4, n_pad // 4, ldk // 4
        main = [("res_a", (count, 49, min(h, rows or h), d), np.int8), ("res_b", (count, 49, w, d), np.int8),
                ("products", (count, 49, min(h, rows or h), w), np.int8)]
    elif direct and level:
        h, w, d = m // 2, n_pad // 2, ldk // 2
        main += [("sums_a", (count, 4, h, d), np.int8), ("sums_b", (count, 4, w, d), np.int8),
                 ("products", (count, 7, min(h, rows or h), w), product)]
    elif direct:
        main.append(("products", (count, min(m, rows or m), n_pad), product))
    else:
        main += [("planes", (count, m, n), np.int8)] + ([] if level else [("product", (m, n_pad), np.int32)])
    scratch = []
    if scaling == "accurate":
        scratch = [("bars_a", (m, ldk), np.int8), ("bars_b", (n_pad, ldk), np.int8),
                   ("bound_product", (m, n_pad), np.int32)]
        if bound_blocks(k) > 1:
            scratch.append(("cbar", (m, n_pad), np.int64))
    buffers = _stack(main)
    start = _round_up(buffers["res_a"].end, ALIGNMENT) if keep_a else 0
    buffers.update(_stack(scratch, start))
    buffers.update(_stack([("tiles", (tile_bytes(max(m, n), k),), np.uint8)], start))
    return Workspace(direct, buffers, (2 if level == 2 else min(level, 1)) if direct else 0)


def tile_bytes(lines: int, k: int) -> int:
    """Bytes of the scaling's tile sums for ``lines`` lines of k entries, as :func:`carve_tiles` lays them out."""
    tiles = -(-k // TILE_K)
    return _round_up(8 * lines * tiles, ALIGNMENT) + _round_up(16 * lines * tiles, ALIGNMENT) + 32 * lines * tiles


def carve_tiles(region: Array, lines: int, k: int) -> tuple[Array, Array, Array]:
    """The tile maxima (float64, lines x tiles), sums of squared bars (int32, lines x tiles x 8) and 1-norms and
    squared 2-norms (float64, lines x tiles x 2) as views of ``region``."""
    tiles = -(-k // TILE_K)
    step = _round_up(8 * lines * tiles, ALIGNMENT)
    tmax = region[:8 * lines * tiles].view(np.float64).reshape(lines, tiles)
    norms = region[step:step + 16 * lines * tiles].view(np.float64).reshape(lines, tiles, 2)
    start = step + _round_up(16 * lines * tiles, ALIGNMENT)
    sums = region[start:start + 32 * lines * tiles].view(np.int32).reshape(lines, tiles, 8)
    return tmax, sums, norms
