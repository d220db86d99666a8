"""The one executor of every split-K product: the chunk partials and their reduction, or the atomic mode.

:func:`run` issues a split (:class:`gpu.splitk.plan.SplitPlan`) through operations that follow
:class:`gpu.splitk.ops.HostOps`' calls: a backend's operations (``backend.ops("splitk")``, which look their
kernels up per call), or those operations bound to one plan (``ops.bind``: looked up once, as
:class:`gpu.splitk.Plan` keeps them). On the GPU every call only enqueues work on the current stream.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..backend import Array, Backend
from .plan import SplitPlan


class Workspace(NamedTuple):
    """The deterministic mode's workspace, one allocation: ``partials`` (chunks x m x n of C's dtype) and
    ``counters`` (uint32, zero between calls: the fused reduction counts the chunks that arrived in them)."""

    partials: Array
    counters: Array


def workspace(be: Backend, split: SplitPlan, dtype: Any) -> Workspace:
    """A new workspace for ``split`` (:meth:`SplitPlan.workspace_elements` elements of ``dtype``), its counters
    zeroed."""
    whole = be.xp.empty(split.workspace_elements(), dtype=dtype)
    tail = whole[split.partial_elements():]
    tail.fill(0)
    return Workspace(whole[:split.partial_elements()].reshape(split.chunks, split.m, split.n), tail.view(np.uint32))


def run(be: Backend, ops: Any, split: SplitPlan, A: Array, B: Array, C: Array, alpha: float, beta: float,
        W: Workspace | None = None) -> None:
    """C = alpha A B + beta C by ``split``: unscaled partials into the workspace ``W`` (a new one where None)
    reduced in the plan's order with alpha and beta applied once (``ops.product``), or scaling by beta and
    atomic accumulation of each chunk's alpha A_h B_h; beta C alone where alpha is 0."""
    if not C.size:
        return
    if alpha == 0:                       # beta C, A and B not read: the BLAS's rule (no 0 * NaN or 0 * inf)
        ops.scale(C, beta)
        return
    if split.deterministic:
        ops.product(A, B, workspace(be, split, C.dtype) if W is None else W, C, split, alpha, beta)
    else:
        ops.scale(C, beta)
        ops.accumulate(A, B, C, split, alpha)
