"""The scaling modes' row and column bounds R and Q (:class:`~gpu.ozaki2.scaling.Bounds`) from the line statistics.

* ``"fast"`` (no GEMM; our bound, not GEMMul8's): ``R_i = sum_k Abar_ik**2`` and ``Q_j = sum_k Bbar_kj**2``,
  sums of squares of the bars computed exactly in integers in the same read of each operand as its maxima
  (:mod:`gpu.ozaki2.fused`). Proof: (Abar Bbar)_ij <= ||Abar_i||_2 ||Bbar_j||_2 = sqrt(R_i Q_j)
  (Cauchy-Schwarz), which is all the scaling's proof needs. It is scale-invariant: multiplying a row of A (a
  column of B) by 2**p changes e_i by -p and nothing else (the bars are the same), so A' and the result are the
  same up to that power of two; a general scaling changes the bars by at most a factor of 2 per entry. The
  bound is at most sqrt(k) times accurate mode's (a bit or so per operand on uniform data), and the sums are
  integers, so CPU and GPU agree.
* ``"accurate"``: the row and column maxima of Cbar = Abar Bbar (one more INT8 GEMM), and Cbar itself, which
  tightens the shifts further (:func:`gpu.ozaki2.scaling.headroom`). A line holding NaN or infinity has
  zero bars (its bar exponent is :data:`gpu.ozaki2.normwise.BAD_E`), so the other lines' bounds are those of
  the operands with that line zeroed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Array, Backend
from ..ozaki.plan import ALIGN, _round_up
from .gemms import blocks, int8_product
from .normwise import LineStats
from .ops import ops
from .scaling import MAX_K_BOUND_GEMM, Bounds


def bounds(be: Backend, A: Array, B: Array, rows: LineStats, cols: LineStats, scaling: str, work: Any = None
           ) -> Bounds:
    """The mode's Bounds (see the module): fast mode's R and Q from the line statistics; accurate mode's Cbar,
    the INT8 product of the bars of A's rows and B's columns (in ``work``'s buffers where given)."""
    if scaling != "accurate":
        return Bounds(rows.e, rows.R, cols.e, cols.R)
    m, n = A.shape[0], B.shape[1]
    ldk, n_pad = _round_up(max(A.shape[1], 1)), _round_up(max(n, 1))
    bars_a = ops(be).bars(A, rows.e, m, ldk, out=work.view("bars_a") if work else None)
    bars_b = ops(be).bars(B.T, cols.e, n_pad, ldk, out=work.view("bars_b") if work else None)
    spans = blocks(ldk, MAX_K_BOUND_GEMM // ALIGN * ALIGN)
    P = work.view("bound_product") if work else be.xp.empty((m, n_pad), dtype=np.int32)
    cbar = P
    if len(spans) > 1:
        cbar = work.view("cbar") if work else be.xp.empty(P.shape, dtype=np.int64)
    for number, span in enumerate(spans):
        int8_product(be, bars_a[:, span], bars_b[:, span], P)
        if cbar is not P:
            be.xp.add(cbar, P, out=cbar) if number else be.xp.copyto(cbar, P)
    cbar = cbar[:m, :n]
    return Bounds(rows.e, cbar.max(axis=1).astype(np.float64), cols.e, cbar.max(axis=0).astype(np.float64), cbar)
