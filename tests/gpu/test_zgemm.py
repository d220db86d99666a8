"""Complex products from real ones (``gpu.zgemm.matmul``): 4M keeps the complex GEMM's componentwise bound over
the library GEMM and Ozaki scheme II, 3M keeps its own weaker bound, real and complex operands mix, bad input is
refused before any work; on the GPU, 4M over Ozaki II equals NumPy's bit for bit."""

import functools

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from accuracy.reference import exact_matmul
from gpu import ozaki2, strassen, zgemm
from gpu.backend import MemoryPlanError, get_backend
from gpu.frontdoor.contract import gamma

U = 2.0**-53


def operands(m, k, n, phi=1.0, seed=1):
    A = phi_matrix(m, k, phi, seed) + 1j * phi_matrix(m, k, phi, seed + 10)
    B = phi_matrix(k, n, phi, seed + 1) + 1j * phi_matrix(k, n, phi, seed + 11)
    return A, B


def parts_error(C, R):
    return np.abs(C.real - R.real), np.abs(C.imag - R.imag)


@pytest.mark.parametrize("phi", [0.1, 1.0, 4.0])
def test_4m_over_the_library_gemm_keeps_the_complex_gemms_componentwise_bound(phi):
    A, B = operands(40, 70, 30, phi)
    R = exact_matmul(A, B, backend="numpy")
    C = zgemm.matmul(A, B, backend="numpy")
    re, im = parts_error(C, R)
    k = A.shape[1]
    assert np.all(re <= gamma(2 * k) * (np.abs(A.real) @ np.abs(B.real) + np.abs(A.imag) @ np.abs(B.imag)))
    assert np.all(im <= gamma(2 * k) * (np.abs(A.real) @ np.abs(B.imag) + np.abs(A.imag) @ np.abs(B.real)))


def test_3m_keeps_its_bound_on_both_parts_with_three_products():
    A, B = operands(40, 70, 30, 1.0, 3)
    calls = []

    def counted(X, Y):
        calls.append(X.shape)
        return X @ Y

    C = zgemm.matmul(A, B, scheme="3m", real=counted, backend="numpy")
    assert calls == [(40, 70)] * 3
    R = exact_matmul(A, B, backend="numpy")
    re, im = parts_error(C, R)
    k = A.shape[1]
    absolute = (np.abs(A.real) + np.abs(A.imag)) @ (np.abs(B.real) + np.abs(B.imag))
    assert np.all(re <= gamma(k + 1) * absolute) and np.all(im <= 2 * gamma(k + 2) * absolute)


def test_4m_over_ozaki2_and_strassen_and_mixed_operands():
    A, B = operands(64, 96, 48, 1.0, 5)
    R = exact_matmul(A, B, backend="numpy")
    scale = np.abs(A) @ np.abs(B)
    over = zgemm.matmul(A, B, real=functools.partial(ozaki2.matmul, backend="numpy"), backend="numpy")
    assert np.max(np.abs(over - R) / scale) < 4 * U
    fast = zgemm.matmul(A, B, real=functools.partial(strassen.matmul, level=1, backend="numpy"), backend="numpy")
    assert np.max(np.abs(fast - R) / scale) < 1e-13
    real_b = B.real.copy()
    got = zgemm.matmul(A, real_b, backend="numpy")
    assert got.dtype == np.complex128 and np.allclose(got, A @ real_b, rtol=0, atol=1e-13 * np.max(scale))
    out = np.empty((64, 48), dtype=complex)
    assert zgemm.matmul(A.astype(np.complex64), B, out=out, backend="numpy") is out


def test_bad_input_is_refused_before_any_work():
    A, B = operands(4, 5, 3)
    with pytest.raises(ValueError, match="scheme must be one of '4m', '3m'"):
        zgemm.matmul(A, B, scheme="2m", backend="numpy")
    with pytest.raises(ValueError, match="A's columns must equal B's rows"):
        zgemm.matmul(A, A, backend="numpy")
    with pytest.raises(ValueError, match="dtype complex128"):
        zgemm.matmul(A, B, out=np.empty((4, 3)), backend="numpy")
    with pytest.raises(TypeError, match="complex or real numbers"):
        zgemm.matmul(A, np.ones((5, 3), dtype=bool), backend="numpy")


@pytest.mark.gpu
def test_on_the_gpu_4m_over_ozaki2_equals_numpy_bit_for_bit(cupy_backend):
    A, B = operands(200, 300, 150, 1.0, 7)
    want = zgemm.matmul(A, B, real=functools.partial(ozaki2.matmul, moduli=15, backend="numpy"), backend="numpy")
    got = zgemm.matmul(cupy_backend.asarray(A), cupy_backend.asarray(B),
                       real=functools.partial(ozaki2.matmul, moduli=15, backend=cupy_backend), backend=cupy_backend)
    assert np.array_equal(cupy_backend.to_numpy(got), want)


def test_a_product_that_does_not_fit_is_refused_before_any_work(monkeypatch):
    be = get_backend("numpy")
    A, B = operands(30, 40, 20)
    monkeypatch.setattr(type(be), "memory_info", lambda self: (1000, 10**9))
    for scheme in zgemm.SCHEMES:
        with pytest.raises(MemoryPlanError, match=f"complex 30 x 40 x 20 product by {scheme.upper()}"):
            zgemm.matmul(A, B, scheme=scheme, backend="numpy")


@pytest.mark.parametrize("scheme, advice", [("3m", "pass out=, or split"), ("4m", "pass out=, use scheme='3m'")])
def test_a_refusal_frees_the_kept_plans_first_and_gives_advice_that_applies(monkeypatch, scheme, advice):
    be = get_backend("numpy")
    A, B = operands(30, 40, 20)
    freed = []
    monkeypatch.setattr(type(be), "memory_info", lambda self: (1000, 10**9))
    monkeypatch.setattr("gpu.backend.plans.free_kept_plans", lambda keep=(): freed.append(1) or 1)
    with pytest.raises(MemoryPlanError) as err:
        zgemm.matmul(A, B, scheme=scheme, backend="numpy")
    assert freed == [1] and advice in str(err.value) and ("sums" if scheme == "3m" else "stacked") in str(err.value)
    out = np.empty((30, 20), complex)
    with pytest.raises(MemoryPlanError) as err:
        zgemm.matmul(A, B, scheme=scheme, out=out, backend="numpy")
    assert "pass out=" not in str(err.value)


class _DeviceLike:
    """An operand that, like a CuPy array, has a dtype and refuses implicit conversion to NumPy."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed")


@pytest.mark.parametrize("dtypes, expected", [(("float64", "float64"), False), (("float64", "complex128"), True),
                                              (("complex64", "float32"), True)])
def test_is_complex_reads_a_device_arrays_dtype_without_converting_it(dtypes, expected):
    assert zgemm.is_complex(*(_DeviceLike(d) for d in dtypes)) is expected
    assert zgemm.is_complex([[1.0]], [[1j]]) is True
