"""The moduli of Ozaki scheme II as data, with the constants of the Chinese remainder theorem.

Scheme II computes the integer product C' = A'B' modulo N pairwise-coprime moduli m_1..m_N (one
INT8 GEMM each) and recovers C' itself from the N residues when |C'| < M/2, M = m_1 ... m_N.

The moduli are GEMMul8's: the largest pairwise-coprime integers <= 256, taken greedily in
descending order (:data:`MODULI`; composites such as 255 = 3 * 5 * 17 are fine). Every m <= 256 has
symmetric residues in [-(m // 2), (m - 1) // 2], which lie in the INT8 range [-128, 127]
(m = 256 gives exactly [-128, 127]); so every residue product is at most 128**2 = 2**14 in
magnitude, and an INT32 accumulator sums k <= 2**17 - 1 of them exactly.

Reconstruction (see :mod:`gpu.ozaki2.crt`) uses the weights w_t = M_t * (M_t^-1 mod m_t),
M_t = M / m_t, taken in the symmetric range (-M/2, M/2]: then C' = sum_t w_t c_t mod M. From about 6
moduli on, M and the weights exceed 2**53, so each is stored as a double-double hi + lo:
``hi`` on the grid 2**g (a multiple of 2**g, rounded to nearest) and ``lo`` = w - hi, |lo| <= 2**(g-1),
rounded to float64. The grid exponent g >= 0 is the smallest for which

* sum_t |hi_t| * 128 <= 2**(53 + g): every partial sum of sum_t hi_t c_t is a multiple of 2**g
  below 2**(53 + g) in magnitude, hence exact in float64, and
* (64 N + 2) * P_hi <= 2**(53 + g): q * P_hi is exact for every quotient |q| <= 64 N + 2 the
  reconstruction can meet (|sum_t w_t c_t| <= N * M/2 * 128 = 64 N M).

With g = 0 (N <= 5 here) the weights are exact in float64 and so is the reconstruction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from math import gcd, prod

#: GEMMul8's moduli: the largest pairwise-coprime integers <= 256, in descending order.
MODULI: tuple[int, ...] = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193, 191,
                           181, 179, 173)
MAX_MODULI = len(MODULI)
#: The Gaussian moduli: the largest pairwise-coprime odd integers <= 256 whose prime factors are all 1 mod 4, taken
#: greedily in descending order (:func:`greedy_moduli` with :func:`has_imaginary_unit`). Modulo each of them -1 has
#: a square root j, so Z_m[i] splits into two copies of Z_m (a + b i -> (a + j b, a - j b)) and a complex product
#: modulo m is two real ones (:mod:`gpu.ozaki2.complex`, scheme ``"2m"``). They are smaller than :data:`MODULI`:
#: 16 of them span 117.7 bits, as 15 of GEMMul8's do (117.8).
GAUSSIAN_MODULI: tuple[int, ...] = (241, 233, 229, 221, 205, 197, 193, 181, 173, 157, 149, 137, 113, 109, 101, 97,
                                    89, 73, 61, 53)
#: The largest residue magnitude: 128 (only m = 256 reaches it, with -128).
MAX_RESIDUE = 128


def residue_range(m: int) -> tuple[int, int]:
    """The symmetric residue range [lo, hi] of modulus m: [-(m // 2), (m - 1) // 2] (fits INT8 for m <= 256)."""
    return -(m // 2), (m - 1) // 2


def greedy_moduli(count: int, top: int = 256, allowed: Callable[[int], bool] = lambda m: True) -> tuple[int, ...]:
    """The ``count`` largest pairwise-coprime integers <= ``top`` that ``allowed`` admits, taken greedily from
    ``top`` down.

    This is how :data:`MODULI` (every integer admitted) and :data:`GAUSSIAN_MODULI` (``allowed`` =
    :func:`has_imaginary_unit`) are derived; tests check that it reproduces both tables.
    """
    chosen: list[int] = []
    for m in range(top, 1, -1):
        if len(chosen) == count:
            break
        if allowed(m) and all(gcd(m, c) == 1 for c in chosen):
            chosen.append(m)
    return tuple(chosen)


def _prime_factors(m: int) -> set[int]:
    found, p = set(), 2
    while p * p <= m:
        while m % p == 0:
            found.add(p)
            m //= p
        p += 1
    return found | ({m} if m > 1 else set())


def has_imaginary_unit(m: int) -> bool:
    """Whether -1 has a square root modulo m and 2 is invertible: m odd, every prime factor 1 mod 4 (m > 1)."""
    return m > 1 and m % 2 == 1 and all(p % 4 == 1 for p in _prime_factors(m))


@cache
def imaginary_unit(m: int) -> int:
    """The symmetric residue j with j * j = -1 modulo m of least magnitude (positive of the pair +-j).
    ValueError where none exists (:func:`has_imaginary_unit`)."""
    roots = [j for j in range(1, m) if (j * j + 1) % m == 0] if has_imaginary_unit(m) else []
    if not roots:
        raise ValueError(f"-1 has no square root modulo {m}: a Gaussian modulus is odd with prime factors 1 mod 4")
    return min((_symmetric(j, m) for j in roots), key=lambda j: (abs(j), -j))


def _symmetric(x: int, m: int) -> int:
    """x mod m in (-m/2, m/2]."""
    r = x % m
    return r - m if 2 * r > m else r


def _on_grid(x: int, grid: int) -> int:
    """The multiple of 2**grid nearest to x (ties upward)."""
    return ((x + (1 << grid >> 1)) >> grid) << grid


def _split(x: int, grid: int) -> tuple[float, float]:
    """x as hi + lo: hi the nearest multiple of 2**grid (exact in float64 when |x| / 2**grid < 2**53),
    lo = x - hi (|lo| <= 2**(grid - 1)) rounded to float64."""
    hi = _on_grid(x, grid)
    return float(hi), float(x - hi)


@dataclass(frozen=True)
class ModuliTable:
    """The first N moduli with their CRT constants (exact Python ints) and double-double weights.

    ``weights[t] = cofactors[t] * inverses[t]`` taken in (-M/2, M/2]; ``weights_hi/lo`` and
    ``product_hi/lo`` are the double-double forms on the grid 2**``grid`` (see the module text).
    """

    moduli: tuple[int, ...]
    product: int
    cofactors: tuple[int, ...]
    inverses: tuple[int, ...]
    weights: tuple[int, ...]
    grid: int
    weights_hi: tuple[float, ...]
    weights_lo: tuple[float, ...]
    product_hi: float
    product_lo: float

    @property
    def count(self) -> int:
        """N, the number of moduli."""
        return len(self.moduli)

    @property
    def exact(self) -> bool:
        """Whether the float64 reconstruction is exact (the weights need no low part)."""
        return self.grid == 0

    def max_quotient(self) -> int:
        """A bound on |q| in C' = sum_t w_t c_t - q M: |sum| <= 64 N M, plus 2 for rounding."""
        return 64 * self.count + 2

    def crt_error(self) -> float:
        """An absolute bound on the reconstruction's error before its final rounding (0 when exact).

        The low parts: each fl(lo_t) is off by at most 2**(g-54), |c_t| <= 128, and the products and
        the N-term sum round at most 2**-53 relative to partial sums below 64 N 2**g; q P_lo adds
        (64 N + 2) 2**(g-53). (N**2 + 72 N + 4) 2**(g-45) covers all of these with room to spare;
        relative to M it is below 2**-75 for every N <= 20.
        """
        if self.exact:
            return 0.0
        n = self.count
        return float((n * n + 72 * n + 4) * 2.0 ** (self.grid - 45))


def _grid(weights: tuple[int, ...], product: int) -> int:
    """The smallest g >= 0 meeting both exactness conditions of the module text."""
    n, g = len(weights), 0
    while True:
        his = [abs(_on_grid(w, g)) for w in weights]
        p_hi = _on_grid(product, g)
        if sum(his) * MAX_RESIDUE <= 1 << (53 + g) and (64 * n + 2) * p_hi <= 1 << (53 + g):
            return g
        g += 1


@cache
def moduli_table(count: int, moduli: tuple[int, ...] = MODULI) -> ModuliTable:
    """The table of the first ``count`` moduli of ``moduli`` (:data:`MODULI`, or :data:`GAUSSIAN_MODULI`;
    1 <= count <= 20)."""
    most = min(MAX_MODULI, len(moduli))
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= most:
        raise ValueError(f"the modulus count must be an integer in 1..{most}, not {count!r}")
    moduli = moduli[:count]
    product = prod(moduli)
    cofactors = tuple(product // m for m in moduli)
    inverses = tuple(pow(c % m, -1, m) for c, m in zip(cofactors, moduli, strict=True))
    weights = tuple(_symmetric(c * i, product) for c, i in zip(cofactors, inverses, strict=True))
    grid = _grid(weights, product)
    pairs = [_split(w, grid) for w in weights]
    p_hi, p_lo = _split(product, grid)
    return ModuliTable(moduli, product, cofactors, inverses, weights, grid, tuple(h for h, _ in pairs),
                       tuple(lo for _, lo in pairs), p_hi, p_lo)
