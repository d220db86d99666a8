"""Scheme II on NumPy, every step exact: the reference the GPU path will be checked against.

:func:`modular_product` emulates the INT8 GEMMs (int64 matmul of INT8 residues, exact; the INT32
accumulator of the GPU is exact for k <= :data:`MAX_K` = 2**17 - 1, since |residue| <= 128) and
reduces each product to its symmetric residue. :func:`matmul` chains accurate scaling, residues,
these products, the double-double CRT and the unscaling ``ldexp(C', -(sA_i + sB_j))``.

k-blocking: a longer k is cut into blocks of at most ``k_block`` (default and maximum :data:`MAX_K`).
Each block's product is one INT8 GEMM per modulus, exact in INT32; it is reduced modulo m_t and the
blocks' residues are added modulo m_t (the running sum stays in [0, m_t), so nothing can overflow).
The sum of the blocks is A'B' modulo m_t, so one CRT recovers A'B' exactly as for a single block,
provided |A'B'|_ij < M/2 over the whole k: the accurate scaling guarantees |A'B'|_ij <= L_N < M/2
from Cbar = Abar Bbar taken over the whole k (see :mod:`gpu.ozaki2.scaling`), so blocking changes
nothing in the bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .auto import choose_moduli
from .crt import reconstruct
from .moduli import MAX_RESIDUE, ModuliTable, moduli_table
from .residues import residues, symmetric
from .scaling import accurate_bounds, scale_accurate

#: The longest inner dimension one INT8 GEMM with INT32 accumulation sums exactly.
MAX_K = (2**31 - 1) // MAX_RESIDUE**2


def _block(k_block: int | None) -> int:
    """The block length: MAX_K by default, else an int in 1..MAX_K."""
    if k_block is None:
        return MAX_K
    if isinstance(k_block, bool) or not isinstance(k_block, int) or not 1 <= k_block <= MAX_K:
        raise ValueError(f"k_block must be an integer in 1..{MAX_K} (the INT8 GEMM's exact range), not {k_block!r}")
    return k_block


def modular_product(A_int: np.ndarray, B_int: np.ndarray, table: ModuliTable,
                    k_block: int | None = None) -> np.ndarray:
    """The symmetric residues (N, m, n) of the integer product A_int @ B_int, one emulated INT8 GEMM per
    modulus and k block, the blocks' residues added modulo each modulus (see the module)."""
    block, k = _block(k_block), A_int.shape[1]
    ra, rb = residues(A_int, table.moduli), residues(B_int, table.moduli)
    out = np.empty((table.count, A_int.shape[0], B_int.shape[1]), dtype=np.int8)
    for t, m in enumerate(table.moduli):
        acc = np.zeros(out.shape[1:], dtype=np.int64)
        for lo in range(0, max(k, 1), block):
            part = ra[t][:, lo:lo + block].astype(np.int64) @ rb[t][lo:lo + block].astype(np.int64)
            acc = (acc + part % m) % m
        out[t] = symmetric(acc, m)
    return out


def matmul(A: np.ndarray, B: np.ndarray, *, moduli: Any = "auto", target: Any = None,
           k_block: int | None = None) -> np.ndarray:
    """A @ B in float64 by Ozaki scheme II (accurate scaling, NumPy).

    ``moduli``: a count in 1..20, or ``"auto"`` (the default): the fewest moduli whose bound
    :func:`gpu.ozaki2.auto.predicted_error` meets ``target`` (``"dgemm"``, 2**-53, when not given;
    ``"sgemm"``; or a number in (0, 1)) on these inputs. That bound is componentwise: with
    E = max_ij E_ij,

        |C_ij - (AB)_ij| <= E (|A||B|)_ij + 2**-53 |C_ij|,

    E_ij of :mod:`gpu.ozaki2.auto` (the rounding of A' and B', and the CRT's low parts; the last term is
    the CRT's final rounding), barring underflow in the unscaling.
    ``k_block``: the k-block length (default 2**17 - 1; see the module).
    """
    if moduli == "auto":
        bounds = accurate_bounds(A, B)
        count = choose_moduli(A, B, bounds, "dgemm" if target is None else target)
    else:
        if target is not None:
            raise ValueError("give either a moduli count or target (with moduli='auto'), not both")
        bounds, count = None, moduli
    table = moduli_table(count)
    scaled = scale_accurate(A, B, table, bounds)
    C_int = reconstruct(modular_product(scaled.A, scaled.B, table, k_block), table)
    return np.ldexp(C_int, -(scaled.shift_a[:, None] + scaled.shift_b[None, :]))
