"""The accurate scaling of scheme II: powers of two that keep |A'B'| below the CRT's range.

A' = trunc(diag(2**sA) A) and B' = trunc(B diag(2**sB)) are exact in float64 (a power-of-two scaling,
then truncation toward zero). The moduli recover A'B' from its residues when |A'B'|_ij < M/2;
:func:`bound_exponent` gives the exponent K with 2**K <= M/4, and the shifts below guarantee
|A'B'|_ij <= 2**K for every entry (the factor 2 of margin keeps the CRT's float64 quotient away
from the ambiguous +-M/2, see :mod:`gpu.ozaki2.crt`).

Accurate mode (Ozaki, Uchino & Imamura; one extra INT8 GEMM):

* e_i = 5 - ilogb(max_j |a_ij|), Abar_ij = ceil(|a_ij| 2**e_i) <= 64 (the row maximum scales below
  2**6); f_j and Bbar likewise for the columns of B. Then |a_ij| 2**e_i <= Abar_ij.
* Cbar = Abar Bbar, exact (an INT8 GEMM with INT32 accumulation while k 64**2 < 2**31; emulated
  here by an int64 matmul), so (|A||B|)_ij 2**(e_i + f_j) <= Cbar_ij.
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

#: Cbar's INT8 GEMM is exact with INT32 accumulation while k * 64**2 < 2**31.
MAX_K_BOUND_GEMM = (2**31 - 1) // 64**2


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


def scale_accurate(A: np.ndarray, B: np.ndarray, table: ModuliTable) -> Scaled:
    """Accurate-mode scaling of A (rows) and B (columns) for the moduli of ``table`` (see the module)."""
    A, B = _check(A, B)
    if A.shape[1] > MAX_K_BOUND_GEMM:
        raise ValueError(f"k = {A.shape[1]} exceeds {MAX_K_BOUND_GEMM}, the INT8 bound GEMM's exact range")
    K = bound_exponent(table)
    e, Abar = _small_bound(A, axis=1)
    f, Bbar = _small_bound(B, axis=0)
    Cbar = Abar @ Bbar
    t = np.frexp(Cbar.max(axis=1, initial=0).astype(np.float64))[1].astype(np.int64)
    r = np.frexp(Cbar.max(axis=0, initial=0).astype(np.float64))[1].astype(np.int64)
    shift_a = e + (K - t) // 2
    shift_b = f + (K - r) // 2
    A_int = np.trunc(np.ldexp(A, shift_a[:, None]))
    B_int = np.trunc(np.ldexp(B, shift_b[None, :]))
    return Scaled(A_int, B_int, shift_a, shift_b)
