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

from typing import Any

from ..backend import Array, Backend, get_backend, matrix_pair
from ..backend.plans import PlanCache, operand_signature, resolve_options
from .executor import run
from .matmul_plan import NONFINITE, Options, Plan, scalar

__all__ = ["NONFINITE", "PLANS", "Options", "Plan", "matmul", "run", "scalar"]

#: The plans :func:`matmul` keeps, one per operand signature and options (each holds its workspace: clear
#: it to hand that memory back).
PLANS = PlanCache()


def matmul(A: Any, B: Any, *, alpha: float = 1.0, beta: float = 0.0, out: Any = None, chunks: int | str | None = None,
           chunk_width: int | None = None, deterministic: bool | None = None, backend: str | Backend = "auto",
           check_finite: bool | None = None, options: Options | dict | None = None) -> Array:
    """``alpha * A @ B + beta * out`` by split-K, into ``out`` where given (a new array otherwise).

    A is m x k and B is k x n, float64 or float32, row- or column-major views with
    a leading dimension; m x n must be small and k large (:func:`gpu.splitk.plan.check_worth`
    says where, and why the library GEMM is the call elsewhere). ``chunks`` (a count, or
    ``"auto"``, the default: whole waves of the occupancy formula) or ``chunk_width`` cut k;
    ``deterministic`` (default True) picks the reduction (see the module notes); ``check_finite``
    (default False) refuses NaN and infinity before any work. ``options``: the same fields as one
    :class:`Options` (or a dict of them); keywords given beside it replace its fields. A and B are
    never written. alpha and beta are host numbers, per call; ``beta != 0`` needs ``out``.

    The call is a :class:`Plan` kept per operand signature and options (:data:`PLANS`) plus its
    execution: a repeated call checks alpha, beta and ``out``'s overlap with A and B, then launches,
    with no wait for the device unless ``check_finite=True``.
    Raises TypeError and ValueError for bad operands, scalars, ``out``, chunking or shapes,
    and :class:`gpu.backend.MemoryPlanError` where the workspace would not fit: all before any work.
    """
    be = get_backend(backend)
    signature = operand_signature(be, A, B, out)
    if signature is None:                 # not plain arrays of the backend: kept by their converted form
        A, B, _, _ = matrix_pair(be, A, B)
        signature = operand_signature(be, A, B, out)
    key = None if signature is None else (signature, options, chunks, chunk_width, deterministic, check_finite)
    plan = PLANS.get(key, lambda: Plan(A, B, out=out, backend=be, options=resolve_options(
        Options, options, chunks=chunks, chunk_width=chunk_width, deterministic=deterministic,
        check_finite=check_finite)))
    return plan._execute(A, B, out, alpha, beta)
