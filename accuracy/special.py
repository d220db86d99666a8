"""The exact product where inputs hold NaN or infinity: the value IEEE arithmetic gives with no rounding.

Every entry c_ij = sum_k a_ik b_kj of a row of A (or a column of B) that holds
NaN or infinity is NaN or infinite, whatever the other values: a product with
an infinite factor is infinite unless the other factor is 0 (then NaN), and NaN
propagates. Evaluated exactly, the entry is

* NaN if some term is NaN (a NaN factor, or 0 times infinity), or if terms of
  both infinite signs meet (inf - inf);
* +inf or -inf if every infinite term has that sign.

This does not depend on the order of the sum, unlike a floating-point GEMM,
whose finite partial sums may overflow along the way. Each condition is a
count of index pairs, so it is a product of 0/1 indicator matrices, exact in
float64 for any k below 2**53: a few GEMMs over the affected rows or columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu.backend import Array


def _indicators(xp: Any, X: Array) -> dict[str, Array]:
    inf = xp.isinf(X)
    return {"nan": xp.isnan(X), "inf": inf, "zero": X == 0, "pos": X > 0, "neg": X < 0,
            "pinf": inf & (X > 0), "ninf": inf & (X < 0)}


def ieee_product(xp: Any, A: Array, B: Array) -> Array:
    """The exact IEEE value of every entry of ``A @ B`` whose terms include NaN or infinity; entries
    without such terms are 0 (callers fill only rows and columns where every entry has one)."""
    a, b = _indicators(xp, A), _indicators(xp, B)

    def count(x: Array, y: Array) -> Array:
        return x.astype(np.float64) @ y.astype(np.float64)

    ones_b, ones_a = xp.ones((B.shape[0], 1)), xp.ones((1, A.shape[1]))
    nan = (count(a["nan"], ones_b) + count(ones_a, b["nan"]) + count(a["zero"], b["inf"])
           + count(a["inf"], b["zero"])) > 0
    pos = (count(a["pinf"], b["pos"]) + count(a["ninf"], b["neg"]) + count(a["pos"], b["pinf"])
           + count(a["neg"], b["ninf"])) > 0
    neg = (count(a["pinf"], b["neg"]) + count(a["ninf"], b["pos"]) + count(a["pos"], b["ninf"])
           + count(a["neg"], b["pinf"])) > 0
    out = xp.where(pos, np.inf, xp.where(neg, -np.inf, 0.0))
    return xp.where(nan | (pos & neg), np.nan, out)
