"""The accurate scaling of scheme II: powers of two that keep |A'B'| below the CRT's range.

A' = trunc(diag(2**sA) A) and B' = trunc(B diag(2**sB)) are exact in float64 (a power-of-two scaling,
then truncation toward zero). The moduli recover A'B' from its residues when |A'B'|_ij < M/2;
:func:`bound_exponent` gives the exponent K with 2**K <= M/4, and the shifts below guarantee
|A'B'|_ij <= 2**K for every entry (the factor 2 of margin keeps the CRT's float64 quotient away
from the ambiguous +-M/2, see :mod:`gpu.ozaki2.crt`).

Accurate mode (Ozaki, Uchino & Imamura; one extra INT8 GEMM):

* e_i = 5 - ilogb(max_j |a_ij|), Abar_ij = ceil(|a_ij| 2**e_i) <= 64 (the row maximum scales below
  2**6); f_j and Bbar likewise for the columns of B. Then |a_ij| 2**e_i <= Abar_ij.
* Cbar = Abar Bbar over the whole k, exact: INT8 GEMMs with INT32 accumulation on blocks of at most
  :data:`MAX_K_BOUND_GEMM` (k 64**2 < 2**31), their sums added in int64 without reduction (exact while
  k 64**2 < 2**63; emulated here by int64 matmuls per block), so (|A||B|)_ij 2**(e_i + f_j) <= Cbar_ij
  for every k. The bound below holds whatever k is, so k-blocking of the modular products (see
  :mod:`gpu.ozaki2.reference`) needs nothing more from the scaling.
* t_i with max_j Cbar_ij < 2**t_i (row maxima), r_j likewise (column maxima); u_i = floor((K - t_i)/2),
  v_j = floor((K - r_j)/2), sA_i = e_i + u_i, sB_j = f_j + v_j.

Proof of the bound: |A'B'|_ij <= (|A'||B'|)_ij <= 2**(sA_i + sB_j) (|A||B|)_ij
<= 2**(u_i + v_j) Cbar_ij < 2**(u_i + v_j) 2**min(t_i, r_j) <= 2**(u_i + v_j + (t_i + r_j)/2) <= 2**K.
Each shift adapts to its own row (column), which is what makes the mode accurate: A' keeps about
(K - t_i)/2 + 6 bits of row i's largest entry.

This module has nothing to share with scheme I's slicing beyond ``frexp``/``ldexp`` (its exponents
are per-row maxima too, but the shifts here depend on the product Cbar).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .moduli import ModuliTable

#: Cbar's INT8 GEMM is exact with INT32 accumulation while k * 64**2 < 2**31: its block length.
MAX_K_BOUND_GEMM = (2**31 - 1) // 64**2
#: int64 sums of the blocks' products stay exact while k * 64**2 < 2**63.
MAX_K = (2**63 - 1) // 64**2


class Bounds(NamedTuple):
    """Accurate mode's data-dependent part, shared by every modulus count: row exponents e and the
    bit lengths t of Cbar's row maxima, column exponents f and the bit lengths r of its column maxima."""

    e: np.ndarray
    t: np.ndarray
    f: np.ndarray
    r: np.ndarray


class Scaled(NamedTuple):
    """The scaled integer matrices (float64 holding integers) and their row/column shifts."""

    A: np.ndarray
    B: np.ndarray
    shift_a: np.ndarray
    shift_b: np.ndarray


def bound_exponent(table: ModuliTable) -> int:
    """K, the largest integer with 2**K <= M/4: the scaling keeps every |A'B'|_ij <= 2**K."""
    return (table.product // 4).bit_length() - 1


def _check(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 2-D operands with matching inner dimensions, all finite."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"need 2-D A (m, k) and B (k, n), got {A.shape} and {B.shape}")
    if not (np.isfinite(A).all() and np.isfinite(B).all()):
        raise ValueError("A and B must be finite (no NaN or infinity)")
    return A, B


def _small_bound(X: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """e (per row for axis=1, per column for axis=0) with the row (column) maximum of |X| 2**e below
    2**6, and Xbar = ceil(|X| 2**e) as int64 (<= 64)."""
    e = 6 - np.frexp(np.abs(X).max(axis=axis))[1].astype(np.int64)  # 5 - ilogb = 6 - frexp exponent
    scaled = np.ldexp(np.abs(X), e[:, None] if axis == 1 else e[None, :])
    return e, np.ceil(scaled).astype(np.int64)


def accurate_bounds(A: np.ndarray, B: np.ndarray) -> Bounds:
    """e, t, f, r of the module text (one Cbar product over the whole k, in blocks; see the module)."""
    A, B = _check(A, B)
    k = A.shape[1]
    if k > MAX_K:
        raise ValueError(f"k = {k} exceeds {MAX_K}, the range of Cbar's exact int64 sum")
    e, Abar = _small_bound(A, axis=1)
    f, Bbar = _small_bound(B, axis=0)
    Cbar = np.zeros((A.shape[0], B.shape[1]), dtype=np.int64)
    for lo in range(0, k, MAX_K_BOUND_GEMM):
        Cbar += Abar[:, lo:lo + MAX_K_BOUND_GEMM] @ Bbar[lo:lo + MAX_K_BOUND_GEMM]
    t = np.frexp(Cbar.max(axis=1, initial=0).astype(np.float64))[1].astype(np.int64)
    r = np.frexp(Cbar.max(axis=0, initial=0).astype(np.float64))[1].astype(np.int64)
    return Bounds(e, t, f, r)


def headroom(bounds: Bounds, K: int) -> tuple[np.ndarray, np.ndarray]:
    """u_i = floor((K - t_i)/2) and v_j = floor((K - r_j)/2): the shifts beyond e_i and f_j."""
    return (K - bounds.t) // 2, (K - bounds.r) // 2


def scale_accurate(A: np.ndarray, B: np.ndarray, table: ModuliTable, bounds: Bounds | None = None) -> Scaled:
    """Accurate-mode scaling of A (rows) and B (columns) for the moduli of ``table`` (see the module);
    ``bounds``: :func:`accurate_bounds` of A and B when already computed."""
    A, B = _check(A, B)
    if bounds is None:
        bounds = accurate_bounds(A, B)
    u, v = headroom(bounds, bound_exponent(table))
    shift_a = bounds.e + u
    shift_b = bounds.f + v
    A_int = np.trunc(np.ldexp(A, shift_a[:, None]))
    B_int = np.trunc(np.ldexp(B, shift_b[None, :]))
    return Scaled(A_int, B_int, shift_a, shift_b)
