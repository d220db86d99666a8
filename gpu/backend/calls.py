"""GEMM calls checked once per operand signature, for plans: only the addresses are looked at per call.

:class:`GemmCall` is :meth:`gpu.backend.Backend.gemm` with its checks done: per call the overlap test of the
addresses and the BLAS call. (A Strassen plan's level-0 product runs on it; CuPy's own ``cupy.matmul`` in its
place was measured on the H200 and lost: 0.54-0.73x DGEMM as called at N = 768-1024 with ``out=``, against
0.99-1.00x on this path, whose host work is smaller.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from . import blas

Array = Any


class GemmCall:
    """One checked GEMM signature (:meth:`gpu.backend.Backend.gemm_call`): per call, the addresses and the BLAS
    call, issued by the backend's :meth:`~gpu.backend.Backend.gemm_issuer` (its scalars and function looked up
    once). Operands whose bytes meet take :meth:`~gpu.backend.Backend.gemm`'s full check, which refuses a real
    overlap."""

    __slots__ = ("backend", "plan", "dtype", "alpha", "beta", "issue")

    def __init__(self, backend: Any, plan: Any, dtype: np.dtype, alpha: float, beta: float) -> None:
        self.backend, self.plan, self.dtype, self.alpha, self.beta = backend, plan, dtype, alpha, beta
        self.issue = None if plan.call is None else backend.gemm_issuer(dtype, plan.call, alpha, beta)

    def __call__(self, A: Array, B: Array, C: Array) -> None:
        if self.issue is None:
            return
        be = self.backend
        pc = be.pointer(C)
        operands = self.plan.addresses(be.pointer(A), be.pointer(B), pc)
        if operands is None:
            be.gemm(A, B, C, self.alpha, self.beta)
        else:
            self.issue(*operands, pc)


def host_scalars(dtype: np.dtype, alpha: float, beta: float) -> tuple[int, int]:
    """Host addresses of alpha and beta as ``dtype`` for a cuBLAS call (read by the call itself, or by
    value when captured), kept per value: making two NumPy scalars cost a few microseconds a call."""
    return _scalar(dtype, alpha, math.copysign(1.0, alpha))[1], _scalar(dtype, beta, math.copysign(1.0, beta))[1]


@lru_cache(maxsize=64)
def _scalar(dtype: np.dtype, value: float, sign: float) -> tuple[np.ndarray, int]:
    held = np.array(value, dtype)
    return held, held.ctypes.data


def new_output_product(backend: Any, A: Array, B: Array, check: Callable[[], None]) -> Callable[..., Array]:
    """``(A, B, out=None) -> A @ B`` into a new C per call for operands of A's and B's signature: A and B checked
    here (kind, dtype, inner dimension), the :class:`GemmCall` built on the first call's C. No trial C is
    allocated: a kept plan's workspace may hold that memory until the call hands it back (a 16 GB trial C at
    N = 45056 on the H200 did not fit beside one). ``check`` raises where the allocation fails for want of
    memory (:meth:`gpu.backend.Backend.new_output`)."""
    backend.layout(A, "A"), backend.layout(B, "B")
    shape, dtype, ndarray = (A.shape[0], B.shape[1]), A.dtype, backend.xp.ndarray
    blas.check_dtypes(("A", A), ("B", B))
    blas.check_inner(A, B)
    call = None

    def new(A: Array, B: Array, out: Array = None) -> Array:
        nonlocal call
        try:
            C = ndarray(shape, dtype)                   # cupy.empty's own call, one frame fewer
        except MemoryError:
            check()
            raise
        if call is None:
            call = backend.gemm_call(A, B, C)
        call(A, B, C)
        return C
    return new
