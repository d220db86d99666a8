"""Each method's documented error bound, as the largest |C - R| allowed per entry (float64 arrays).

Every bound takes ``(A, B, C, exact, options, C0)``: the operands, the method's result, the correctly rounded
``A @ B`` (:func:`accuracy.reference.exact_matmul`), the call's options and the ``out`` it started from
(split-K's beta C), and returns ``(R, allowed)``: the reference the result is held to and the bound. Each adds
what the reference's own rounding may be off by (2**-53 |AB| where it is rounded to float64), and allows
anything where the exact result is beyond the dtype's range (an overflow is the right answer there).

* the library GEMM (``gpu.backend``'s ``gemm``; the out-of-core engine and the Dask product, which add the
  library's products): |C - AB| <= gamma_k |A||B| + 2 k eta componentwise (Higham, *Accuracy and Stability
  of Numerical Algorithms*, 2nd ed., eq. 3.13; eta the least subnormal, for products that underflow);
* Strassen (``gpu.strassen.api``, "Accuracy"): normwise, max |C - AB| <= (18**L (n0**2 + 6 n0) + 2 k**2)
  u max|A| max|B| for L levels on a core of side s, n0 = s / 2**L (Higham sec. 23.2.2, Winograd's form);
* split-K (``gpu.splitk.api``): gamma_(width + chunks + 2) (|alpha||A||B| + |beta||C0|) componentwise;
* Ozaki scheme II (``gpu.ozaki2.api``): with a count given, E |A||B| + 2**-53 |C|, E its proven componentwise
  bound (:func:`gpu.ozaki2.auto.predicted_error`, which holds for any count); with ``moduli="auto"``,
  t ||a_i||_2 ||b_j||_2 + 2**-53 |C_ij|, t the target (:mod:`gpu.ozaki2.normwise`, the default bound).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from accuracy.reference import exact_matmul
from gpu import splitk as splitk_pkg
from gpu.backend import get_backend
from gpu.ozaki.plan import target_value
from gpu.ozaki2 import normwise
from gpu.ozaki2.api import line_stats
from gpu.ozaki2.auto import predicted_error
from gpu.ozaki2.bounds import bounds
from gpu.ozaki2.moduli import moduli_table
from gpu.ozaki2.scaling import code_parts, codes
from gpu.strassen.costs import core_side

HOST = get_backend("numpy")
U = {np.dtype(np.float64): 2.0**-53, np.dtype(np.float32): 2.0**-24}
ETA = {np.dtype(np.float64): 2.0**-1074, np.dtype(np.float32): 2.0**-149}
RANGE = {np.dtype(np.float64): float(np.finfo(np.float64).max), np.dtype(np.float32): float(np.finfo(np.float32).max)}
#: The reference's own rounding, relative: exact_matmul is correctly rounded to float64.
REF = 2.0**-53


def gamma(n: int, u: float) -> float:
    """gamma_n = n u / (1 - n u) (Higham's constant of an n-term sum)."""
    return n * u / (1 - n * u)


def magnitude(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """|A||B|, correctly rounded (relative error at most 2**-53)."""
    return exact_matmul(np.abs(A.astype(np.float64)), np.abs(B.astype(np.float64)), backend="numpy")


def _in_range(allowed: np.ndarray, size: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``allowed``, infinite where ``size`` (a magnitude the computation reaches) passes half the dtype's range."""
    return np.where(size < RANGE[np.dtype(dtype)] / 2, allowed, np.inf)


def gemm(A, B, C, exact, options: dict[str, Any], C0=None) -> tuple[np.ndarray, np.ndarray]:
    """The library GEMM's componentwise bound (any order of the k-term sums, with or without FMA)."""
    k, dtype = A.shape[1], np.dtype(C.dtype)
    size = magnitude(A, B)
    allowed = gamma(k, U[dtype]) * size * (1 + 2.0**-50) + 2 * k * ETA[dtype] + REF * np.abs(exact)
    return exact, _in_range(allowed, size, dtype)


def strassen(A, B, C, exact, options: dict[str, Any], C0=None) -> tuple[np.ndarray, np.ndarray]:
    """The normwise bound of an L-level Winograd product (see the module notes), the same for every entry."""
    (m, k), n, dtype = A.shape, B.shape[1], np.dtype(C.dtype)
    level = options["level"]
    s = core_side(m, k, n, level, options.get("fringe", "peel"))
    n0 = s // 2**level
    constant = 18**level * (n0 * n0 + 6 * n0) + 2 * k * k
    amax, bmax = float(np.abs(A).max(initial=0)), float(np.abs(B).max(initial=0))
    allowed = constant * U[dtype] * amax * bmax * (1 + 2.0**-40) + 18**level * k * ETA[dtype]
    allowed = np.full(exact.shape, allowed) + REF * np.abs(exact)
    return exact, _in_range(allowed, np.full(exact.shape, k * amax * bmax * 2**level), dtype)


def splitk(A, B, C, exact, options: dict[str, Any], C0=None) -> tuple[np.ndarray, np.ndarray]:
    """Split-K's componentwise bound with its plan's chunk width and count (see ``gpu.splitk.api``)."""
    (m, k), n, dtype = A.shape, B.shape[1], np.dtype(C.dtype)
    alpha, beta = options.get("alpha", 1.0), options.get("beta", 0.0)
    ops = HOST.ops("splitk")
    plan = splitk_pkg.plan(m, n, k, ops.limits(), ops.kernel(dtype, m, n), chunks=options.get("chunks", "auto"),
                           deterministic=options.get("deterministic", True))
    size = abs(alpha) * magnitude(A, B)
    want = alpha * exact
    if beta:
        size, want = size + abs(beta) * np.abs(C0.astype(np.float64)), want + beta * C0.astype(np.float64)
    terms = plan.width + plan.chunks + 2
    allowed = gamma(terms, U[dtype]) * size * (1 + 2.0**-50) + abs(alpha) * 2 * k * ETA[dtype] + 4 * REF * size
    return want, _in_range(allowed, np.maximum(size, magnitude(A, B)), dtype)


def ozaki(A, B, C, exact, options: dict[str, Any], C0=None) -> tuple[np.ndarray, np.ndarray]:
    """Ozaki scheme I with a target t (``gpu.ozaki.api``): t |A||B| + 2**-53 |C|, and 2**-1074 more where C is
    subnormal."""
    E = target_value(options.get("target") or "dgemm")
    size = magnitude(A, B)
    allowed = E * size * (1 + 2.0**-40) + 2.0**-53 * np.abs(C) + 2.0**-1074 + REF * np.abs(exact)
    return exact, _in_range(allowed, size, np.float64)


def ozaki2(A, B, C, exact, options: dict[str, Any], C0=None) -> tuple[np.ndarray, np.ndarray]:
    """A given count: E |A||B| + 2**-53 |C|, E its componentwise bound (fine scaling: its own E and 2**-52 |C|,
    :func:`_fine_bound`); ``moduli="auto"``: the normwise target."""
    rounding = 2.0**-53
    if "moduli" in options and options.get("scaling") == "fine":
        E, rounding, size = _fine_bound(A, B, options["moduli"]), 2.0**-52 * (1 + 2.0**-50), magnitude(A, B)
    elif "moduli" in options:
        E = _ozaki2_bound(A, B, options["moduli"], options.get("scaling", "fast"))
        size = magnitude(A, B)
    else:
        E = normwise.target_value(options.get("target") or "dgemm", A.shape[1])
        size = np.sqrt((A * A).sum(axis=1))[:, None] * np.sqrt((B * B).sum(axis=0))[None, :]
    allowed = E * size * (1 + 2.0**-40) + rounding * np.abs(C) + REF * np.abs(exact)
    return exact, _in_range(allowed, np.maximum(size, magnitude(A, B)), np.float64)


def _fine_bound(A: np.ndarray, B: np.ndarray, count: int) -> float:
    """max_ij E_ij of fine scaling (:mod:`gpu.ozaki2.scaling`): :mod:`gpu.ozaki2.auto`'s E_ij with each line's scale
    c = rho 2**u (beyond its bar exponent) in place of 2**u, rounding to nearest where u >= 0, plus
    2**-52 (1 + 2**-50) for the factors' roundings (2**-53 |a_ik| per entry of A, likewise B)."""
    if not (A.size and B.size):
        return 0.0
    k, table = A.shape[1], moduli_table(count)
    rows, cols = line_stats(HOST, A, B, wide=True)
    (sa, ra), (sb, rb) = (code_parts(codes(s.e, s.R, table, k, s.Rw)) for s in (rows, cols))
    u, v = sa - rows.e, sb - cols.e
    cu, cv = np.ldexp(ra, u)[:, None], np.ldexp(rb, v)[None, :]
    rho, sigma = np.where(u >= 0, 0.5, 1.0)[:, None], np.where(v >= 0, 0.5, 1.0)[None, :]
    delta = np.where(u >= 0, 0.5, 0.0)[:, None]
    At, Bt = np.ldexp(np.abs(A), rows.e[:, None]), np.ldexp(np.abs(B), cols.e[None, :])
    D = (At @ Bt) * max(1.0 - (k + 2) * 2.0**-53, 0.0)
    num = (rho / cu * Bt.sum(axis=0)[None, :] * (1 + 2.0**-52) + sigma / cv * (At.sum(axis=1)[:, None] + delta * k / cu)
           + table.crt_error() / (cu * cv)) * (1 + 2.0**-50)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ratio = np.where(D > 0, num / np.where(D > 0, D, 1.0), 0.0)
    return float(ratio.max()) + 2.0**-52 * (1 + 2.0**-50)


def _ozaki2_bound(A: np.ndarray, B: np.ndarray, count: int, scaling: str) -> float:
    """max_ij E_ij of ``count`` moduli on these operands, with the scaling the call runs."""
    if not (A.size and B.size):
        return 0.0
    rows, cols = line_stats(HOST, A, B)
    found = bounds(HOST, A, B, rows, cols, scaling)
    return predicted_error(A, B, found, range(count, count + 1))[0]
