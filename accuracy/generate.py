"""Seeded test matrices for accuracy audits: the papers' phi distribution and harder cases.

Every generator returns a new float64 NumPy array of any shape (m x n, zeros
allowed) and is reproducible: the same ``seed`` gives the same matrix on any
machine (NumPy's ``default_rng``; a seed may be an int or a sequence of ints,
so ``(seed, 0)`` and ``(seed, 1)`` give independent A and B from one seed).
Move the result to a GPU with ``backend.asarray``; generating on the host keeps
CPU and GPU audits on identical inputs.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

Seed = int | Sequence[int]

#: Exponents of float64's finite range: normal numbers are 2**-1022 .. 2**1023 (times [1, 2)).
MIN_NORMAL_EXPONENT, MAX_EXPONENT = -1022, 1023


def _rng(seed: Seed) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check_shape(m: int, n: int) -> tuple[int, int]:
    for name, v in (("m", m), ("n", n)):
        if not isinstance(v, numbers.Integral) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    return int(m), int(n)


def phi_matrix(m: int, n: int, phi: float, seed: Seed) -> np.ndarray:
    """The papers' inputs: a_ij = (ru - 0.5) * exp(phi * rn).

    ru is uniform on [0, 1), rn standard normal, drawn in that order from one
    generator. phi sets the spread of magnitudes: 0 gives uniform values on
    [-0.5, 0.5); in a 4096 x 4096 matrix, phi = 0.1 spans about 2**-23 to 2**0,
    phi = 2 about 2**-27 to 2**14.
    """
    m, n = _check_shape(m, n)
    if not isinstance(phi, numbers.Real) or not 0 <= phi <= 20:
        raise ValueError(f"phi must be a real number from 0 to 20 (exp(phi * rn) overflows beyond), got {phi!r}")
    rng = _rng(seed)
    ru = rng.random((m, n))
    rn = rng.standard_normal((m, n))
    return (ru - 0.5) * np.exp(phi * rn)


def normal_matrix(m: int, n: int, seed: Seed) -> np.ndarray:
    """Standard normal entries."""
    m, n = _check_shape(m, n)
    return _rng(seed).standard_normal((m, n))


def uniform_matrix(m: int, n: int, seed: Seed, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """Entries uniform on [low, high)."""
    m, n = _check_shape(m, n)
    if not low < high:
        raise ValueError(f"need low < high, got low={low!r}, high={high!r}")
    return _rng(seed).uniform(low, high, (m, n))


def integer_matrix(m: int, n: int, seed: Seed, bound: int = 2**10) -> np.ndarray:
    """Integer-valued entries, uniform on [-bound, bound] (|bound| <= 2**53, so float64 holds them)."""
    m, n = _check_shape(m, n)
    if not isinstance(bound, numbers.Integral) or not 0 <= bound <= 2**53:
        raise ValueError(f"bound must be an integer from 0 to 2**53, got {bound!r}")
    return _rng(seed).integers(-bound, bound, size=(m, n), endpoint=True).astype(np.float64)


def wide_exponent_matrix(m: int, n: int, seed: Seed, emin: int = -1000, emax: int = 1000) -> np.ndarray:
    """Entries +-f * 2**e with a random 53-bit significand f in [1, 2) and e uniform on [emin, emax].

    emin down to -1074 gives subnormal entries (their low bits are dropped, as the
    format requires); emax at most 1023 keeps every entry finite.
    """
    m, n = _check_shape(m, n)
    if not (isinstance(emin, numbers.Integral) and isinstance(emax, numbers.Integral)
            and -1074 <= emin <= emax <= MAX_EXPONENT):
        raise ValueError(f"need integers -1074 <= emin <= emax <= {MAX_EXPONENT}, got emin={emin!r}, emax={emax!r}")
    rng = _rng(seed)
    significand = 1.0 + rng.integers(0, 2**52, size=(m, n)) * 2.0**-52
    exponent = rng.integers(emin, emax, size=(m, n), endpoint=True)
    sign = np.where(rng.random((m, n)) < 0.5, -1.0, 1.0)
    return sign * np.ldexp(significand, exponent)


def cancellation_pair(m: int, k: int, n: int, seed: Seed, perturbation: float = 2.0**-30
                      ) -> tuple[np.ndarray, np.ndarray]:
    """A (m x k) and B (k x n) whose product has exact zeros and exact cancellations.

    A = [Y, -Y] and B = [[X1, X2], [X1, X3]] with X3 = X2 (1 + perturbation * r):
    A B = [Y X1 - Y X1, Y X2 - Y X3] = [0, Y (X2 - X3)]. The first n - n // 2
    columns of the product are exactly zero, while a floating-point GEMM leaves
    rounding noise there; the others cancel all but about -log2(perturbation)
    leading bits. With k odd, A's last column is zero (and B's last row random).
    """
    m, k = _check_shape(m, k)
    k, n = _check_shape(k, n)
    if not 0 <= perturbation < 1:
        raise ValueError(f"perturbation must lie in [0, 1), got {perturbation!r}")
    rng = _rng(seed)
    h, w = k // 2, n // 2
    Y, X1, X2 = rng.standard_normal((m, h)), rng.standard_normal((h, n - w)), rng.standard_normal((h, w))
    X3 = X2 * (1.0 + perturbation * rng.standard_normal((h, w)))
    A, B = np.zeros((m, k)), rng.standard_normal((k, n))
    A[:, :h], A[:, h:2 * h] = Y, -Y
    B[:h, :n - w], B[:h, n - w:] = X1, X2
    B[h:2 * h, :n - w], B[h:2 * h, n - w:] = X1, X3
    return A, B

