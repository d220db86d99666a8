"""``moduli="auto"``: the fewest moduli whose error bound meets a target on the given inputs.

With the scaling of N moduli, row i of A is shifted by sA_i = e_i + u_i and column j of B by
sB_j = f_j + v_j (:func:`gpu.ozaki2.scaling.headroom`), and rounded: to nearest where u_i >= 0
(|a_ik 2**sA_i - A'_ik| <= 1/2, |A'_ik| <= |a_ik| 2**sA_i + 1/2: rho_i = delta_i = 1/2), toward zero
elsewhere (< 1 and <= |a_ik| 2**sA_i: rho_i = 1, delta_i = 0); sigma_j likewise for B. So

    (AB)_ij - 2**-(sA_i + sB_j) (A'B')_ij
        = sum_k (a_ik - 2**-sA_i A'_ik) b_kj + 2**-sA_i A'_ik (b_kj - 2**-sB_j B'_kj)

is at most rho_i 2**-sA_i ||b_j||_1 + sigma_j 2**-sB_j (||a_i||_1 + delta_i k 2**-sA_i) in magnitude. The
CRT recovers A'B' within ``crt_error`` (before its final rounding, half an ulp of C', i.e. 2**-53 |C_ij|
after the exact unscaling). With A~ = diag(2**e) |A| and B~ = |B| diag(2**f) (every row, column maximum
in [32, 64), which keeps the sums below away from underflow), dividing by
(|A||B|)_ij = 2**-(e_i + f_j) (A~B~)_ij:

    E_ij = (rho_i 2**-u_i ||b~_j||_1 + sigma_j 2**-v_j (||a~_i||_1 + delta_i k 2**-u_i)
            + 2**-(u_i + v_j) crt_error_N) / (A~B~)_ij,

and |C_ij - (AB)_ij| <= E_ij (|A||B|)_ij + 2**-53 |C_ij|. Entries with (|A||B|)_ij = 0 are exact (every
term above has a zero factor) and are left out. The float64 evaluation of E_ij is made safe by
rounding the denominator down by (k + 2) 2**-53 and the numerator up by 2**-50. :func:`choose_moduli`
returns the smallest N with max_ij E_ij <= target; ``"dgemm"`` is 2**-53 (float64's unit roundoff
per term, as for scheme I's ``target``), ``"sgemm"`` 2**-24.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..backend import backend_of
from ..ozaki.plan import target_value
from .moduli import MAX_MODULI, moduli_table
from .scaling import Bounds, headroom


def _scaled_abs(A: Any, B: Any, bounds: Bounds) -> tuple[Any, Any]:
    """|A~| and |B~|: rows of |A| times 2**e, columns of |B| times 2**f (on A's backend)."""
    xp = backend_of(A).xp
    A, B = xp.abs(xp.asarray(A, dtype=xp.float64)), xp.abs(xp.asarray(B, dtype=xp.float64))
    return xp.ldexp(A, bounds.e[:, None]), xp.ldexp(B, bounds.f[None, :])


def predicted_error(A: Any, B: Any, bounds: Bounds, counts: range) -> list[float]:
    """max_ij E_ij (the module's bound) for each modulus count in ``counts`` (0 when A B is exactly zero).
    It runs on A's backend and costs one float64 GEMM (|A~||B~|) plus a few passes over m x n per count."""
    xp = backend_of(A).xp
    At, Bt = _scaled_abs(A, B, bounds)
    k = At.shape[1]
    D = (At @ Bt) * max(1.0 - (k + 2) * 2.0**-53, 0.0)
    nz = D > 0
    row_l1, col_l1 = At.sum(axis=1), Bt.sum(axis=0)
    out = []
    for n in counts:
        table = moduli_table(n)
        u, v = headroom(bounds, table)
        pu, pv = xp.ldexp(xp.ones(u.shape), -u)[:, None], xp.ldexp(xp.ones(v.shape), -v)[None, :]
        rho, sigma = (xp.where(x >= 0, 0.5, 1.0) for x in (u[:, None], v[None, :]))
        delta = xp.where(u >= 0, 0.5, 0.0)[:, None]
        num = (rho * pu * col_l1[None, :] + sigma * pv * (row_l1[:, None] + delta * k * pu)
               + pu * pv * table.crt_error()) * (1 + 2.0**-50)
        with np.errstate(over="ignore", invalid="ignore"):
            ratio = xp.where(nz, num / xp.where(nz, D, 1.0), 0.0)
        out.append(float(ratio.max()) if ratio.size else 0.0)
    return out


def choose_moduli(A: Any, B: Any, bounds: Bounds, target: Any = "dgemm") -> int:
    """The fewest moduli (1..20) whose :func:`predicted_error` meets ``target`` (see the module)."""
    goal = target_value(target)
    counts = range(1, MAX_MODULI + 1)
    errors = predicted_error(A, B, bounds, counts)
    for n, err in zip(counts, errors, strict=True):
        if err <= goal:
            return n
    raise ValueError(f"no modulus count up to {MAX_MODULI} meets target {target!r} on these inputs (rows of A "
                     "or columns of B whose entries span too many binary orders for the scaling to keep): pass "
                     f"moduli={MAX_MODULI} (bound {errors[-1]:.3g} here) or a target they allow "
                     f"(target={_above(errors[-1])}), or use the library GEMM")


def _above(bound: float) -> str:
    """A round target at or above ``bound``, two significant digits (1.21e-06 -> '1.3e-06')."""
    text = f"{bound:.1e}"
    return text if float(text) >= bound else f"{float(text) + 10 ** (math.floor(math.log10(bound)) - 1):.1e}"
