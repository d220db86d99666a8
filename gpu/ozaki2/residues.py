"""Symmetric residues of integer matrices modulo each modulus, without overflow at any magnitude.

Scheme II reduces the scaled integer matrices A' and B' modulo every modulus m_t and feeds the
residues to INT8 GEMMs. A' may exceed 2**53 (from about 7 moduli on) and even 2**63 (beyond about
16), so it is held as float64 integers and never formed in one machine integer:

* int64 input: ``x % m`` directly (NumPy's floor modulo, in [0, m); no overflow possible).
* float64 input holding integers: |x| < 2**53 converts to int64 exactly. Larger x is an exact
  53-bit integer mantissa times a power of two, x = n * 2**e (n = frexp's fraction * 2**53, e >= 1),
  so x mod m = ((n mod m) * (2**e mod m)) mod m, with 2**e mod m from a table (:func:`powers_of_two`)
  for e up to 1024. Both factors are below m <= 256, so the product stays below 2**16.

The residue u in [0, m) becomes symmetric as u - m when u > (m - 1) // 2: the range
[-(m // 2), (m - 1) // 2] of :func:`gpu.ozaki2.moduli.residue_range`, stored as INT8.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

#: float64 integers are below 2**1024, so their exponent e above the 53-bit mantissa is below 1024 - 52.
_MAX_SHIFT = 1024


@cache
def powers_of_two(m: int) -> np.ndarray:
    """2**e mod m for e = 0.._MAX_SHIFT (int64), by repeated doubling."""
    table = np.empty(_MAX_SHIFT + 1, dtype=np.int64)
    v = 1 % m
    for e in range(_MAX_SHIFT + 1):
        table[e] = v
        v = 2 * v % m
    table.flags.writeable = False
    return table


def _as_parts(X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """X as int64 mantissas n and shifts e (None: all zero) with X = n * 2**e exactly."""
    if X.dtype.kind in "iu":
        if X.dtype == np.uint64 and X.size and int(X.max()) >= 2**63:
            raise ValueError("uint64 entries of 2**63 and more are not supported; pass them as float64")
        return X.astype(np.int64, copy=False), None
    if X.dtype != np.float64:
        raise TypeError(f"residues need int64 or float64 integers, not {X.dtype}")
    if not np.all(np.isfinite(X)) or not np.all(X == np.trunc(X)):
        raise ValueError("float64 input to residues must hold finite integers")
    big = np.abs(X) >= 2.0**53
    if not big.any():
        return X.astype(np.int64), None
    frac, exp = np.frexp(X)
    mantissa = np.where(big, np.ldexp(frac, 53), X).astype(np.int64)
    shift = np.where(big, exp.astype(np.int64) - 53, 0)
    return mantissa, shift


def symmetric(U: np.ndarray, m: int) -> np.ndarray:
    """Residues u in [0, m) (any integer dtype) mapped to the symmetric range, as INT8."""
    return (U - m * (U > (m - 1) // 2)).astype(np.int8)


def reduce(X: np.ndarray, m: int) -> np.ndarray:
    """The symmetric residues of the integers in X modulo m (INT8; X int64 or float64, see module)."""
    return residues(X, (m,))[0]


def residues(X: np.ndarray, moduli: Sequence[int]) -> np.ndarray:
    """The symmetric residues of X modulo every modulus: INT8 of shape (len(moduli), *X.shape)."""
    mantissa, shift = _as_parts(np.asarray(X))
    out = np.empty((len(moduli), *mantissa.shape), dtype=np.int8)
    for t, m in enumerate(moduli):
        U = mantissa % m
        if shift is not None:
            U = U * powers_of_two(m)[shift] % m
        out[t] = symmetric(U, m)
    return out
