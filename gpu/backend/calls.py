"""GEMM calls checked once per operand signature, for plans: only the addresses are looked at per call.

:class:`GemmCall` is :meth:`gpu.backend.Backend.gemm` with its checks done: per call the overlap test of the
addresses and the BLAS call. :func:`product_call` is a plan's level-0 product. (CuPy's own ``cupy.matmul`` in
its place was measured on the H200 and lost: 0.54-0.73x DGEMM as called at N = 768-1024 with ``out=``, against
0.99-1.00x through :class:`GemmCall`'s path, whose host work is smaller.)
"""

from __future__ import annotations

from collections.abc import Callable
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


def product_call(be: Any, A: Array, B: Array, out: Array | None) -> Callable[[Array, Array, Any], Array]:
    """``(A, B, out) -> C`` for operands of this signature (see the module): into ``out`` by a
    :class:`GemmCall`; without ``out``, the backend's own product into a new C after the memory check of C
    (:class:`gpu.backend.MemoryPlanError` before any work where it does not fit)."""
    if out is None:
        from .checks import nbytes, require_memory
        shape = (A.shape[0], B.shape[1])
        memory = (nbytes(shape, A.dtype), f"the {shape[0]} x {shape[1]} output",
                  "pass out= (an array you allocated), or split the product into blocks of rows")

        def new(A: Array, B: Array, out: Any = None) -> Array:
            require_memory(be, *memory)
            return be.product(A, B)
        return new
    call = be.gemm_call(A, B, out)

    def into(A: Array, B: Array, out: Array) -> Array:
        call(A, B, out)
        return out
    return into
