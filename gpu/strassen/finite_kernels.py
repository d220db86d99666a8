"""The CuPy repair of Strassen's non-finite entries (see :mod:`gpu.strassen.finite`): one kernel, no wait.

Each thread takes entries of C along C's contiguous axis (so that the read of a finite C is coalesced) and
recomputes a non-finite one as the dot product of A's row and B's column in C's precision, with fused
multiply-adds in order of k: NaN where a term is NaN or inf * 0 or where infinities of both signs meet, the
infinity otherwise, and a finite value within gamma_k |A| |B| where the additions alone had overflowed.
Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Array, Backend

_CTYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}
#: Threads per block, and the most blocks (a grid-stride loop covers the rest).
THREADS, MAX_BLOCKS = 256, 4096

SOURCE = r"""
template <typename T>
__global__ void strassen_repair(const T* __restrict__ A, long long sa0, long long sa1,
                                const T* __restrict__ B, long long sb0, long long sb1,
                                T* C, long long sc0, long long sc1, long long m, long long n, long long k,
                                int columns_first)
{
    const long long total = m * n;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < total;
         o += (long long)gridDim.x * blockDim.x) {
        const long long i = columns_first ? o % m : o / n, j = columns_first ? o / m : o % n;
        T* c = C + i * sc0 + j * sc1;
        if (isfinite(*c)) continue;
        T acc = T(0);
        for (long long l = 0; l < k; ++l) acc = fma(A[i * sa0 + l * sa1], B[l * sb0 + j * sb1], acc);
        *c = acc;
    }
}
"""


@cache
def _kernel(dtype: np.dtype) -> Any:
    name = f"strassen_repair<{_CTYPES[np.dtype(dtype)]}>"
    return cupy.RawModule(code=SOURCE, options=("--std=c++14",), name_expressions=(name,)).get_function(name)


def _strides(X: Array) -> tuple[np.int64, np.int64]:
    return tuple(np.int64(s // X.itemsize) for s in X.strides)


class CudaRepair:
    """The repair on CuPy arrays (see the module notes)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def repair(self, A: Array, B: Array, C: Array) -> None:
        """Launch the repair of C = A B on the current stream (nothing waits for it)."""
        (m, k), n = A.shape, B.shape[1]
        if not C.size:
            return
        columns_first = np.int32(C.strides[0] == C.itemsize and C.strides[1] != C.itemsize)
        blocks = (max(1, min(MAX_BLOCKS, -(-(m * n) // THREADS))),)
        _kernel(C.dtype)(blocks, (THREADS,), (A, *_strides(A), B, *_strides(B), C, *_strides(C), np.int64(m),
                                              np.int64(n), np.int64(k), columns_first))
