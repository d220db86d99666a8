"""GEMM calls checked once per operand signature, for plans: only the addresses are looked at per call.

:class:`GemmCall` is :meth:`gpu.backend.Backend.gemm` with its checks done: per call the overlap test of the
addresses and the BLAS call. :func:`product_call` is a plan's level-0 product: where the backend's own
``matmul`` is the library GEMM on the operands' layout (:attr:`gpu.backend.Backend.matmul_is_gemm`: CuPy's, on
C- or F-contiguous operands, one cuBLAS call with CuPy's handle), that call itself, so a default call whose
product is one GEMM costs the host what ``cupy.matmul`` does plus the plan's lookup; elsewhere a
:class:`GemmCall` (views with a leading dimension, and NumPy, whose tests compare against the backend's GEMM).
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


def _whole(x: Array) -> bool:
    flags = x.flags
    return flags.c_contiguous or flags.f_contiguous


def product_call(be: Any, A: Array, B: Array, out: Array | None) -> Callable[[Array, Array, Any], Array]:
    """``(A, B, out) -> C`` for operands of this signature (see the module); a new C where ``out`` is None,
    :class:`MemoryPlanError` before any work where the device cannot hold it."""
    shape, dtype = (A.shape[0], B.shape[1]), A.dtype
    if out is None:
        from .checks import MemoryPlanError, gib, nbytes, require_memory
        memory = (nbytes(shape, dtype), f"the {shape[0]} x {shape[1]} output",
                  "pass out= (an array you allocated), or split the product into blocks of rows")
        if not (be.matmul_is_gemm and _whole(A) and _whole(B)):
            def checked(A: Array, B: Array, out: Any = None) -> Array:
                require_memory(be, *memory)         # host memory: an allocation past it need not fail at once
                return be.product(A, B)
            return checked
        matmul = be.xp.matmul

        def new(A: Array, B: Array, out: Any = None) -> Array:
            try:
                return matmul(A, B)
            except MemoryError:                     # the device's allocation of C fails before the GEMM
                raise MemoryPlanError(f"{memory[1]} needs {gib(memory[0])}, which the {be.name} device cannot "
                                      f"give; {memory[2]}") from None
        return new
    if be.matmul_is_gemm and _whole(A) and _whole(B) and _whole(out):
        matmul = be.xp.matmul
        return lambda A, B, out: matmul(A, B, out=out)
    call = be.gemm_call(A, B, out)

    def into(A: Array, B: Array, out: Array) -> Array:
        call(A, B, out)
        return out
    return into
