"""Reconstruction of integers from their residues: the double-double Chinese remainder theorem.

Given symmetric residues c_t of an integer C' modulo m_1..m_N with |C'| < M/2, C' is the
representative of S = sum_t w_t c_t modulo M in the symmetric range (weights w_t of
:class:`~gpu.ozaki2.moduli.ModuliTable`). In float64, with w_t = hi_t + lo_t and M = P_hi + P_lo on
the grid 2**g of the table:

1. S_hi = sum_t hi_t c_t, exact (every partial sum is a multiple of 2**g below 2**(53 + g));
2. q = rint(S_hi / M) and D = S_hi - q P_hi, exact (q P_hi is exact, and so is the difference of
   two multiples of 2**g whose result is below 2**(53 + g)); then the low part
   L = S_lo - q P_lo, S_lo = sum_t fl(lo_t) c_t (small: the lo_t are at most 2**(g-1));
3. D + L is within M/2 + 64 N 2**g of 0; a second quotient q2 = rint((D + L) / M) decides the
   symmetric representative from the whole value (deciding from D alone would misplace values
   within 64 N 2**g of +-M/2), and C' ~ (D - q2 P_hi) + (L - q2 P_lo), whose first part is exact.

NumPy has no fused multiply-add; the grid makes the products of steps 1-2 exact without one. The
result differs from C' by at most ``table.crt_error()`` (below 2**-75 M) plus the final rounding
(half an ulp of C'); with g = 0 (N <= 5) it is exact. It is correct for |C'| <= M/2 (1 - 2**-50): nearer
to +-M/2 the two representatives C' and C' -+ M cannot be told apart in float64 (the scaling keeps
|C'| <= M/2 (1 - 2**-40), :func:`gpu.ozaki2.scaling.bound_limit`). :func:`reconstruct_exact` is the
Python-integer reference.
"""

from __future__ import annotations

import numpy as np

from .moduli import ModuliTable


def _check(residues: np.ndarray, table: ModuliTable) -> np.ndarray:
    """The residues as an integer array whose first axis runs over the table's moduli."""
    R = np.asarray(residues)
    if R.dtype.kind not in "iu":
        raise TypeError(f"residues must be integers, not {R.dtype}")
    if R.ndim < 1 or R.shape[0] != table.count:
        raise ValueError(f"residues need a first axis of {table.count} moduli, got shape {R.shape}")
    return R


def reconstruct(residues: np.ndarray, table: ModuliTable) -> np.ndarray:
    """float64 C' from its symmetric residues (shape (N, ...)): the double-double CRT of the module text."""
    R = _check(residues, table)
    s_hi = np.zeros(R.shape[1:])
    s_lo = np.zeros(R.shape[1:])
    for t in range(table.count):
        c = R[t].astype(np.float64)
        s_hi += table.weights_hi[t] * c
        if not table.exact:
            s_lo += table.weights_lo[t] * c
    inv = 1.0 / float(table.product)
    q = np.rint(s_hi * inv)
    d = s_hi - q * table.product_hi
    if table.exact:
        return d - np.rint(d * inv) * table.product_hi
    low = s_lo - q * table.product_lo
    q2 = np.rint((d + low) * inv)
    return (d - q2 * table.product_hi) + (low - q2 * table.product_lo)


def reconstruct_exact(residues: np.ndarray, table: ModuliTable) -> np.ndarray:
    """The reference: C' as Python ints (object array) in [-M/2, M/2), by exact integer arithmetic."""
    R = _check(residues, table)
    total = np.zeros(R.shape[1:], dtype=object)
    for t in range(table.count):
        total = total + table.weights[t] * R[t].astype(object)
    M = table.product
    shifted = (total + M // 2) % M
    return shifted - M // 2
