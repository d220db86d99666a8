"""``matmul``: C = alpha A B + beta C by split-K, for a tiny output and a huge inner dimension.

The inner dimension is cut into chunks (:mod:`gpu.splitk.plan`); each chunk's
product is independent, so one grid layer per chunk keeps the whole device busy
where the output alone would make a handful of blocks. The chunks then combine
in one of two ways:

* ``deterministic=True`` (the default): each chunk writes its partial to a
  workspace of ``chunks x m x n`` elements, and a reduction adds them in a fixed
  order; two runs give the same bits.
* ``deterministic=False``: the paper's way: C is scaled by beta first, then every
  chunk adds into C atomically; no workspace, but the order of the additions,
  so the last bits, vary from run to run on a GPU.

Either way the error is that of a sum of ``width`` terms plus one of ``chunks``
terms rather than one of k terms, so chunking tightens the usual bound:

    |C - (alpha A B + beta C0)| <= gamma_(width + chunks + 2) (|alpha| |A| |B| + |beta| |C0|)

componentwise, gamma_j = j u / (1 - j u), u the unit roundoff of the operands' dtype
(2**-53 for float64, 2**-24 for float32), plus |alpha| k eta where products underflow
(eta: the dtype's smallest subnormal). On the GPU the float32 kernels flush products and sums
below float32's normal range to zero, as CuPy compiles them (seen on the H200 with CuPy 14.2,
NVRTC's ``--ftz=false`` included), so there eta is 2**-126 for float32: operands whose products
fall below about 1e-38 lose them.

**alpha and beta** are applied in float64 whatever the operands' dtype, and the result
is rounded once to it: float32 operands take any finite alpha and beta (1e39 overflows
float32, 1e-46 vanishes in it; either gave infinity, NaN or zero where alpha A B + beta C
fits). The deterministic mode sums the chunks unscaled and applies alpha once, to the
total, as the library GEMM does; the atomic mode adds each chunk's alpha A_h B_h. The
result is finite wherever |A| |B| and |alpha| |A| |B| + |beta| |C| are below the dtype's
largest value (the library GEMM's own condition); the deterministic mode is also finite
where chunks that cancel would overflow when scaled one by one. With alpha = 0, A and B
are not read (beta C, as the BLAS gives it, even where they hold NaN or infinity).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..backend import Array, Backend, blas, check_output, get_backend, matrix_pair, require_finite, require_memory
from . import ops as _ops  # noqa: F401  (registers the "splitk" operations)
from .plan import SplitPlan, check_worth, plan

NONFINITE = "NaN and infinity then flow through the chunk sums as through any GEMM"


def _scalar(name: str, value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return x


def prepare(be: Backend, A: Any, B: Any, alpha: Any, beta: Any, out: Any, check_finite: bool
            ) -> tuple[Array, Array, Array | None, float, float]:
    """A, B, out, alpha and beta after every check, before any work."""
    A, B, _, _ = matrix_pair(be, A, B)
    blas.check_dtypes(("A", A), ("B", B))
    be.layout(A, "A")
    be.layout(B, "B")
    alpha, beta = _scalar("alpha", alpha), _scalar("beta", beta)
    C = check_output(be, out, (A.shape[0], B.shape[1]), A.dtype, {"A": A, "B": B})
    if C is not None:
        be.layout(C, "out")
    if beta != 0 and C is None:
        raise ValueError(f"beta = {beta} scales the C it is given: pass that C as out=")
    require_finite(be, check_finite, {"A": A, "B": B, **({"out": C} if beta != 0 else {})}, NONFINITE)
    return A, B, C, alpha, beta


def matmul(A: Any, B: Any, *, alpha: float = 1.0, beta: float = 0.0, out: Any = None, chunks: int | str = "auto",
           chunk_width: int | None = None, deterministic: bool = True, backend: str | Backend = "auto",
           check_finite: bool = False) -> Array:
    """``alpha * A @ B + beta * out`` by split-K, into ``out`` where given (a new array otherwise).

    A is m x k and B is k x n, float64 or float32, row- or column-major views with
    a leading dimension; m x n must be small and k large (:func:`gpu.splitk.plan.check_worth`
    says where, and why the library GEMM is the call elsewhere). ``chunks`` (a count, or
    ``"auto"``: whole waves of the occupancy formula) or ``chunk_width`` cut k;
    ``deterministic`` picks the reduction (see the module notes). A and B are never written.
    Raises TypeError and ValueError for bad operands, scalars, ``out``, chunking or shapes,
    and :class:`gpu.backend.MemoryPlanError` where the workspace would not fit: all before any work.
    """
    be = get_backend(backend)
    A, B, C, alpha, beta = prepare(be, A, B, alpha, beta, out, check_finite)
    (m, k), n = A.shape, B.shape[1]
    check_worth(m, n, k)
    ops = be.ops("splitk")
    split = plan(m, n, k, ops.limits(), ops.kernel(A.dtype, m, n), chunks=chunks, chunk_width=chunk_width,
                 deterministic=deterministic)
    itemsize = np.dtype(A.dtype).itemsize
    need = (split.workspace_elements() + (0 if C is not None else m * n)) * itemsize
    require_memory(be, need, f"split-K of {m} x {k} x {n} in {split.chunks} chunks",
                   "use deterministic=False (no workspace) or fewer chunks")
    C = be.xp.empty((m, n), dtype=A.dtype) if C is None else C
    run(be, ops, split, A, B, C, alpha, beta)
    return C


def run(be: Backend, ops: Any, split: SplitPlan, A: Array, B: Array, C: Array, alpha: float, beta: float) -> None:
    """The one executor of every plan: unscaled partials and a reduction that applies alpha and beta once, or
    scaling by beta and atomic accumulation of each chunk's alpha A_h B_h; beta C alone where alpha is 0."""
    if not C.size:
        return
    if alpha == 0:                       # beta C, A and B not read: the BLAS's rule (no 0 * NaN or 0 * inf)
        ops.scale(C, beta)
        return
    with np.errstate(over="ignore", invalid="ignore"):   # NaN and overflow flow on silently, as in a GEMM
        if split.deterministic:
            P = be.xp.empty((split.chunks, split.m, split.n), dtype=C.dtype)
            ops.partials(A, B, P, split, 1.0)
            ops.reduce(P, C, split, alpha, beta)
        else:
            ops.scale(C, beta)
            ops.accumulate(A, B, C, split, alpha)
