"""``exact_matmul`` itself: on tiny products, every entry is the sum of exact products (``fractions.Fraction``)
rounded once to nearest, ties to even, as IEEE 754 rounds it: subnormal results, overflow to infinity and the
sign of a zero included."""

import math
from fractions import Fraction

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from accuracy.reference import exact_matmul
from tests.property.strategies import profiled

#: The least magnitude that rounds to infinity: the largest float plus half its ulp.
OVERFLOW = Fraction(2) ** 1024 - Fraction(2) ** 970


def rounded(x: Fraction, negative_zero: bool) -> float:
    """x rounded to the nearest float64, ties to even (Python's float(Fraction) does that), with overflow to
    infinity and -0.0 for a negative x that rounds to zero."""
    if abs(x) >= OVERFLOW:
        return math.inf if x > 0 else -math.inf
    value = float(x)
    return -0.0 if value == 0 and negative_zero else value


def fraction_matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    m, k, n = A.shape[0], A.shape[1], B.shape[1]
    C = np.empty((m, n))
    for i in range(m):
        for j in range(n):
            s = sum((Fraction(float(A[i, t])) * Fraction(float(B[t, j])) for t in range(k)), Fraction(0))
            C[i, j] = rounded(s, s < 0)
    return C


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
#: Every binade: a significand in (-2, 2) (2 * 2**1023 would overflow) scaled by 2**-1074 to 2**1023.
wide = st.builds(lambda f, e: math.ldexp(f, e), st.floats(-2.0, 2.0, exclude_min=True, exclude_max=True),
                 st.integers(-1074, 1023))


@st.composite
def tiny_pair(draw):
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    values = st.one_of(finite, wide, st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 2.0**-1022, 1.0, 0.1]))
    A = np.array(draw(st.lists(values, min_size=m * k, max_size=m * k))).reshape(m, k)
    B = np.array(draw(st.lists(values, min_size=k * n, max_size=k * n))).reshape(k, n)
    return A, B


@profiled(5)
@given(pair=tiny_pair())
@example(pair=(np.array([[2.0**1023, 2.0**1023]]), np.array([[1.0], [1.0]])))            # overflows: inf
@example(pair=(np.array([[2.0**1023, -(2.0**1023)]]), np.array([[1.0], [1.0]])))         # cancels: +0.0
@example(pair=(np.array([[-(2.0**-1074), 2.0**-600]]), np.array([[2.0**-1], [2.0**-600]])))  # ties to even
@example(pair=(np.array([[1e308, 1e308, -1e308]]), np.array([[10.0], [-10.0], [1e-300]])))   # an exact tail
def test_exact_matmul_is_the_correctly_rounded_sum_of_exact_products(pair):
    A, B = pair
    C = exact_matmul(A, B, backend="numpy")
    want = fraction_matmul(A, B)
    assert np.array_equal(C, want) and np.array_equal(np.signbit(C), np.signbit(want)), (C, want)
