"""CuPy kernels of the Winograd levels over the residues (:mod:`gpu.ozaki2.winograd`): each sum or difference of
two residue planes modulo m, and each INT32 product's reduction, in one pass.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"ozaki2-winograd"``), so the CPU path
never imports CuPy. The arithmetic is the NumPy operations' (:class:`gpu.ozaki2.winograd.HostResidueOps`) in C:
symmetric residues in, the symmetric residue of x + sign y (or of p) modulo m out.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Array, Backend

_SYMMETRIC = "if (r < 0) r += m; z = (signed char)(r > (m - 1) / 2 ? r - m : r)"


@cache
def _sum_kernel() -> Any:
    return cupy.ElementwiseKernel("int8 x, int8 y, int32 m, int32 sign", "int8 z",
                                  "int r = ((int)x + sign * (int)y) % m; " + _SYMMETRIC, "ozaki2_residue_sum")


@cache
def _reduce_kernel() -> Any:
    return cupy.ElementwiseKernel("int32 p, int32 m", "int8 z", "int r = p % m; " + _SYMMETRIC,
                                  "ozaki2_residue_reduce")


class CudaResidueOps:
    """The residue sums and reductions as one CUDA pass each."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def combine(self, x: Array, y: Array, m: int, sign: int) -> Array:
        return _sum_kernel()(x, y, np.int32(m), np.int32(sign))

    def reduce(self, P: Array, m: int) -> Array:
        return _reduce_kernel()(P, np.int32(m))
