"""The Ozaki scheme's digits: truncation on a power-of-two grid, rounded tails, slice storage.

These are the reference operations (any array module ``xp``); the backends'
slicing (:mod:`gpu.ozaki.ops` on NumPy, :mod:`gpu.ozaki.kernels` on CuPy)
writes the same digits into the concatenated slice layout
:func:`slice_layout` describes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Array
from .plan import OzakiPlan

#: Nonzero magnitudes of the bound's GEMM below it are raised to it: products of two stay FP32 normals.
RAISE = 2.0**-63


def split_values(xp: Any, X: Array, exps: Array, alpha: int, slices: int) -> list[Array]:
    """The float64 digits m_1..m_S of X's rows (reference version of the slicing, also for tests)."""
    x = xp.ldexp(X, -exps[:, None].astype(np.int32))
    radix, digits = 2.0**alpha, []
    for _ in range(slices):
        x = x * radix
        digit = xp.trunc(x)
        x = x - digit
        digits.append(digit)
    return digits


def round_significant(xp: Any, r: Array, bits: int, tiny: float) -> Array:
    """r rounded to nearest (ties to even) with ``bits`` significant bits, magnitudes below ``tiny`` to +0."""
    exponent = xp.frexp(r)[1]
    q = xp.ldexp(xp.rint(xp.ldexp(r, bits - exponent)), exponent - bits)
    return xp.where(xp.abs(q) < tiny, 0.0, q)


def magnitudes(xp: Any, X: Array, exps: Array, bits: int) -> Array:
    """|X| 2**-exps (``exps`` broadcast against X) rounded toward zero to ``bits`` significant bits, as
    float64: the operand of :func:`gpu.ozaki.bound.magnitude_product`; nonzero entries below :data:`RAISE`
    (after scaling, or lost to its underflow) become RAISE, zeros stay 0."""
    a = xp.abs(xp.ldexp(X, -exps))
    q = xp.frexp(a)[1]
    t = xp.ldexp(xp.floor(xp.ldexp(a, bits - q)), q - bits)
    return xp.where(X != 0, xp.maximum(t, RAISE), 0.0)


def encode(xp: Any, digits: Array, storage: str) -> Array:
    """Float64 digits in a slice storage dtype (bfloat16 as uint16 bits); exact for values with at
    most the storage's significand bits in its normal range."""
    if storage == "uint16":
        return (digits.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return digits.astype(storage)


def slice_layout(p: OzakiPlan, reverse: bool) -> dict[str, int]:
    """Where the slicing writes digit j (``first + (j-1) step``) and tail T_j (from ``tail_from`` on)."""
    S = p.slices
    if not p.remainder:
        return {"positions": S, "digits": S, "first": S - 1 if reverse else 0, "step": -1 if reverse else 1,
                "tail_from": S + 1, "tail_first": 0, "tail_step": 0}
    if reverse:
        return {"positions": 2 * S - 1, "digits": S - 1, "first": S - 2, "step": -1,
                "tail_from": 1, "tail_first": 2 * S - 2, "tail_step": -1}
    return {"positions": S, "digits": S - 1, "first": 0, "step": 1, "tail_from": S, "tail_first": S - 1,
            "tail_step": 0}
