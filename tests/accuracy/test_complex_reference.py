"""The exact complex reference: each part of ``exact_matmul`` on complex operands is the correctly rounded value
of its exact sum (checked against ``fractions.Fraction`` on hard cases: cancellation, wide exponents, subnormal
results, mixed real and complex, complex64), bad dtypes and NaN are refused, and ``check_finite=False`` gives
the real formula's IEEE values."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.reference import exact_matmul


def by_fractions(A, B):
    """Each part of A @ B from its exact sum, rounded once by ``float(Fraction)`` (correct rounding)."""
    A, B = np.asarray(A, dtype=complex), np.asarray(B, dtype=complex)
    C = np.empty((A.shape[0], B.shape[1]), dtype=complex)
    F = Fraction
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            pairs = [(A[i, t], B[t, j]) for t in range(A.shape[1])]
            re = sum((F(a.real) * F(b.real) - F(a.imag) * F(b.imag) for a, b in pairs), F(0))
            im = sum((F(a.real) * F(b.imag) + F(a.imag) * F(b.real) for a, b in pairs), F(0))
            C[i, j] = complex(float(re), float(im))
    return C


def wide(rng, shape, spread):
    return rng.standard_normal(shape) * 2.0 ** rng.integers(-spread, spread, shape)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 4), k=st.integers(1, 6), n=st.integers(1, 4), spread=st.sampled_from([1, 60, 500]),
       seed=st.integers(0, 2**16))
def test_each_part_is_its_exact_sum_correctly_rounded(m, k, n, spread, seed):
    rng = np.random.default_rng(seed)
    A = wide(rng, (m, k), spread) + 1j * wide(rng, (m, k), spread)
    B = wide(rng, (k, n), spread) + 1j * wide(rng, (k, n), spread)
    C = exact_matmul(A, B, backend="numpy")
    assert C.dtype == np.complex128 and np.array_equal(C, by_fractions(A, B))


def test_hard_cases_cancellation_subnormals_and_mixed_operands():
    x = 1.0 + 2.0**-52
    A = np.array([[x, 1.0], [1e-300, 3.0]]) + 1j * np.array([[x, -1.0], [1e-300, 0.5]])
    B = np.array([[x, 2.0**-600], [1.0, 1.0]]) + 1j * np.array([[-x, 2.0**-600], [1.0, -1.0]])
    assert np.array_equal(exact_matmul(A, B, backend="numpy"), by_fractions(A, B))
    real = np.array([[3.0, -1.0], [2.0**-1074, 5.0]])
    assert np.array_equal(exact_matmul(real, B, backend="numpy"), by_fractions(real, B))
    assert np.array_equal(exact_matmul(A, real, backend="numpy"), by_fractions(A, real))
    single = A.astype(np.complex64)
    assert np.array_equal(exact_matmul(single, B, backend="numpy"), by_fractions(single, B))


def test_bad_dtypes_and_nonfinite_input_are_refused_before_any_work():
    A = np.ones((2, 2), dtype=complex)
    with pytest.raises(TypeError, match="int64, which float64 may not hold exactly"):
        exact_matmul(A, np.ones((2, 2), dtype=np.int64), backend="numpy")
    if hasattr(np, "clongdouble") and np.dtype(np.clongdouble) != np.dtype(np.complex128):
        with pytest.raises(TypeError, match="complex128 may not hold exactly"):
            exact_matmul(A.astype(np.clongdouble), A, backend="numpy")
    bad = A.copy()
    bad[0, 1] = complex(1.0, np.nan)
    with pytest.raises(ValueError, match="NaN or infinity"):
        exact_matmul(bad, A, backend="numpy")


def test_without_the_check_nonfinite_rows_get_the_real_formulas_ieee_values():
    A = np.array([[1.0 + 1j, 2.0 - 1j], [complex(0.0, np.inf), 1.0]])
    B = np.array([[1.0 + 0j, 0.0 + 1j], [1.0 - 1j, 2.0 + 0j]])
    C = exact_matmul(A, B, backend="numpy", check_finite=False)
    assert np.array_equal(C[0], by_fractions(A[:1], B)[0])
    with np.errstate(invalid="ignore"):
        re = np.hstack([A.real, -A.imag]) @ np.vstack([B.real, B.imag])
        im = np.hstack([A.real, A.imag]) @ np.vstack([B.imag, B.real])
    for got, want in ((C.real[1], re[1]), (C.imag[1], im[1])):
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[~np.isnan(got)],
                                                                                  want[~np.isnan(want)])


@pytest.mark.gpu
def test_on_the_gpu_the_complex_reference_equals_numpys(cupy_backend):
    rng = np.random.default_rng(5)
    A = wide(rng, (60, 90), 40) + 1j * wide(rng, (60, 90), 40)
    B = wide(rng, (90, 50), 40) + 1j * wide(rng, (90, 50), 40)
    got = exact_matmul(cupy_backend.asarray(A), cupy_backend.asarray(B), backend=cupy_backend)
    assert np.array_equal(cupy_backend.to_numpy(got), exact_matmul(A, B, backend="numpy"))
