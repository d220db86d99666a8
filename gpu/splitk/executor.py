"""The one executor of every split-K product: the chunk partials and their reduction, or the atomic mode.

:func:`run` issues a split (:class:`gpu.splitk.plan.SplitPlan`) through operations that follow
:class:`gpu.splitk.ops.HostOps`' calls: a backend's operations (``backend.ops("splitk")``, which look their
kernels up per call), or those operations bound to one plan (``ops.bind``: looked up once, as
:class:`gpu.splitk.Plan` keeps them). On the GPU every call only enqueues work on the current stream.
"""

from __future__ import annotations

from typing import Any

from ..backend import Array, Backend
from .plan import SplitPlan


def run(be: Backend, ops: Any, split: SplitPlan, A: Array, B: Array, C: Array, alpha: float, beta: float,
        workspace: Array | None = None) -> None:
    """C = alpha A B + beta C by ``split``: unscaled partials into ``workspace`` (``split.chunks x m x n`` of C's
    dtype; one from the memory pool where None) and a reduction that applies alpha and beta once, or scaling
    by beta and atomic accumulation of each chunk's alpha A_h B_h; beta C alone where alpha is 0."""
    if not C.size:
        return
    if alpha == 0:                       # beta C, A and B not read: the BLAS's rule (no 0 * NaN or 0 * inf)
        ops.scale(C, beta)
        return
    if split.deterministic:
        P = be.xp.empty((split.chunks, split.m, split.n), dtype=C.dtype) if workspace is None else workspace
        ops.partials(A, B, P, split, 1.0)
        ops.reduce(P, C, split, alpha, beta)
    else:
        ops.scale(C, beta)
        ops.accumulate(A, B, C, split, alpha)
