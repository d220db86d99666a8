"""The scaling of scheme II: powers of two that keep |A'B'| inside the CRT's range, as large as allowed.

A' = round(diag(2**sA) A) and B' = round(B diag(2**sB)), rounded to the nearest integer (ties to even)
where the shift is at least the bar exponent (u, v >= 0 below), toward zero elsewhere: exact in float64
(a power-of-two scaling, then one rounding per entry). The moduli recover A'B' from its residues when
|A'B'|_ij <= M/2 (1 - 2**-50) (see :mod:`gpu.ozaki2.crt`); the shifts below keep every |A'B'|_ij <= L_N,
:func:`bound_limit`: the largest float64 integer at most M/2 (1 - 2**-40), 2**-40 inside that proven range.

Bars (Ozaki, Uchino & Imamura): e_i = 5 - ilogb(max_j |a_ij|), Abar_ij = ceil(|a_ij| 2**e_i) <= 64 (the row
maximum scales below 2**6); f_j and Bbar likewise for the columns of B. So |a_ij| 2**e_i <= Abar_ij.

Row and column bounds R_i, Q_j (:class:`Bounds`) with (Abar Bbar)_ij <= sqrt(R_i Q_j):

* accurate mode (one extra INT8 GEMM): R_i and Q_j are the row and column maxima of Cbar = Abar Bbar,
  computed exactly (INT8 GEMMs with INT32 accumulation on blocks of at most :data:`MAX_K_BOUND_GEMM`,
  k 64**2 < 2**31, their sums added in int64: exact while k 64**2 < 2**63); Cbar_ij <= min(R_i, Q_j).
* fast mode (no GEMM): R_i = sum_k Abar_ik**2 and Q_j = sum_k Bbar_kj**2, by Cauchy-Schwarz
  (see :mod:`gpu.ozaki2.api`).

**Shifts** (:func:`headroom`): u_i, the largest integer with R_i 4**u_i <= L_N, and v_j with
Q_j 4**v_j <= L_N; sA_i = e_i + u_i, sB_j = f_j + v_j. Accurate mode then tightens them with Cbar itself:
v_j becomes the largest integer with 2**v_j max_i 2**u_i Cbar_ij <= L_N, and then u_i the largest with
2**u_i max_j 2**v_j Cbar_ij <= L_N (each can only grow: the previous value satisfies the new condition).
Every test is an exact comparison of float64 mantissas and integer exponents (``frexp``), so NumPy and
CuPy agree bit for bit.

**Proof of the bound.** Where u_i >= 0, Abar_ij 2**u_i is an integer at least |a_ij| 2**sA_i, so rounding
to nearest (monotone) cannot exceed it: |A'_ij| <= Abar_ij 2**u_i; where u_i < 0 truncation gives
|A'_ij| <= |a_ij| 2**sA_i <= Abar_ij 2**u_i. Likewise for B'. Hence
|A'B'|_ij <= 2**(u_i + v_j) (Abar Bbar)_ij <= 2**(u_i + v_j) sqrt(R_i Q_j) <= sqrt(L_N L_N) = L_N, and after
the accurate refinement directly 2**(u_i + v_j) Cbar_ij <= L_N. Rounding to nearest halves truncation's
error (|x - round(x)| <= 1/2 against < 1, with no bias), and the exact comparisons gain the half bits that
integer bit lengths (the first version: 2**K <= M/4, u_i = floor((K - t_i)/2) with t_i the bit length of
R_i) gave away: on phi = 1 and 4 inputs (256 x 16384 x 256, 14-16 moduli) the median error per
(|A||B|)_ij fell 3-5x, about half a modulus. The bound holds whatever k is, so k-blocking of the modular
products (see :mod:`gpu.ozaki2.reference`) needs nothing more from the scaling.

**Scale codes.** The plans carry each line's scale as one int32 *code* c = s 2**F + j (F = :data:`FINE_BITS`,
0 <= j < 2**F): the line is scaled by rho 2**s with rho = 1 + j 2**-F. Power-of-two scalings (fast and accurate)
have j = 0, and then every step gives the bits it gave before codes: x' = rint(fl(ldexp(x, s) rho)) is
rint(ldexp(x, s)), and the CRT's fl(C' / (rho_i rho_j)) is C' (:func:`unscale`).

**Fine scaling** (``scaling="fine"``: fast mode's bound, no GEMM, from bars 2**10 finer). A power of two loses up to
a factor of 2 per side against the bound (1.44 on average, the same for every line of iid data: the lines' R are
close), and the error grows with it. Fine scaling takes each line's scale as large as the bound allows, to F bits,
and takes R from bars 2**WIDE_BITS finer (``Rw``, :class:`~gpu.ozaki2.normwise.LineStats`: the 6-bit bars overstate
a phi = 1 line's norm by about 1.23x, the 16-bit ones by under 0.1%; one more read of each operand, exact in uint64;
the proof below holds with the finer bars and their exponent e + WIDE_BITS in place of Abar and e): c_i = rho_i
2**u_i (times 2**e_i) as large as possible with c_i (1 + 2**-52) sqrt(R_i) <= T, where T = sqrt(L_N) - sqrt(k)
(:func:`fine_limit`), and then the larger of that code and fast mode's. Rounding x rho 2**s (one rounding, relative
2**-53) to an integer (to nearest or toward zero, as above) gives |A'_ij| <= ceil(c_i Abar_ij), at most c_i Abar_ij
+ 1, so that with X_i = c_i sqrt(R_i) <= T and Y_j <= T, |A'B'|_ij <= X_i Y_j + (X_i + Y_j) sqrt(k) + k = (X_i +
sqrt(k))(Y_j + sqrt(k)) <= L_N (sum_k Abar_ik <= sqrt(k R_i)); where one side keeps fast mode's power of two (no +
1, X <= sqrt(L_N)) the bound is X (Y + sqrt(k)) <= L_N, and where both do, the proof above. The price: fl(x rho
2**s) is x rho 2**s (1 + delta), |delta| <= 2**-53, and the CRT's division by rho_i rho_j (:func:`unscale`) rounds
once more: the componentwise bound of a given count (:mod:`gpu.ozaki2.auto`'s E_ij |A||B| + 2**-53 |C|) holds with
each line's scale c in place of its power of two (rounding to nearest where the code's s is at least the bar
exponent), 2**-52 (1 + 2**-50) added to E_ij for the factors' roundings and 2**-52 |C| for the two of C
(``tests/property/bounds.py`` checks it on drawn operands). The normwise guarantee of ``moduli="auto"`` does not
cover it, so auto refuses fine scaling. On phi = 1 inputs the median error falls 1.3-2.0x on the H200 (14 and 15
moduli, N = 16384 and 32768, fifteen seeds), for about 2% more time at N = 16384 (the second read of A and B).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ..backend import backend_of
from .moduli import ModuliTable

#: Cbar's INT8 GEMM is exact with INT32 accumulation while k * 64**2 < 2**31: its block length.
MAX_K_BOUND_GEMM = (2**31 - 1) // 64**2
#: int64 sums of the blocks' products stay exact while k * 64**2 < 2**63.
MAX_K = (2**63 - 1) // 64**2
#: The scaling keeps |A'B'| at most M/2 (1 - 2**-MARGIN_BITS), well inside the CRT's proven M/2 (1 - 2**-50).
MARGIN_BITS = 40
#: Bits of a scale code's fraction (see the module): rho = 1 + j 2**-FINE_BITS, and rho_i rho_j is exact.
FINE_BITS = 8
#: Fine scaling's bars are 2**WIDE_BITS finer than fast mode's: each at most 2**(6 + WIDE_BITS).
WIDE_BITS = 10
#: Fine scaling's longest k: Rw, the uint64 sum of k squared wide bars (each at most 2**(12 + 2 WIDE_BITS)), is exact.
MAX_K_FINE = (2**64 - 1) // 2 ** (12 + 2 * WIDE_BITS)


class Bounds(NamedTuple):
    """The data-dependent part of the scaling, shared by every modulus count: bar exponents ``e`` (rows of
    A) and ``f`` (columns of B), the row and column bounds ``rows`` (R) and ``cols`` (Q) as float64 holding
    integers, and, in accurate mode, ``cbar`` = Abar Bbar itself (None in fast mode)."""

    e: Any
    rows: Any
    f: Any
    cols: Any
    cbar: Any = None


class Scaled(NamedTuple):
    """The scaled integer matrices (float64 holding integers) and their row/column shifts."""

    A: np.ndarray
    B: np.ndarray
    shift_a: np.ndarray
    shift_b: np.ndarray


def bound_limit(table: ModuliTable) -> float:
    """L_N: the largest float64 integer at most M/2 (1 - 2**-40); the scaling keeps every |A'B'|_ij <= L_N."""
    M = table.product
    limit = M * (2**MARGIN_BITS - 1) // 2 ** (MARGIN_BITS + 1)
    x = float(limit)
    return x if int(x) <= limit else float(np.nextafter(x, 0.0))


def _xp(x: Any) -> Any:
    return backend_of(x).xp


def full_shift(W: Any, limit: float) -> Any:
    """The largest integer v with W 2**v <= limit, per entry (W below 1, an empty line, taken as 1, which
    only lowers v), as int64: with W = w 2**a and limit = mu 2**L (``frexp``), v = L - a - [w > mu]."""
    xp = _xp(W)
    frac, exp = xp.frexp(xp.maximum(W, 1.0))
    mu, L = np.frexp(limit)
    return int(L) - exp.astype(np.int64) - (frac > mu)


def half_shift(R: Any, limit: float) -> Any:
    """The largest integer u with R 4**u <= limit: floor(v / 2) of :func:`full_shift`'s v (R 2**(2u) <= limit
    exactly when 2u <= v)."""
    return full_shift(R, limit) // 2


def headroom(bounds: Bounds, table: ModuliTable) -> tuple[Any, Any]:
    """u and v, the shifts beyond e and f (int64 arrays of the bounds' backend; see the module)."""
    limit = bound_limit(table)
    family = backend_of(bounds.rows).ops("ozaki2")
    u, v = family.half_shift(bounds.rows, limit), family.half_shift(bounds.cols, limit)
    cbar = bounds.cbar
    if cbar is not None and cbar.size:
        v = family.full_shift(family.scaled_max(cbar, u, 0), limit)
        u = family.full_shift(family.scaled_max(cbar, v, 1), limit)
    return u, v


def check_fine_k(k: int) -> None:
    """Refuse fine scaling where k exceeds :data:`MAX_K_FINE`, before any work: its wide bars' uint64 sums would
    wrap, and the scales taken from them could overflow the CRT's range."""
    if k > MAX_K_FINE:
        raise ValueError(f"scaling='fine' takes k up to {MAX_K_FINE} (its wide bars' squares are summed exactly in "
                         f"64-bit integers), not k = {k}: use scaling='fast', or sum products of blocks of k")


def fine_limit(table: ModuliTable, k: int) -> float:
    """T: a float64 at most sqrt(L_N) - sqrt(k), fine scaling's bound on each side's scaled norm (0: none)."""
    T = math.isqrt(int(bound_limit(table))) - (math.isqrt(k - 1) + 1 if k > 0 else 0)
    if T <= 0:
        return 0.0
    x = float(T)
    return x if int(x) <= T else float(np.nextafter(x, 0.0))


def codes(e: Any, R: Any, table: ModuliTable, fine_k: int | None = None, Rw: Any = None) -> Any:
    """Fast mode's scale codes (e + u) 2**F, or with ``fine_k`` (the product's k) fine scaling's, each the larger
    of the fine code and fast mode's (see the module), as int32 on the arrays' backend; ``Rw``: the wide bars'
    sums (:class:`~gpu.ozaki2.normwise.LineStats`), which fine scaling takes in place of R, with bars 2**WIDE_BITS
    finer. Every step is an exact or correctly rounded float64 operation, so the GPU kernel
    (:mod:`gpu.ozaki2.device`) gives the same codes."""
    xp = _xp(R)
    fast = (e.astype(np.int64) + half_shift(R, bound_limit(table))) << FINE_BITS
    T = 0.0 if fine_k is None else fine_limit(table, fine_k)
    if T == 0.0:
        return fast.astype(np.int32)
    base, R = (e.astype(np.int64), R) if Rw is None else (e.astype(np.int64) + WIDE_BITS, rounded_up(Rw))
    q = (T / xp.sqrt(xp.maximum(R, 1.0))) * (1.0 - 2.0**-47)
    frac, ex = xp.frexp(q)
    j = xp.floor(frac * 2.0 ** (FINE_BITS + 1)).astype(np.int64) - 2**FINE_BITS
    fine = ((base + ex - 1) << FINE_BITS) + j
    return xp.maximum(fast, fine).astype(np.int32)


def rounded_up(W: Any) -> Any:
    """uint64 sums as the float64 at least each (exact below 2**53; the GPU's ``__ull2double_ru``)."""
    xp = _xp(W)
    f = W.astype(np.float64)
    return xp.where(f.astype(np.uint64) < W, xp.nextafter(f, np.inf), f)


def code_parts(c: Any) -> tuple[Any, Any]:
    """A code's shift s (int64) and factor rho = 1 + j 2**-F (float64, exact)."""
    c = c.astype(np.int64)
    return c >> FINE_BITS, ((c & (2**FINE_BITS - 1)) + 2**FINE_BITS) * 2.0**-FINE_BITS


def unscale(Cp: Any, code_a: Any, code_b: Any) -> Any:
    """C = ldexp(fl(C' / (rho_i rho_j)), -(s_i + s_j)) from the CRT's C' (m x n) and the codes of A's rows and B's
    columns: one correctly rounded division by the exact rho_i rho_j (none where both are 1), then an exact power
    of two."""
    (sa, ra), (sb, rb) = code_parts(code_a), code_parts(code_b)
    with np.errstate(over="ignore"):
        return _xp(Cp).ldexp(Cp / (ra[:, None] * rb[None, :]), -(sa[:, None] + sb[None, :]))


def to_integers(Y: Any, nearest: Any) -> Any:
    """Y (float64, already scaled by its powers of two) rounded to integers: to nearest (ties to even)
    where ``nearest`` (broadcast), toward zero elsewhere (see the module's proof)."""
    xp = _xp(Y)
    return xp.where(nearest, xp.rint(Y), xp.trunc(Y))


def _check(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 2-D operands with matching inner dimensions, all finite."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"need 2-D A (m, k) and B (k, n), got {A.shape} and {B.shape}")
    if not (np.isfinite(A).all() and np.isfinite(B).all()):
        raise ValueError("A and B must be finite (no NaN or infinity)")
    return A, B


def _small_bound(X: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """e (per row for axis=1, per column for axis=0) with the row (column) maximum of |X| 2**e below
    2**6, and Xbar = ceil(|X| 2**e) as int64 (<= 64)."""
    e = 6 - np.frexp(np.abs(X).max(axis=axis))[1].astype(np.int64)  # 5 - ilogb = 6 - frexp exponent
    scaled = np.ldexp(np.abs(X), e[:, None] if axis == 1 else e[None, :])
    return e, np.ceil(scaled).astype(np.int64)


def accurate_bounds(A: np.ndarray, B: np.ndarray) -> Bounds:
    """Accurate mode's Bounds (one Cbar product over the whole k, in blocks; see the module), on NumPy."""
    A, B = _check(A, B)
    k = A.shape[1]
    if k > MAX_K:
        raise ValueError(f"k = {k} exceeds {MAX_K}, the range of Cbar's exact int64 sum")
    e, Abar = _small_bound(A, axis=1)
    f, Bbar = _small_bound(B, axis=0)
    Cbar = np.zeros((A.shape[0], B.shape[1]), dtype=np.int64)
    for lo in range(0, k, MAX_K_BOUND_GEMM):
        Cbar += Abar[:, lo:lo + MAX_K_BOUND_GEMM] @ Bbar[lo:lo + MAX_K_BOUND_GEMM]
    rows = Cbar.max(axis=1, initial=0).astype(np.float64)
    cols = Cbar.max(axis=0, initial=0).astype(np.float64)
    return Bounds(e, rows, f, cols, Cbar)


def scale_accurate(A: np.ndarray, B: np.ndarray, table: ModuliTable, bounds: Bounds | None = None) -> Scaled:
    """Accurate-mode scaling of A (rows) and B (columns) for the moduli of ``table`` (see the module);
    ``bounds``: :func:`accurate_bounds` of A and B when already computed."""
    A, B = _check(A, B)
    if bounds is None:
        bounds = accurate_bounds(A, B)
    u, v = headroom(bounds, table)
    shift_a, shift_b = bounds.e + u, bounds.f + v
    A_int = to_integers(np.ldexp(A, shift_a[:, None]), (u >= 0)[:, None])
    B_int = to_integers(np.ldexp(B, shift_b[None, :]), (v >= 0)[None, :])
    return Scaled(A_int, B_int, shift_a, shift_b)
