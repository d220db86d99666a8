"""``target=``: the Ozaki scheme meets the componentwise bound it promises, or refuses before any product.

A target t promises |C - AB| <= t (|A||B|) + 2**-53 |C| entrywise (plus the float64 underflow
threshold). These tests hold results to it against the correctly rounded product, on the inputs that
broke the first auto-slice rule: a tiny entry of A meeting a huge one of B, exponents spread over
hundreds of binades, subnormals, and the papers' phi = 4 inputs.
"""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from accuracy.generate import phi_matrix, wide_exponent_matrix
from accuracy.reference import exact_matmul
from gpu import ozaki

FORMATS = tuple(ozaki.FORMATS)


def excess(C, A, B, target):
    """max over entries of |C - AB| / (t |A||B| + 2**-53 |C|), with AB and |A||B| correctly rounded
    (their own rounding allowed for): at most 1 when C meets the target's bound."""
    ref = exact_matmul(A, B, backend="numpy")
    P = exact_matmul(np.abs(A), np.abs(B), backend="numpy")
    allowed = (ozaki.target_value(target) * P * (1 + 2.0**-50) + 2.0**-53 * (np.abs(C) + np.abs(ref))
               + 2.0**-1073)
    return float((np.abs(C - ref) / allowed).max()) if C.size else 0.0


def phi_pair(m, k, n, phi, seed):
    return phi_matrix(m, k, phi, (seed, 0)), phi_matrix(k, n, phi, (seed, 1))


# --------------------------------------------------------------------------- the findings

@pytest.mark.parametrize("fmt", FORMATS)
def test_a_tiny_entry_meeting_a_huge_one_is_not_lost(fmt):
    """1 * 2**-200 + 2**-200 * 2**200 = 1 (+ 2**-400): the first rule scaled the slices to row and
    column maxima alone, chose 6 slices and returned 0."""
    A, B = np.array([[1.0, 2.0**-200]]), np.array([[2.0**-200], [2.0**200]])
    C = ozaki.matmul(A, B, slice_format=fmt, backend="numpy")
    assert C[0, 0] == 1.0 == (A @ B)[0, 0]
    assert excess(C, A, B, "dgemm") <= 1


@pytest.mark.parametrize("target", ["dgemm", "sgemm"])
def test_exponents_spread_beyond_the_slices_are_refused_before_any_product(target):
    """153 x 300 x 1 with exponents of +-300: no 64 slices of 7 bits can carry a row's tiny entries
    next to its largest, so the call refuses (it used to return 0.0 in 40 rows) and writes nothing."""
    A, B = wide_exponent_matrix(153, 300, 5, -300, 300), wide_exponent_matrix(300, 1, 6, -300, 300)
    out = np.full((153, 1), 7.0)
    with pytest.raises(ValueError, match=r"cannot meet target .* with at most 64 slices.*pass slices="):
        ozaki.matmul(A, B, target=target, out=out, backend="numpy")
    assert (out == 7.0).all()


@pytest.mark.parametrize("fmt", ["fp32", "int8", "bf16"])
def test_wide_but_reachable_exponents_meet_the_bound(fmt):
    A, B = wide_exponent_matrix(40, 60, 7, -40, 40), wide_exponent_matrix(60, 3, 8, -40, 40)
    C = ozaki.matmul(A, B, slice_format=fmt, backend="numpy")
    assert excess(C, A, B, "dgemm") <= 1


def test_phi4_square_default_meets_dgemm():
    A, B = phi_pair(128, 128, 128, 4.0, 1)
    C = ozaki.matmul(A, B, backend="numpy")
    assert excess(C, A, B, "dgemm") <= 1


@pytest.mark.parametrize("fmt", ["fp32", "int8"])
@pytest.mark.parametrize("target", ["sgemm", "dgemm"])
def test_phi4_rectangular_meets_each_target(fmt, target):
    """277 x 31 x 277 at phi = 4 missed 'sgemm' by 187-3620x and 'dgemm' by 4410-13700x."""
    for seed in (2, 3):
        A, B = phi_pair(277, 31, 277, 4.0, seed)
        C = ozaki.matmul(A, B, target=target, slice_format=fmt, backend="numpy")
        assert excess(C, A, B, target) <= 1
