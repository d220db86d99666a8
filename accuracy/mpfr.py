"""The slow exact reference: :func:`mpfr_matmul` with gmpy2 (MPFR), every product exact and every sum
correctly rounded, for checking :func:`accuracy.reference.exact_matmul` and for a few entries of a large
product; and :func:`sample_entries` for such spot checks."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

try:
    import gmpy2
except ImportError:  # mpfr_matmul says so when called; exact_matmul needs no gmpy2
    gmpy2 = None

from gpu.backend import get_backend

from .operands import check_operands

DEFAULT_PREC = 2048


def _entries(entries: Any, m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of the requested entries (all, row-major, when None)."""
    if entries is None:
        return np.repeat(np.arange(m), n), np.tile(np.arange(n), m)
    try:
        rows, cols = (np.asarray(v, dtype=np.int64).reshape(-1) for v in entries)
    except (TypeError, ValueError):
        raise ValueError("entries must be a pair (rows, cols) of integer sequences of equal length, "
                         "as numpy.nonzero returns") from None
    if rows.shape != cols.shape:
        raise ValueError(f"entries: {rows.size} rows but {cols.size} columns; give one column per row")
    if rows.size and (rows.min() < 0 or rows.max() >= m or cols.min() < 0 or cols.max() >= n):
        raise ValueError(f"entries must index a {m} x {n} product (0 <= row < {m}, 0 <= col < {n})")
    return rows, cols


def mpfr_matmul(A: Any, B: Any, *, prec: int = DEFAULT_PREC, entries: Any = None, mpfr_values: bool = False,
                check_finite: bool = True) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``A @ B`` with gmpy2: every product exact, every sum correctly rounded.

    The products of two float64 values are exact at 106 bits. Their sum is
    rounded once, by MPFR's correctly rounded ``fsum``: to binary64 (53 bits,
    IEEE exponent range with subnormals) for the float64 result, and to ``prec``
    bits for the MPFR values. The float64 result does not depend on ``prec``,
    so it is never a rounding of a rounding.

    ``entries``: None for the whole m x n product, or a pair ``(rows, cols)``
    of index sequences (as ``numpy.nonzero`` returns), for which 1-D results
    are returned in that order. With ``mpfr_values=True`` the result is a pair
    (float64 array, object array of ``gmpy2.mpfr`` at ``prec`` bits). Inputs
    go to the host; the loops run in Python, at about 0.2 microseconds per
    multiply-add (3 s for a 256 x 256 x 256 product on one CPU core).
    ``check_finite=False`` lets NaN and infinity through to MPFR, whose
    arithmetic is IEEE's: an independent check of :mod:`accuracy.special`.
    """
    if gmpy2 is None:
        raise RuntimeError("mpfr_matmul needs gmpy2: pip install gmpy2 (exact_matmul needs nothing more)")
    if not isinstance(prec, (int, np.integer)) or not 53 <= prec <= gmpy2.get_max_precision():
        raise ValueError(f"prec must be an integer number of bits from 53 to {gmpy2.get_max_precision()}, "
                         f"got {prec!r}")
    A, B = check_operands(get_backend("numpy"), A, B, check_finite)
    (m, k), n = A.shape, B.shape[1]
    rows, cols = _entries(entries, m, n)
    exact, ieee, wide = (gmpy2.context(precision=2 * 53), gmpy2.ieee(64),
                         gmpy2.context(precision=int(prec)))
    with gmpy2.context(exact):
        a_rows = {i: [gmpy2.mpfr(x) for x in A[i].tolist()] for i in np.unique(rows).tolist()}
        b_cols = {j: [gmpy2.mpfr(x) for x in B[:, j].tolist()] for j in np.unique(cols).tolist()}
    result = np.zeros(rows.size)
    values = np.empty(rows.size, dtype=object) if mpfr_values else None
    for e, (i, j) in enumerate(zip(rows.tolist(), cols.tolist())):
        with gmpy2.context(exact):
            products = list(map(operator.mul, a_rows[i], b_cols[j]))
        with gmpy2.context(ieee):
            result[e] = float(gmpy2.fsum(products))
        if result[e] == 0 and not any(products):
            result[e] = 0.0       # an exact zero is +0 (MPFR gives -0 when every product is -0)
        if values is not None:
            with gmpy2.context(wide):
                values[e] = gmpy2.fsum(products) if k else gmpy2.mpfr(0)
    if entries is None:
        result = result.reshape(m, n)
        values = values.reshape(m, n) if values is not None else None
    return (result, values) if values is not None else result


def sample_entries(m: int, n: int, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``count`` distinct entries of an m x n matrix, drawn reproducibly (for spot checks)."""
    picks = np.random.default_rng(seed).choice(m * n, size=min(count, m * n), replace=False)
    return np.unravel_index(np.sort(picks), (m, n))
