"""CUDA kernels of ``target=``'s bound (CuPy only; :mod:`gpu.ozaki.bound` says what they compute).

One module per magnitude storage (FP32 for FP32 slices, BF16 bits for the others), compiled on first use:

* ``ozaki_magnitude``: the operand of the magnitude GEMM (:func:`gpu.ozaki.slicing.magnitudes`): |x| 2**-e
  rounded toward zero to ``bits`` bits, nonzeros raised to at least 2**-63, zeros (and the lines marked
  :data:`gpu.ozaki.ops.BAD`) kept 0, stored as FP32 or BF16; every step (frexp, ldexp, floor) is exact, so the
  bits are NumPy's;
* ``ozaki_ratio``: G = max K_ij / L_ij over the magnitude product, one pass with no m x n temporary, the
  largest value kept by an atomic maximum on its bits (non-negative doubles order as their bit patterns).
  Each entry does what :func:`gpu.ozaki.ops.screen_block` does, in explicitly rounded operations (so the
  resolved entries give NumPy's bits); an entry that the product cannot resolve (weak) is recomputed right
  there, as the float64 dot product of its scaled magnitudes, which NumPy computes with the BLAS (the two
  lower bounds then differ in their last bits, see :mod:`gpu.ozaki.bound`). So the ratio stays on the
  device and costs no wait.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend.blas import gemm_recipe
from .bound import magnitude_recipe
from .cuda_sources import bound_source

#: Threads per block of the ratio kernel, and the most blocks (each adds one atomic maximum).
RATIO_THREADS, RATIO_MAX_BLOCKS = 256, 2048
#: Threads per block of the magnitude kernel, and the most blocks.
MAGNITUDE_THREADS, MAGNITUDE_MAX_BLOCKS = 256, 65536


@cache
def _module(storage: str) -> Any:
    return cupy.RawModule(code=bound_source(storage))


def bound_module(fmt: Any) -> Any:
    """The bound's module for slice format ``fmt`` (its magnitude storage), compiled on first use."""
    return _module(gemm_recipe(magnitude_recipe(fmt)[0]).operands.name)


def magnitudes(X: Any, exps: Any, axis: int, bits: int, storage: str, out: Any = None) -> Any:
    """The bound's magnitude operand of X (see :func:`gpu.ozaki.slicing.magnitudes`), C-ordered, in one pass;
    ``exps`` per row (axis 1) or per column (axis 0); into ``out`` (C-ordered) where given."""
    rows, cols = X.shape
    out = cupy.empty((rows, cols), dtype=storage) if out is None else out
    it = X.itemsize
    blocks = max(1, min(MAGNITUDE_MAX_BLOCKS, -(-(rows * cols) // MAGNITUDE_THREADS)))
    i64 = np.int64
    _module(storage).get_function("ozaki_magnitude")(
        (blocks,), (MAGNITUDE_THREADS,),
        (X, i64(rows), i64(cols), i64(X.strides[0] // it), i64(X.strides[1] // it), exps, np.int32(axis == 1),
         np.int32(bits), out))
    return out


def ratio(P: Any, nnz_rows: Any, nnz_cols: Any, factor: float, A: Any, B: Any, erow: Any, ecol: Any,
          fmt: Any, out: Any = None) -> Any:
    """G as a 1-element float64 device array (0 when the product is exactly zero, inf when out of reach); into
    ``out`` where given."""
    m, n = P.shape
    k = A.shape[1]
    best = cupy.empty(1, dtype=np.uint64) if out is None else out.view(np.uint64)
    best.data.memset_async(0, 8)
    blocks = max(1, min(RATIO_MAX_BLOCKS, -(-(m * n) // RATIO_THREADS)))
    i64, it = np.int64, A.itemsize
    bound_module(fmt).get_function("ozaki_ratio")(
        (blocks,), (RATIO_THREADS,),
        (P, i64(P.strides[0] // P.itemsize), i64(m), i64(n), nnz_rows, nnz_cols, np.float64(factor),
         A, i64(A.strides[0] // it), i64(A.strides[1] // it), B, i64(B.strides[0] // it), i64(B.strides[1] // it),
         i64(k), erow, ecol, np.float64(1 - (k + 3) * 2.0**-53), best))
    return best.view(np.float64)
