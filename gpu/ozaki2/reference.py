"""Scheme II on NumPy, every step exact: the reference the GPU path will be checked against.

:func:`modular_product` emulates the INT8 GEMMs (int64 matmul of INT8 residues, exact; the INT32
accumulator of the GPU is exact for k <= 2**17 - 1, since |residue| <= 128) and reduces each product
to its symmetric residue. :func:`matmul` chains accurate scaling, residues, these products, the
double-double CRT and the unscaling ``ldexp(C', -(sA_i + sB_j))``. No k-blocking yet: k is limited
to the INT32 range.
"""

from __future__ import annotations

import numpy as np

from .crt import reconstruct
from .moduli import MAX_RESIDUE, ModuliTable, moduli_table
from .residues import residues, symmetric
from .scaling import scale_accurate

#: The longest inner dimension one INT8 GEMM with INT32 accumulation sums exactly.
MAX_K = (2**31 - 1) // MAX_RESIDUE**2


def modular_product(A_int: np.ndarray, B_int: np.ndarray, table: ModuliTable) -> np.ndarray:
    """The symmetric residues (N, m, n) of the integer product A_int @ B_int, one emulated INT8 GEMM per modulus."""
    if A_int.shape[1] > MAX_K:
        raise ValueError(f"k = {A_int.shape[1]} exceeds {MAX_K}, the INT8 GEMM's exact range (no k-blocking yet)")
    ra, rb = residues(A_int, table.moduli), residues(B_int, table.moduli)
    out = np.empty((table.count, A_int.shape[0], B_int.shape[1]), dtype=np.int8)
    for t, m in enumerate(table.moduli):
        out[t] = symmetric((ra[t].astype(np.int64) @ rb[t].astype(np.int64)) % m, m)
    return out


def matmul(A: np.ndarray, B: np.ndarray, *, moduli: int) -> np.ndarray:
    """A @ B in float64 by Ozaki scheme II with ``moduli`` moduli (accurate scaling, NumPy)."""
    table = moduli_table(moduli)
    scaled = scale_accurate(A, B, table)
    C_int = reconstruct(modular_product(scaled.A, scaled.B, table), table)
    return np.ldexp(C_int, -(scaled.shift_a[:, None] + scaled.shift_b[None, :]))
