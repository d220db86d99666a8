"""Error-free splitting of a matrix, row by row, into integer-valued FP64 slices.

Row i of X (m x k, finite float64) is written exactly as

    X[i, :] = sum_s D_s[i, :] * 2**g(i, s),      g(i, s) = e(i) + 1 - s * beta,

where e(i) is the exponent with max_k |X[i, k]| < 2**e(i) and every digit
D_s[i, k] is an integer with |D_s[i, k]| <= 2**(beta - 1). Digits are taken
by rounding to nearest (the remainder after digit s is at most half a unit of
that digit, so the next digit again fits in beta - 1 bits plus sign), and the
splitting stops for a row when its remainder is exactly zero, so any range of
exponents is covered exactly: a row needs ceil((span + 1) / beta) slices, with
span = e(i) - (the exponent of the lowest set bit in the row).

Exactness of each step (x is the remainder r scaled by 2**-g):

* ``x = ldexp(r, -g)``: a nonzero digit needs |x| >= 1/2, and then x is a
  normal number, so the scaling lost no bit. When the scaling underflows,
  |x| < 2**-1022 and the digit is 0, as it should be, and r is kept as the
  remainder. Underflow needs g > 0: r's lowest bit is at least 2**-1074, and
  so is x's when g <= 0.
* ``D = rint(x)``, ``x - D`` is exact (|x - D| <= 1/2 on x's own grid), and
  ``ldexp(x - D, g)`` is the true remainder r - D 2**g: a part of r, so it
  lies on r's grid and is representable. Forming D * 2**g instead could
  overflow to infinity for rows whose maximum is near 2**1024.

A slice keeps only the rows that still have digits (``rows``), so a few rows
with a very wide exponent range cost extra work in proportion to their number,
not the whole matrix's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu.backend import Array

#: Digits are exact in float64 products only while |digit| <= 2**(beta - 1) with
#: kb * 2**(2 beta - 2) <= 2**53 (kb: the inner block); beta = 27 allows kb = 2.
MAX_BETA = 27
#: 2**g and 2**-g are both normal float64 numbers for |g| up to this.
NORMAL_EXPONENT_LIMIT = 1022


@dataclass
class Slice:
    """One level of digits: ``digits[r]`` belongs to row ``rows[r]`` (``rows`` None: every row); ``host``: the
    rows as a NumPy array too, where ``rows`` lives on a device."""

    rows: Array | None
    digits: Array
    host: Any = None


@dataclass
class Split:
    """Rows of a matrix as digits: row i is sum_s slices[s].digits * 2**(exponent[i] + 1 - (s+1) beta)."""

    exponent: Array
    slices: list[Slice]
    beta: int

    @property
    def count(self) -> int:
        return len(self.slices)

    def active_rows(self) -> list[int]:
        """How many rows each slice holds."""
        return [len(s.digits) for s in self.slices]


def row_exponents(xp: Any, X: Array) -> Array:
    """int64 e(i) with max|X[i, :]| < 2**e(i) (0 for a zero row, whose exponent does not matter)."""
    if X.shape[1] == 0:
        return xp.zeros(X.shape[0], dtype=np.int64)
    return xp.frexp(xp.abs(X).max(axis=1))[1].astype(np.int64)


def row_spans(xp: Any, X: Array) -> Array:
    """Per row: e(i) minus the exponent of the row's lowest set bit; -1 for a zero row.

    A row needs ceil((span + 1) / beta) slices of beta bits (0 slices for a zero row).
    """
    mant, exp = xp.frexp(X)
    M = (mant * 2.0**53).astype(np.int64)                     # exact: 53-bit integer significand
    low = xp.frexp((M & -M).astype(np.float64))[1] - 1       # trailing zeros of M
    lsb = xp.where(M != 0, exp.astype(np.int64) - 53 + low, np.iinfo(np.int64).max)
    lowest = lsb.min(axis=1) if X.shape[1] else xp.full(X.shape[0], np.iinfo(np.int64).max)
    return xp.where(lowest == np.iinfo(np.int64).max, -1, row_exponents(xp, X) - lowest)


def slice_counts(spans: Array, beta: int) -> Array:
    """Slices each row needs at ``beta`` bits per slice (from :func:`row_spans`)."""
    return -(-(spans + 1) // beta)


def split_rows(xp: Any, X: Array, beta: int) -> Split:
    """The exact slices of X's rows (X is not modified).

    Stops when every row's remainder is zero; the digits satisfy
    |D| <= 2**(beta - 1).
    """
    if not 1 <= beta <= MAX_BETA:
        raise ValueError(f"beta must be an integer from 1 to {MAX_BETA}, got {beta!r}")
    exponent = row_exponents(xp, X)
    rest = xp.array(X, dtype=np.float64, copy=True)
    rows = xp.nonzero((rest != 0).any(axis=1))[0] if X.shape[1] else xp.zeros(0, dtype=np.int64)
    slices: list[Slice] = []
    while rows.size:
        everyone = rows.size == X.shape[0]
        part = rest if everyone else rest[rows]
        g = exponent[rows] + 1 - (len(slices) + 1) * beta
        digits, part = _digits(xp, part, g)
        slices.append(Slice(None if everyone else rows, digits))
        if everyone:
            rest = part
        else:
            rest[rows] = part
        rows = rows[(part != 0).any(axis=1)]
    return Split(exponent, slices, beta)


def _digits(xp: Any, part: Array, g: Array) -> tuple[Array, Array]:
    """(the digits of part * 2**-g, the remainder) for rows of ``part`` on grids 2**g (int64 per row).

    Multiplying by 2**-g and by 2**g is exact, like ``ldexp``, while both factors are
    normal numbers (and it is ten times faster on NumPy); rows of subnormal or huge
    scale go through ``ldexp``. A scaled value that underflows has digit 0, and the
    remainder then keeps ``part`` itself; underflow needs g > 0 (see the module notes).
    """
    lo, hi = int(g.min()), int(g.max())
    g32 = g.astype(np.int32)[:, None]
    if -NORMAL_EXPONENT_LIMIT <= lo and hi <= NORMAL_EXPONENT_LIMIT:
        one = xp.ones((1, 1))
        scaled = part * xp.ldexp(one, -g32)
        digits = xp.rint(scaled)
        rest = (scaled - digits) * xp.ldexp(one, g32)
    else:
        scaled = xp.ldexp(part, -g32)
        digits = xp.rint(scaled)
        rest = xp.ldexp(scaled - digits, g32)
    if hi > 0:
        rest = xp.where(digits == 0, part, rest)
    return digits, rest
