"""A complex128 product A B from real float64 products, in one of two schemes (:data:`SCHEMES`).

* ``"4m"``: the four real products of the definition, taken as two real products over twice the inner
  dimension, Re C = [Re A, -Im A] [Re B; Im B] and Im C = [Re A, Im A] [Im B; Re B]: each part is one real
  inner product of 2k terms, so a real method's componentwise bound gamma_2k (|Re A||Re B| + |Im A||Im B|) is
  the complex GEMM's own, and a scaled method (Ozaki scheme II) scales the real and imaginary parts of a row
  together. It reads stacked copies of A and B (twice each operand's memory).
* ``"3m"`` (Karatsuba, as cuBLAS's ZGEMM3M): T1 = Re A Re B, T2 = Im A Im B, T3 = (Re A + Im A)(Re B + Im B);
  Re C = T1 - T2 and Im C = T3 - T1 - T2: three real products of k terms for four, at the cost of a weaker bound
  on the imaginary part, which is bounded by (|Re A| + |Im A|)(|Re B| + |Im B|) rather than by the terms of its
  own sum (Higham, *Accuracy and Stability*, sec. 23.2.4).

**3M's bound over a real method with a matrix-scale bound** (Strassen's, :func:`bound_3m`): where every entry of
the method's product X Y is within t k max|X| max|Y| of the exact one (Strassen: t = c_S u / k,
:func:`gpu.frontdoor.contract.strassen`), every entry of both parts of C is within bound_3m(t) k a b of the exact
product, with a = max|Re A| + max|Im A| and b = max|Re B| + max|Im B|.

``real`` is the real product: a callable ``real(A, B)`` of two float64 arrays of the backend returning their
product as such an array (``functools.partial(gpu.ozaki2.matmul, moduli=15)``, ``gpu.strassen.matmul``...), by
default the backend's library GEMM. Real operands count as complex with a zero imaginary part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Array, Backend, check_output, get_backend, matrix_pair, require_memory
from ..backend.plans import freeing_kept_plans

SCHEMES = ("4m", "3m")
#: The complex dtypes a product takes (complex64 operands are widened: their parts float64 holds exactly).
DTYPES = ("complex64", "complex128")

Real = Callable[[Array, Array], Array]


def real_product(be: Backend) -> Real:
    """The backend's library GEMM as a real product (a new C per call)."""
    return lambda A, B: be.xp.matmul(A, B)


def bound_3m(t: float) -> float:
    """beta of 3M over a real product whose entries are within t k max|X| max|Y| of the exact ones (see the
    module): |C - AB| <= beta k a b on both parts. With a_r = max|Re A| and so on (a_r b_r + a_i b_i <= ab):
    T1 and T2 err by at most t k a_r b_r and t k a_i b_i; the sums Re A + Im A and Re B + Im B round to at most
    a (1 + u) and b (1 + u), so T3 errs from (Re A + Im A)(Re B + Im B) by at most t k a b (1 + u)^2 (the method)
    plus k a b (2u + u^2) (the sums). Every |T| is at most M = k a b (1 + u)^2 (1 + t), so the two subtractions
    of Im C = (T3 - T1) - T2 round by at most 2uM and 3uM(1 + u); Re C = T1 - T2 errs less. Hence
    beta = t (1 + u)^2 + t + 2u + u^2 + 5u (1 + u)^3 (1 + t)."""
    u = 2.0**-53
    return t * (1 + u) ** 2 + t + 2 * u + u * u + 5 * u * (1 + u) ** 3 * (1 + t)


def is_complex(A: Any, B: Any) -> bool:
    """Whether either operand has a complex dtype (read from ``dtype`` where there is one: a device array refuses
    conversion to NumPy)."""
    return any(np.dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype).kind == "c" for x in (A, B))


def check_dtype(X: Array, name: str) -> None:
    """TypeError unless X is complex64, complex128 or real."""
    if X.dtype.kind == "c" and X.dtype.name not in DTYPES:
        raise TypeError(f"{name} has dtype {X.dtype}, which complex128 may not hold exactly; pass complex64 or "
                        "complex128")
    if X.dtype.kind not in "fiuc":
        raise TypeError(f"{name} has dtype {X.dtype}; a complex product takes complex or real numbers")


def parts(be: Backend, X: Array, name: str) -> tuple[Array, Array]:
    """(real, imaginary) parts of X as C-ordered float64 arrays (a zero imaginary part for a real X)."""
    check_dtype(X, name)
    xp = be.xp
    if X.dtype.kind == "c":
        return xp.ascontiguousarray(X.real, dtype=np.float64), xp.ascontiguousarray(X.imag, dtype=np.float64)
    return xp.ascontiguousarray(X, dtype=np.float64), xp.zeros(X.shape)


def matmul(A: Any, B: Any, *, scheme: str = "4m", real: Real | None = None, out: Array | None = None,
           backend: str | Backend = "auto") -> Array:
    """``A @ B`` in complex128 from real products (see the module): into ``out`` (a complex128 array of the
    backend) where given, else a new array. TypeError and ValueError before any work for bad schemes, dtypes,
    shapes and outputs."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(map(repr, SCHEMES))} (four or three real products), "
                         f"not {scheme!r}")
    be = get_backend(backend)
    A, B, _, _ = matrix_pair(be, A, B)
    (m, k), n = A.shape, B.shape[1]
    check_dtype(A, "A")
    check_dtype(B, "B")
    if out is not None:
        check_output(be, out, (m, n), np.complex128, {"A": A, "B": B})
    _require_memory(be, m, k, n, scheme, out is not None)
    (ar, ai), (br, bi) = parts(be, A, "A"), parts(be, B, "B")
    product = real or real_product(be)
    re, im = (_four if scheme == "4m" else _three)(be, ar, ai, br, bi, product)
    C = be.xp.empty((m, n), dtype=np.complex128) if out is None else out
    C.real, C.imag = re, im
    return C


def _require_memory(be: Backend, m: int, k: int, n: int, scheme: str, has_out: bool) -> None:
    """:class:`~gpu.backend.MemoryPlanError` before any work where the parts, their sums or stacked copies, the
    real products and C cannot be had, once more after freeing the plans every family keeps (the toolkit's own
    caches must not refuse a caller's product)."""
    copies = 8 * 2 * (m * k + k * n) + (8 * 2 * (m * k + k * n) if scheme == "4m" else 8 * (m * k + k * n))
    what = (f"the complex {m} x {k} x {n} product by {scheme.upper()} (the parts of A and B, their "
            f"{'stacked copies' if scheme == '4m' else 'sums'}, the real products and C), beside the real "
            "method's own workspace")
    advice = ("" if has_out else "pass out=, ") + ("use scheme='3m' (no stacked copies), " if scheme == "4m" else "")
    freeing_kept_plans(lambda: require_memory(be, copies + 8 * 3 * m * n + (0 if has_out else 16 * m * n), what,
                                              advice + "or split the product into blocks of rows"))


def _four(be: Backend, ar: Array, ai: Array, br: Array, bi: Array, product: Real) -> tuple[Array, Array]:
    xp = be.xp
    re = product(xp.concatenate([ar, -ai], axis=1), xp.concatenate([br, bi], axis=0))
    im = product(xp.concatenate([ar, ai], axis=1), xp.concatenate([bi, br], axis=0))
    return re, im


def _three(be: Backend, ar: Array, ai: Array, br: Array, bi: Array, product: Real) -> tuple[Array, Array]:
    t1, t2 = product(ar, br), product(ai, bi)
    t3 = product(ar + ai, br + bi)
    t3 -= t1
    t3 -= t2
    t1 -= t2
    return t1, t3
