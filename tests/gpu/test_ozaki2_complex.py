"""Ozaki scheme II for complex products (``gpu.ozaki2.complex.matmul``): 3M over the residues and 4M through the
real scheme's plans give the same bits, on odd shapes, phi up to 4 and blocked k; the error of 2M and 3M keeps the
normwise bound against the exact complex reference; 3M takes three INT8 products per modulus; NaN rows follow the
real formula; bad input is refused; on the GPU it equals NumPy bit for bit."""

import functools

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from accuracy.reference import exact_matmul
from gpu import ozaki2, zgemm
from gpu.backend import MemoryPlanError, get_backend, plans
from gpu.ozaki2 import complex as zoz
from gpu.ozaki2 import winograd

host = functools.partial(zoz.matmul, backend="numpy")


def operands(m, k, n, phi=1.0, seed=1):
    A = phi_matrix(m, k, phi, seed) + 1j * phi_matrix(m, k, phi, seed + 10)
    B = phi_matrix(k, n, phi, seed + 1) + 1j * phi_matrix(k, n, phi, seed + 11)
    return A, B


#: The last two write each modulus's parts straight into the planes (one k block, n a multiple of 16).
CASES = [((37, 70, 45), 1.0, 15, None), ((20, 131, 9), 4.0, "auto", None), ((33, 200, 17), 0.1, 12, 64),
         ((1, 1, 1), 2.0, "auto", None), ((40, 64, 48), 2.0, 14, None), ((9, 30, 16), 4.0, "auto", None)]


@pytest.mark.parametrize("shape, phi, moduli, k_block", CASES)
def test_3m_and_4m_over_the_residues_are_4m_over_the_real_scheme_bit_for_bit(shape, phi, moduli, k_block):
    A, B = operands(*shape, phi)
    three = host(A, B, moduli=moduli, scheme="3m", k_block=k_block)
    assert np.array_equal(three, host(A, B, moduli=moduli, scheme="4m", k_block=k_block))
    real = functools.partial(ozaki2.matmul, moduli=moduli, k_block=k_block, backend="numpy")
    assert np.array_equal(three, zgemm.matmul(A, B, real=real, backend="numpy"))


@pytest.mark.parametrize("scheme", ["2m", "3m"])
@pytest.mark.parametrize("phi", [0.1, 1.0, 4.0])
def test_auto_keeps_the_normwise_bound_on_both_parts(phi, scheme):
    A, B = operands(40, 90, 30, phi, 4)
    C, R = host(A, B, scheme=scheme), exact_matmul(A, B, backend="numpy")
    k2 = 2 * A.shape[1]
    t = 2.0**-56 * np.sqrt(k2)
    rows = np.sqrt((np.abs(A) ** 2).sum(axis=1))
    cols = np.sqrt((np.abs(B) ** 2).sum(axis=0))
    for got, want in ((C.real, R.real), (C.imag, R.imag)):
        assert np.all(np.abs(got - want) <= t * rows[:, None] * cols[None, :] + 2.0**-53 * np.abs(got))


def test_3m_takes_three_int8_products_per_modulus_and_block_and_4m_the_work_of_four(monkeypatch):
    """3M: three INT8 products per modulus; 4M: two real products of 2k terms through the real scheme's plans,
    4/3 of 3M's INT8 work."""
    be = get_backend("numpy")
    work = []
    real = type(be)._gemm_ex
    monkeypatch.setattr(type(be), "_gemm_ex", lambda self, rec, call, beta, arrays: (
        work.append(arrays[0].shape[0] * arrays[0].shape[1] * arrays[1].shape[1]),
        real(self, rec, call, beta, arrays))[1])
    A, B = operands(32, 48, 32)
    host(A, B, moduli=9, scheme="3m")
    three, calls = sum(work), len(work)
    work.clear()
    host(A, B, moduli=9, scheme="4m")
    assert calls == 3 * 9 and 3 * sum(work) == 4 * three


@pytest.mark.parametrize("scheme", zoz.SCHEMES)
def test_nonfinite_rows_follow_the_real_formula_and_bad_input_is_refused(scheme):
    for n in (5, 16):
        A, B = operands(6, 8, n)
        A[2, 3] = complex(np.inf, 0.0)
        B[1, 4] = complex(0.0, -np.inf)
        C = host(A, B, moduli=10, scheme=scheme)
        with np.errstate(invalid="ignore"):
            want = zgemm.matmul(A, B, backend="numpy")
        assert np.array_equal(np.isnan(C), np.isnan(want)) and np.array_equal(np.isinf(C), np.isinf(want)), n
        assert np.array_equal(C[~np.isfinite(C)], want[~np.isfinite(want)], equal_nan=True), n
        assert np.all(np.isfinite(np.delete(np.delete(C, 2, axis=0), 4, axis=1))), n
    with pytest.raises(ValueError, match="scheme must be one of '2m', '3m', '4m'"):
        host(A, B, scheme="karatsuba")
    with pytest.raises(ValueError, match="moduli must be 'auto' or a count"):
        host(A, B, moduli=0)
    with pytest.raises(ValueError, match="A's columns must equal B's rows"):
        host(A, A)


@pytest.mark.gpu
def test_on_the_gpu_complex_scheme_ii_equals_numpy_bit_for_bit(cupy_backend):
    for shape in ((300, 500, 200), (256, 320, 192)):               # the second: parts straight into the planes
        A, B = operands(*shape, 1.0, 6)
        for moduli in (15, "auto"):
            want = host(A, B, moduli=moduli, scheme="3m")
            for scheme in ("3m", "4m"):
                got = zoz.matmul(cupy_backend.asarray(A), cupy_backend.asarray(B), moduli=moduli, scheme=scheme,
                                 backend=cupy_backend)
                assert np.array_equal(cupy_backend.to_numpy(got), want), (shape, scheme)


def test_a_product_that_does_not_fit_is_refused_before_any_work(monkeypatch):
    be = get_backend("numpy")
    A, B = operands(30, 40, 20)
    need = zoz.peak_bytes(30, 40, 20, 20)
    assert need > 16 * 30 * 20 and zoz.peak_bytes(60, 40, 20, 20) > need
    monkeypatch.setattr(type(be), "memory_info", lambda self: (need // 2, 10 * need))
    with pytest.raises(MemoryPlanError, match="complex 30 x 40 x 20 product"):
        host(A, B)


def test_a_refusal_frees_the_kept_plans_and_asks_again(monkeypatch):
    """Plans kept by earlier calls hold memory: the check asks again after freeing them, and refuses only if it
    still does not fit."""
    be = get_backend("numpy")
    A, B = operands(30, 40, 20)
    need = zoz.peak_bytes(30, 40, 20, 20)
    freed = []

    def free(keep=()):
        freed.append(1)
        return 1
    monkeypatch.setattr(plans, "free_kept_plans", free)
    monkeypatch.setattr(type(be), "memory_info", lambda self: ((10 * need) if freed else need // 2, 10 * need))
    assert np.array_equal(host(A, B, moduli=12, scheme="3m"), zoz.matmul(A, B, moduli=12, scheme="4m", backend="numpy"))
    assert freed == [1]
    monkeypatch.setattr(type(be), "memory_info", lambda self: (need // 2, 10 * need))
    with pytest.raises(MemoryPlanError, match="complex 30 x 40 x 20 product"):
        host(A, B)
    monkeypatch.setattr(plans, "free_kept_plans", lambda keep=(): 0)
    with pytest.raises(MemoryPlanError, match="complex 30 x 40 x 20 product"):
        host(A, B)


def test_the_karatsuba_pass_is_exact_at_the_ends_of_the_int32_range():
    ends = np.array([2**31 - 1, -(2**31), -(2**31) + 1, 0, 1, -1], dtype=np.int32)
    P1, P2, P3 = (X.ravel()[None, :] for X in np.meshgrid(ends, ends, ends, indexing="ij"))
    for m in (256, 251, 7):
        re, im = winograd.HostResidueOps().karatsuba(P1, P2, P3, m)
        wide = [P.astype(object) for P in (P1, P2, P3)]
        assert re.dtype == im.dtype == np.int8
        assert np.array_equal(re, ((wide[0] - wide[1] + m // 2) % m - m // 2).astype(np.int8))
        assert np.array_equal(im, ((wide[2] - wide[0] - wide[1] + m // 2) % m - m // 2).astype(np.int8))


@pytest.mark.gpu
def test_on_the_gpu_the_karatsuba_pass_equals_numpys_in_both_kernels(cupy_backend):
    rng = np.random.default_rng(9)
    gpu_ops, host = cupy_backend.ops(winograd.FAMILY), winograd.HostResidueOps()
    P = [rng.integers(-(2**31), 2**31, (40, 48)).astype(np.int32) for _ in range(3)]
    P[0][0, :3], P[1][0, :3], P[2][0, :3] = [2**31 - 1, -(2**31), 0], [-(2**31), 2**31 - 1, 0], [-(2**31)] * 3
    for m in (256, 251):
        for cols in (slice(None), slice(4, None), slice(1, None), slice(0, 45)):
            got = gpu_ops.karatsuba(*(cupy_backend.asarray(X)[:, cols] for X in P), m)
            want = host.karatsuba(*(X[:, cols] for X in P), m)
            for g, w in zip(got, want, strict=True):
                assert np.array_equal(cupy_backend.to_numpy(g), w), (m, cols)
            planes = cupy_backend.xp.zeros((2, 40, 48), dtype=np.int8)
            into = (planes[0][:, cols], planes[1][:, cols])
            assert gpu_ops.karatsuba(*(cupy_backend.asarray(X)[:, cols] for X in P), m, into) is into
            for g, w in zip(into, want, strict=True):
                assert np.array_equal(cupy_backend.to_numpy(g), w), (m, cols, "into")
