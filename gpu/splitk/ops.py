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

    def partials(self, A: Array, B: Array, P: Array, plan: SplitPlan, alpha: float) -> None:
        """P[h] = alpha A_h B_h for every chunk h."""
        for h, (s, e) in enumerate(plan.bounds()):
            self.backend.gemm(A[:, s:e], B[s:e, :], P[h], alpha, 0.0)

    def reduce(self, P: Array, C: Array, plan: SplitPlan, beta: float) -> None:
        """C = sum of the partials in the plan's order, plus beta C (C ignored where beta is 0)."""
        p, g = plan.chunks, plan.group
        for first in range(0, p, g):
            for h in range(first + 1, min(first + g, p)):
                P[first] += P[h]
        for first in range(g, p, g):
            P[0] += P[first]
        if beta == 0:
            C[...] = P[0]
        else:
            C[...] = P[0] + beta * C

    def scale(self, C: Array, beta: float) -> None:
        """C = beta C before the atomic additions (zeros where beta is 0, whatever C held)."""
        if beta == 0:
            C.fill(0)
        else:
            np.multiply(C, beta, out=C)

    def accumulate(self, A: Array, B: Array, C: Array, plan: SplitPlan, alpha: float) -> None:
        """C += alpha A_h B_h for every chunk (in chunk order here; in any order on a GPU)."""
        for s, e in plan.bounds():
            self.backend.gemm(A[:, s:e], B[s:e, :], C, alpha, 1.0)


register_ops(FAMILY, "numpy", HostOps)
register_ops(FAMILY, "cupy", "gpu.splitk.kernels:CudaOps")
