"""Strassen's non-finite entries, recomputed by the library GEMM: never NaN or infinity where ``A @ B`` is finite.

A level adds quadrants before it multiplies, so a NaN or infinity of A (B) reaches every product its quadrant
enters: one NaN in A gave 512 NaN entries at level 2 on a 128 x 128 product, where ``A @ B`` has 128, and an
infinity met its own negation (inf - inf = NaN) where ``A @ B`` is infinite. Finite inputs near the top of
the range overflow in the same additions (A21 + A22) where every entry of ``A @ B`` is finite.

An entry that no non-finite value reached is computed from finite values alone, exactly as the product of A
and B with their non-finite entries replaced by zeros would compute it, so it keeps the Strassen bound
(every entry of A's row and B's column is finite there: a non-finite A_ik reaches all of C's row i). Only
the non-finite entries of C are therefore in question, and :meth:`repair` recomputes them by the library
GEMM after the product: they are then what ``A @ B`` gives (NaN, the same infinity, or a finite value).

* NumPy (:class:`HostRepair`): one pass over C with no allocation (:meth:`gpu.backend.Backend.all_finite`)
  where C is finite; otherwise the library GEMM of the columns of C that are wholly non-finite (a bad
  column of B, spread) and of the rows holding the others, in parts of at most :data:`PART_BYTES`.
* CuPy (:class:`gpu.strassen.finite_kernels.CudaRepair`): one kernel that reads C and recomputes each
  non-finite entry as a dot product of A's row and B's column, on the current stream: no allocation and no
  wait for the device. Where C is finite it only reads C: 2 GiB at N = 16384 in float64, about 0.7 ms at
  the H100's 3 TB/s (an estimate, not yet measured), 0.5% of the 145 ms level-2 product there.
"""

from __future__ import annotations

import numpy as np

from ..backend import Array, Backend, register_ops

FAMILY = "strassen-finite"
#: Most bytes of one recomputed block on NumPy (a C full of NaN is redone in parts, not in a copy of C).
PART_BYTES = 2**26


class HostRepair:
    """The repair on NumPy arrays (see the module notes)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def repair(self, A: Array, B: Array, C: Array) -> None:
        """C's non-finite entries as the library GEMM gives them (C = A B was computed by Strassen)."""
        if self.backend.all_finite(C):
            return
        rows, cols = nonfinite_lines(~np.isfinite(C))
        for part in _parts(cols, C.shape[0] * C.itemsize):
            block = np.empty((C.shape[0], part.size), dtype=C.dtype)
            self.backend.gemm(A, B[:, part], block)
            C[:, part] = block
        for part in _parts(rows, C.shape[1] * C.itemsize):
            block = np.empty((part.size, C.shape[1]), dtype=C.dtype)
            self.backend.gemm(A[part], B, block)
            C[part] = block


def _parts(lines: np.ndarray, line_bytes: int) -> list[np.ndarray]:
    """``lines`` in groups whose recomputed block takes at most :data:`PART_BYTES` (one line at least)."""
    step = max(1, PART_BYTES // max(1, line_bytes))
    return [lines[i:i + step] for i in range(0, lines.size, step)]


def nonfinite_lines(bad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) whose recomputation covers every True entry of ``bad``: the columns that are True
    throughout, and the rows holding the others."""
    cols = np.flatnonzero(bad.all(axis=0))
    rest = bad.copy()
    rest[:, cols] = False
    return np.flatnonzero(rest.any(axis=1)), cols


register_ops(FAMILY, "numpy", HostRepair)
register_ops(FAMILY, "cupy", "gpu.strassen.finite_kernels:CudaRepair")
