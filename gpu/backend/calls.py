"""GEMM calls checked once per operand signature, for plans: only the addresses are looked at per call.

:class:`GemmCall` is :meth:`gpu.backend.Backend.gemm` with its checks done: per call the overlap test of the
addresses and the BLAS call. (A Strassen plan's level-0 product runs on it; CuPy's own ``cupy.matmul`` in its
place was measured on the H200 and lost: 0.54-0.73x DGEMM as called at N = 768-1024 with ``out=``, against
0.99-1.00x on this path, whose host work is smaller.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any


class GemmCall:
    """One checked GEMM signature (:meth:`gpu.backend.Backend.gemm_call`): per call, the addresses and the BLAS
    call. Operands whose bytes meet take :meth:`~gpu.backend.Backend.gemm`'s full check, which refuses a real
    overlap."""

    __slots__ = ("backend", "plan", "dtype", "alpha", "beta")

    def __init__(self, backend: Any, plan: Any, dtype: np.dtype, alpha: float, beta: float) -> None:
        self.backend, self.plan, self.dtype, self.alpha, self.beta = backend, plan, dtype, alpha, beta

    def __call__(self, A: Array, B: Array, C: Array) -> None:
        if self.plan.call is None:
            return
        be = self.backend
        bound = self.plan.bind(be.pointer(A), be.pointer(B), be.pointer(C))
        if bound is None:
            be.gemm(A, B, C, self.alpha, self.beta)
        else:
            be._gemm(self.dtype, bound, self.alpha, self.beta)
