"""Split-K's operations per backend: the chunk partials, their fixed-order reduction, and the atomic mode.

:func:`gpu.splitk.matmul` is written once; what differs between the CPU and the
GPU is fetched as ``backend.ops("splitk")``: :class:`HostOps` here (NumPy: one
BLAS call per chunk on views of A and B, no copy), and
:class:`gpu.splitk.kernels.CudaOps` (one CUDA kernel with a 3-D grid, loaded
only with CuPy). Both add the partials in the order :class:`gpu.splitk.plan.SplitPlan`
fixes, so each is bitwise reproducible run to run.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..backend import Array, Backend, register_ops
from .occupancy import Kernel, SMLimits
from .plan import SplitPlan
from .plan import plan as split_plan

FAMILY = "splitk"
#: Output tile of one block (rows and columns).
TILE = 16


class HostOps:
    """Split-K on NumPy: a CPU core stands for an SM running one block at a time."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def limits(self) -> SMLimits:
        return SMLimits(threads=1, shared_bytes=0, registers=1, blocks=1, sm_count=os.cpu_count() or 1)

    def kernel(self, dtype: Any, m: int, n: int) -> Kernel:
        return Kernel(threads=1, shared_bytes=0, registers_per_thread=1, tile=TILE)

    def split(self, dtype: Any, m: int, n: int, k: int, **how: Any) -> SplitPlan:
        """:func:`gpu.splitk.plan.plan` with these limits and this kernel (``how``: its keywords)."""
        return split_plan(m, n, k, self.limits(), self.kernel(dtype, m, n), **how)

    def bind(self, split: SplitPlan, A: Array, B: Array, out: Array | None = None) -> HostOps:
        """These operations for ``split`` and operands of these layouts: themselves (NumPy has nothing to look
        up once; the CUDA operations bind their kernels here)."""
        return self

    def partials(self, A: Array, B: Array, P: Array, plan: SplitPlan, alpha: float) -> None:
        """P[h] = alpha A_h B_h for every chunk h (:func:`gpu.splitk.run` passes alpha = 1: see
        :meth:`reduce`)."""
        for h, (s, e) in enumerate(plan.bounds()):
            self.backend.gemm(A[:, s:e], B[s:e, :], P[h], alpha, 0.0)

    def reduce(self, P: Array, C: Array, plan: SplitPlan, alpha: float, beta: float) -> None:
        """C = alpha (the sum of the partials in the plan's order) + beta C (C ignored where beta is 0),
        the scalars applied in float64 (:func:`scaled`)."""
        p, g = plan.chunks, plan.group
        with np.errstate(over="ignore", invalid="ignore"):      # NaN and overflow flow on, as in a GEMM
            for first in range(0, p, g):
                for h in range(first + 1, min(first + g, p)):
                    P[first] += P[h]
            for first in range(g, p, g):
                P[0] += P[first]
        C[...] = scaled(alpha, P[0], beta, C)

    def scale(self, C: Array, beta: float) -> None:
        """C = beta C before the atomic additions (zeros where beta is 0, whatever C held)."""
        if beta == 0:
            C.fill(0)
        elif beta != 1:
            C[...] = scaled(beta, C)

    def accumulate(self, A: Array, B: Array, C: Array, plan: SplitPlan, alpha: float) -> None:
        """C += alpha A_h B_h for every chunk (in chunk order here; in any order on a GPU), each chunk's
        alpha A_h B_h rounded once from float64 where alpha is not 1 (float32 cannot hold every alpha)."""
        partial = None if alpha == 1 else np.empty(C.shape, dtype=C.dtype)
        for s, e in plan.bounds():
            if partial is None:
                self.backend.gemm(A[:, s:e], B[s:e, :], C, 1.0, 1.0)
            else:
                self.backend.gemm(A[:, s:e], B[s:e, :], partial)
                with np.errstate(over="ignore", invalid="ignore"):
                    C += scaled(alpha, partial)


def scaled(alpha: float, X: Array, beta: float = 0.0, C: Array | None = None) -> Array:
    """alpha X + beta C computed in float64 and rounded once to X's dtype (C not read where beta is 0): a
    float32 product takes any finite alpha and beta, as the CUDA kernels do, where float32 scalars would
    overflow (1e39) or vanish (1e-46). Overflow of the result itself gives infinity silently, as in a GEMM;
    X itself where alpha is 1 and beta 0 (1 x is x: nothing to compute)."""
    if alpha == 1 and beta == 0:
        return X
    with np.errstate(over="ignore", invalid="ignore"):
        total = alpha * X.astype(np.float64, copy=False)
        if beta != 0:
            total = total + beta * C.astype(np.float64, copy=False)
        return total.astype(X.dtype, copy=False)


register_ops(FAMILY, "numpy", HostOps)
register_ops(FAMILY, "cupy", "gpu.splitk.kernels:CudaOps")
