"""``moduli="auto"``'s default bound: normwise per entry, from the line statistics of the scaling's one read.

**Guarantee.** For the count N it picks, every entry of ``C = matmul(A, B)`` satisfies

    |C_ij - (AB)_ij| <= t ||a_i||_2 ||b_j||_2 + 2**-53 |C_ij|        (a_i: row i of A, b_j: column j of B)

(and 2**-1074 more where C_ij is subnormal), t the target (:func:`target_value`). The componentwise bound
``E |A||B| + 2**-53 |C|`` of :mod:`gpu.ozaki2.auto` (``bound="componentwise"``, for auditors) needs a float64
GEMM of |A~||B~| (34 ms against 2.7 ms for fast-15 at N = 4096 on the H200); this one needs O(m + n) work
per count and no GEMM, and, being computed on the device, no read back on a repeated call
(:mod:`gpu.ozaki2.deferred`).

**Proof.** Write a~_ik = a_ik 2**e_i and b~_kj = b_kj 2**f_j (e, f the bar exponents: every line's maximum
scaled into [32, 64)), and sA_i = e_i + u_i, sB_j = f_j + v_j the shifts of N moduli
(:func:`gpu.ozaki2.scaling.headroom`). A'_ik rounds a_ik 2**sA_i to nearest where u_i >= 0 (error at most
rho_i = 1/2, and |A'_ik| <= |a_ik| 2**sA_i + 1/2) and toward zero elsewhere (error below rho_i = 1,
|A'_ik| <= |a_ik| 2**sA_i); sigma_j likewise for B'. Then

    2**(sA_i + sB_j) (AB)_ij - (A'B')_ij = sum_k (a_ik 2**sA_i - A'_ik) b_kj 2**sB_j + A'_ik (b_kj 2**sB_j - B'_kj)

is at most rho_i 2**sB_j ||b_j||_1 + sigma_j (2**sA_i ||a_i||_1 + k/2) in magnitude. The CRT returns A'B'
within ``crt_error`` before its final rounding (half an ulp of C', i.e. 2**-53 |C_ij| after the exact
unscaling by 2**-(sA_i + sB_j); :mod:`gpu.ozaki2.crt`). Dividing by ||a_i||_2 ||b_j||_2 =
2**-(e_i + f_j) ||a~_i||_2 ||b~_j||_2 leaves E_ij = X1_i Y1_j + X2_i Y2_j + crt_N X3_i Y3_j with

    X1_i = rho_i 2**-u_i / ||a~_i||_2      Y1_j = ||b~_j||_1 / ||b~_j||_2
    X2_i = (||a~_i||_1 + (k/2) 2**-u_i) / ||a~_i||_2      Y2_j = sigma_j 2**-v_j / ||b~_j||_2
    X3_i = 2**-u_i / ||a~_i||_2      Y3_j = 2**-v_j / ||b~_j||_2,

every term non-negative and a function of one line: so max_ij E_ij <= E = max X1 max Y1 + max X2 max Y2 +
crt_N max X3 max Y3, six maxima over m + n lines per count. A zero line gives exact entries (A'_i = 0) and
is left out, and so is a line holding NaN or infinity (its entries are the library GEMM's, IEEE). The bound
holds for any u_i, v_j at least the headroom's: rho and 2**-u only fall as u grows, and the k/2 term is taken
for every line (delta = 1/2), so accurate mode's refined shifts (larger) keep it too.
The norms are float64 sums, in any order (NumPy and the GPU sum differently, so their last bits may differ):
for k <= 2**43 every rounding of the norms and of E is covered by multiplying E by (1 + (4k + 64) 2**-53)
(:func:`safety`; the norms' sums are within (k + 1) 2**-53 of the exact ones, relative, and about twelve more
roundings follow). The count is the smallest N with E <= t.

**The target.** ``"dgemm"`` is t = 2**-56 sqrt(k) (``"sgemm"``: 2**-27 sqrt(k)); a number is t itself. Why:
the proof adds the k rounding errors of A' and B' in magnitude, so E exceeds the error it bounds by a factor
that grows as sqrt(k) where the roundings have random signs (12, 20, 30 and 66 for 14 moduli below), while
the error itself, per ||a_i||_2 ||b_j||_2, does not grow with k for a given count, and neither does DGEMM's
(each of its k additions rounds a partial sum whose size, for random signs, is about ||a_i||_2 ||b_j||_2
times the square root of its share of k). Measured on phi = 1 inputs (``accuracy.generate.phi_matrix``,
seed 0; fast scaling; errors against the exact product on 256, 128, 64 and 32 sampled rows, as max over
them of |C_ij - (AB)_ij| / (||a_i||_2 ||b_j||_2); DGEMM is NumPy's OpenBLAS on the CPU):

    k = N    E of 14 / 15 moduli   error of 14 / 15 moduli   DGEMM's    t (dgemm)   count   componentwise count
    1024     1.7e-15 / 1.1e-16     1.3e-16 / 6.0e-17         4.7e-16    4.4e-16     15      16
    2048     2.5e-15 / 1.8e-16     1.2e-16 / 2.6e-17         5.8e-16    6.3e-16     15      16
    4096     3.8e-15 / 3.0e-16     1.3e-16 / 1.9e-17         1.6e-16    8.9e-16     15      16
    8192     7.6e-15 / 4.8e-16     1.2e-16 / 1.2e-17         1.1e-16    1.3e-15     15      17

(the last column: :func:`gpu.ozaki2.auto.choose_moduli`, the componentwise bound with t = 2**-53, in
accurate scaling, the previous default). So E <= t leaves the error near 2.6 t / sqrt(k), a third of 2**-53
of ||a_i||_2 ||b_j||_2, below DGEMM's (2**-53 of it and more); t lies between 15 moduli's E and 14's (2.6x
above the one and 6x below the other at N = 8192). The max relative errors agree: 15 moduli 2.1e-11,
4.8e-11, 9.5e-11, 1.2e-11 against DGEMM's 5.9e-11, 8.2e-10, 2.3e-10, 1.4e-10 (14 moduli: 1.3e-10, 6.1e-9,
8.0e-10, 4.6e-10, above DGEMM's); on the H200 (cuBLAS, N = 8192) 15 fast moduli gave 2.2e-9 against
DGEMM's 3.8e-8, 14 gave 3.9e-8. Where the roundings of A' and B' do not have random signs, the error
approaches E itself, up to t (DGEMM's own error then grows with k too); and where (|A||B|)_ij is far below
||a_i||_2 ||b_j||_2 (the large entries of a row meet the small ones of a column) this guarantee is weaker
than DGEMM's componentwise one: ``bound="componentwise"`` holds the result to t |A||B| instead.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any, NamedTuple

import numpy as np

from .moduli import MAX_MODULI, MODULI, moduli_table
from .scaling import bound_limit

#: The bar exponent given to a line holding NaN or infinity: every finite entry scales to 0 (its bars are 0,
#: as a zero line's; its residues are garbage confined to its own row or column of C, which the library's
#: IEEE values then replace).
BAD_E = -(1 << 20)
#: The named targets: t = 2**-exponent sqrt(k) (see the module).
TARGETS = {"dgemm": 56, "sgemm": 27}
#: The terms of E each side keeps per count: X1, X2, X3 for A's rows, Y1, Y2, Y3 for B's columns.
TERMS = 3


class LineStats(NamedTuple):
    """Per line (rows of A, or columns of B read as rows of B^T), from the scaling's one read: the maximum
    |x| (NaN or infinity where the line holds them), the bar exponent e (:data:`BAD_E` for a line that is not
    finite), R (fast mode's sum of squared bars, float64; 0 for a line that is not finite), and, where the
    count is chosen, ||x~||_1 and ||x~||_2**2 of the line scaled by 2**e (float64; None otherwise); for fine
    scaling, Rw = sum_k ceil(|x_k| 2**(e + WIDE_BITS))**2, the squares of bars 2**10 finer, exactly as uint64 (0
    for a line that is not finite; None otherwise: :mod:`gpu.ozaki2.scaling`)."""

    mx: Any
    e: Any
    R: Any
    n1: Any = None
    n2sq: Any = None
    Rw: Any = None


def target_value(target: Any, k: int) -> float:
    """t for ``target`` on an inner dimension of k (see the module): ``"dgemm"``, ``"sgemm"`` or a number in (0, 1)."""
    if isinstance(target, str):
        if target not in TARGETS:
            raise ValueError(f"target must be 'dgemm', 'sgemm' or a number in (0, 1), not {target!r}")
        return math.ldexp(math.sqrt(max(k, 1)), -TARGETS[target])
    if isinstance(target, bool) or not isinstance(target, (int, float, np.integer, np.floating)) \
            or not 0 < float(target) < 1:
        raise ValueError(f"target must be 'dgemm', 'sgemm' or a number in (0, 1), not {target!r}")
    return float(target)


def safety(k: int) -> float:
    """The factor that covers the float64 roundings of the norms and of E (see the module)."""
    return 1.0 + (4 * k + 64) * 2.0**-53


@cache
def limits(moduli: tuple[int, ...] = MODULI) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per count 1..20 of ``moduli`` (:data:`~gpu.ozaki2.moduli.MODULI` or the Gaussian set): L_N as frexp's (mu, L)
    (the shifts' exact comparisons) and the CRT's error bound (read-only arrays, kept per set)."""
    tables = [moduli_table(n, moduli) for n in range(1, MAX_MODULI + 1)]
    mu, L = np.frexp(np.array([bound_limit(t) for t in tables]))
    out = mu, L.astype(np.int64), np.array([t.crt_error() for t in tables])
    for a in out:
        a.flags.writeable = False
    return out


def _side(stats: LineStats, k: int, rows: bool, moduli: tuple[int, ...] = MODULI) -> np.ndarray:
    """(20, 3): per count, the three maxima of one side's terms over its finite nonzero lines (NumPy)."""
    mu, L, _ = limits(moduli)
    keep = np.isfinite(stats.mx) & (stats.n2sq > 0)
    out = np.zeros((MAX_MODULI, TERMS))
    if not keep.any():
        return out
    R, n1, n2 = stats.R[keep], stats.n1[keep], np.sqrt(stats.n2sq[keep])
    frac, ex = np.frexp(np.maximum(R, 1.0))
    u = (L[:, None] - ex[None, :] - (frac[None, :] > mu[:, None])) // 2
    p = np.ldexp(1.0, -u)
    rho = np.where(u >= 0, 0.5, 1.0)
    if rows:
        terms = (rho * p / n2, (n1 + 0.5 * k * p) / n2, p / n2)
    else:
        terms = (np.broadcast_to(n1 / n2, p.shape), rho * p / n2, p / n2)
    for t, term in enumerate(terms):
        out[:, t] = term.max(axis=1)
    return out


def combine(rows: np.ndarray, cols: np.ndarray, k: int, moduli: tuple[int, ...] = MODULI) -> np.ndarray:
    """E per count 1..20 from the two sides' maxima (see the module), times :func:`safety`."""
    crt = limits(moduli)[2]
    return (rows[:, 0] * cols[:, 0] + rows[:, 1] * cols[:, 1] + crt * rows[:, 2] * cols[:, 2]) * safety(k)


def predicted_error(rows: LineStats, cols: LineStats, k: int, moduli: tuple[int, ...] = MODULI) -> np.ndarray:
    """E for every count 1..20 of ``moduli`` on NumPy line statistics (the module's bound; 0 where every line is
    zero)."""
    return combine(_side(rows, k, True, moduli), _side(cols, k, False, moduli), k, moduli)


def first_meeting(errors: Any, goal: float) -> int:
    """The fewest moduli whose E meets ``goal`` (0: none of 1..20)."""
    meets = np.flatnonzero(np.asarray(errors) <= goal)
    return int(meets[0]) + 1 if meets.size else 0


def refusal(target: Any, bound: float) -> ValueError:
    """The error of a target no count meets: the bound 20 moduli reach, and what to pass instead."""
    return ValueError(
        f"no modulus count up to {MAX_MODULI} meets target {target!r} on these inputs (rows of A or columns of B "
        f"whose entries span too many binary orders for the scaling to keep): pass moduli={MAX_MODULI} (normwise "
        f"bound {bound:.3g} here) or a target they allow (target={_above(bound)}), or use the library GEMM")


def _above(bound: float) -> str:
    """A round target at or above ``bound``, two significant digits (1.21e-06 -> '1.3e-06')."""
    text = f"{bound:.1e}"
    return text if float(text) >= bound else f"{float(text) + 10 ** (math.floor(math.log10(bound)) - 1):.1e}"
