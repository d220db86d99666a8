"""Scheme II's complex 2M over the Gaussian moduli (``gpu.ozaki2.gauss``, ``complex.matmul(scheme="2m")``): the
moduli and their imaginary units; the pair and parts passes give Karatsuba's residues exactly, also at the ends of
the INT32 range; 2M equals 3M over the same moduli bit for bit (odd shapes, blocked k, phi up to 4); it keeps the
normwise bound its count was chosen for with two INT8 products per modulus; on the GPU it equals NumPy."""

import functools
from math import gcd

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from accuracy.reference import exact_matmul
from gpu.backend import get_backend
from gpu.ozaki2 import complex as zoz
from gpu.ozaki2 import complex_plan, gauss, normwise, winograd
from gpu.ozaki2.moduli import GAUSSIAN_MODULI, MODULI, greedy_moduli, has_imaginary_unit, imaginary_unit, moduli_table
from gpu.ozaki2.scaling import bound_limit

host = functools.partial(zoz.matmul, backend="numpy")


def operands(m, k, n, phi=1.0, seed=1):
    A = phi_matrix(m, k, phi, seed) + 1j * phi_matrix(m, k, phi, seed + 10)
    B = phi_matrix(k, n, phi, seed + 1) + 1j * phi_matrix(k, n, phi, seed + 11)
    return A, B


def test_the_gaussian_moduli_are_greedy_coprime_and_each_has_an_imaginary_unit():
    assert GAUSSIAN_MODULI == greedy_moduli(20, allowed=has_imaginary_unit)
    assert all(gcd(a, b) == 1 for i, a in enumerate(GAUSSIAN_MODULI) for b in GAUSSIAN_MODULI[i + 1:])
    for m in GAUSSIAN_MODULI:
        j = imaginary_unit(m)
        assert m % 2 == 1 and (j * j + 1) % m == 0 and abs(j) <= m // 2
    assert not has_imaginary_unit(255) and not has_imaginary_unit(3 * 5) and has_imaginary_unit(13 * 17)
    with pytest.raises(ValueError, match="no square root modulo 7"):
        imaginary_unit(7)
    # 16 of them hold as much of the CRT's range as 15 of GEMMul8's (within a bit)
    assert abs(np.log2(bound_limit(moduli_table(16, GAUSSIAN_MODULI)) / bound_limit(moduli_table(15)))) < 1
    assert moduli_table(4, GAUSSIAN_MODULI).moduli == GAUSSIAN_MODULI[:4] and moduli_table(4).moduli == MODULI[:4]


def _residues(rng, m, shape):
    return rng.integers(-(m // 2), m // 2 + 1, shape).astype(np.int8)


def test_the_pair_and_parts_passes_give_karatsubas_residues():
    rng = np.random.default_rng(3)
    ops, karatsuba = gauss.HostGaussOps(), winograd.HostResidueOps()
    for m in GAUSSIAN_MODULI:
        ar, ai, br, bi = (_residues(rng, m, (7, 40)) for _ in range(4))
        t1, t2, t3 = ar.astype(np.int32) @ br.T, ai.astype(np.int32) @ bi.T, \
            winograd.add(ar, ai, m).astype(np.int32) @ winograd.add(br, bi, m).astype(np.int32).T
        (ua, va), (ub, vb) = ops.split(ar, ai, m), ops.split(br, bi, m)
        P, Q = ua.astype(np.int32) @ ub.T, va.astype(np.int32) @ vb.T
        want = karatsuba.karatsuba(t1, t2, t3, m)
        for got, w in zip(ops.parts(P, Q, m), want, strict=True):
            assert got.dtype == np.int8 and np.array_equal(got, w), m
        x, y = ar.copy(), ai.copy()
        assert ops.split(x, y, m, out=(x, y)) == (x, y) and np.array_equal(x, ua) and np.array_equal(y, va)


def test_the_parts_pass_is_exact_at_the_ends_of_the_int32_range():
    ends = np.array([2**31 - 1, -(2**31), -(2**31) + 1, 0, 1, -1], dtype=np.int32)
    P, Q = (X.ravel()[None, :] for X in np.meshgrid(ends, ends, indexing="ij"))
    for m in (241, 221, 53):
        _, h, g = gauss.constants(m)
        assert (2 * h) % m == 1 and (2 * imaginary_unit(m) * g) % m == 1
        re, im = gauss.HostGaussOps().parts(P, Q, m)
        wide = [X.astype(object) for X in (P, Q)]
        assert np.array_equal(re, (((wide[0] + wide[1]) * h + m // 2) % m - m // 2).astype(np.int8))
        assert np.array_equal(im, (((wide[0] - wide[1]) * g + m // 2) % m - m // 2).astype(np.int8))


#: The last two write each modulus's parts straight into the planes (one k block, n a multiple of 16).
CASES = [((37, 70, 45), 1.0, 16, None), ((20, 131, 9), 4.0, "auto", None), ((33, 200, 17), 0.1, 12, 64),
         ((1, 1, 1), 2.0, "auto", None), ((40, 64, 48), 2.0, 14, None), ((9, 30, 16), 4.0, "auto", None)]


@pytest.mark.parametrize("shape, phi, moduli, k_block", CASES)
def test_2m_is_3m_over_the_same_moduli_bit_for_bit(shape, phi, moduli, k_block, monkeypatch):
    A, B = operands(*shape, phi)
    two = host(A, B, moduli=moduli, scheme="2m", k_block=k_block)
    monkeypatch.setattr(complex_plan, "moduli_of", lambda scheme: GAUSSIAN_MODULI)
    three = complex_plan.Plan(A, B, moduli=moduli, scheme="3m", k_block=k_block, backend="numpy")
    assert np.array_equal(two, three.run(A, B))


@pytest.mark.parametrize("phi", [0.1, 1.0, 4.0])
def test_2m_under_auto_never_takes_fewer_moduli_than_3m(phi, monkeypatch):
    """Its bound is kept on both parts as 3M's is (test_ozaki2_complex's normwise test runs both schemes)."""
    A, B = operands(40, 90, 30, phi, 4)
    counts = []
    real = normwise.first_meeting
    monkeypatch.setattr("gpu.ozaki2.ops.first_meeting", lambda e, goal: counts.append(real(e, goal)) or counts[-1])
    host(A, B, scheme="2m")
    host(A, B, scheme="3m")
    assert counts[0] >= counts[1], "the Gaussian moduli are smaller: never fewer of them"


def test_2m_takes_two_int8_products_per_modulus_and_block(monkeypatch):
    be = get_backend("numpy")
    calls = []
    real = type(be)._gemm_ex
    monkeypatch.setattr(type(be), "_gemm_ex", lambda self, *a: (calls.append(1), real(self, *a))[1])
    A, B = operands(32, 48, 32)
    host(A, B, moduli=9, scheme="2m")
    assert len(calls) == 2 * 9
    calls.clear()
    host(A, B, moduli=9, scheme="2m", k_block=16)
    assert len(calls) == 2 * 9 * 3
    assert zoz.peak_bytes(300, 400, 200, 16, "2m") < zoz.peak_bytes(300, 400, 200, 16, "3m")


@pytest.mark.gpu
def test_on_the_gpu_the_gaussian_passes_equal_numpys_in_both_kernels(cupy_backend):
    rng = np.random.default_rng(9)
    gpu_ops, host_ops = cupy_backend.ops(gauss.FAMILY), gauss.HostGaussOps()
    P = [rng.integers(-(2**31), 2**31, (40, 48)).astype(np.int32) for _ in range(2)]
    P[0][0, :3], P[1][0, :3] = [2**31 - 1, -(2**31), 0], [-(2**31), 2**31 - 1, -(2**31)]
    for m in (241, 221, 53):
        x, y = _residues(rng, m, (40, 64)), _residues(rng, m, (40, 64))
        for cols in (slice(None), slice(4, None), slice(1, None), slice(0, 45)):
            got = gpu_ops.parts(*(cupy_backend.asarray(X)[:, cols] for X in P), m)
            for g, w in zip(got, host_ops.parts(*(X[:, cols] for X in P), m), strict=True):
                assert np.array_equal(cupy_backend.to_numpy(g), w), (m, cols)
            want = host_ops.split(x[:, cols], y[:, cols], m)
            dx, dy = cupy_backend.asarray(x), cupy_backend.asarray(y)
            for pair in (gpu_ops.split(dx[:, cols], dy[:, cols], m),
                         gpu_ops.split(dx[:, cols], dy[:, cols], m, out=(dx[:, cols], dy[:, cols]))):
                for g, w in zip(pair, want, strict=True):
                    assert np.array_equal(cupy_backend.to_numpy(g), w), (m, cols)
                dx, dy = cupy_backend.asarray(x), cupy_backend.asarray(y)


@pytest.mark.gpu
def test_on_the_gpu_2m_equals_numpy_bit_for_bit(cupy_backend):
    for shape in ((300, 500, 200), (256, 320, 192)):               # the second: parts straight into the planes
        A, B = operands(*shape, 1.0, 6)
        for moduli in (16, "auto"):
            want = host(A, B, moduli=moduli, scheme="2m")
            got = zoz.matmul(cupy_backend.asarray(A), cupy_backend.asarray(B), moduli=moduli, scheme="2m",
                             backend=cupy_backend)
            assert np.array_equal(cupy_backend.to_numpy(got), want), (shape, moduli)


def test_a_target_only_gemmul8s_moduli_reach_is_refused_by_2m_with_the_way_out():
    """20 Gaussian moduli span 142 bits where 20 of GEMMul8's span 155: a target between their bounds is refused
    by 2M before any product, naming scheme='3m' and its bound, and 3M meets it."""
    A, B = operands(40, 60, 20, 1.0, 5)
    with pytest.raises(ValueError, match=r"scheme='3m' takes GEMMul8's wider ones, normwise bound .* at 20"):
        host(A, B, target=1e-21)
    C, R = host(A, B, target=1e-21, scheme="3m"), exact_matmul(A, B, backend="numpy")
    assert np.abs(C - R).max() < 1e-15 * np.abs(R).max()
    with pytest.raises(ValueError, match="modulus count must be an integer in 1..20"):
        moduli_table(21, GAUSSIAN_MODULI)
    with pytest.raises(ValueError, match="no square root modulo 2"):
        imaginary_unit(2)


def test_the_default_scheme_is_2m_under_the_bound_and_3m_for_a_count_given():
    """A count given keeps its meaning (that many of GEMMul8's moduli: 3M); the bound's count runs 2M."""
    A, B = operands(17, 40, 16, 1.0, 7)
    assert np.array_equal(host(A, B, moduli=12), host(A, B, moduli=12, scheme="3m"))
    assert not np.array_equal(host(A, B, moduli=12), host(A, B, moduli=12, scheme="2m"))
    assert np.array_equal(host(A, B), host(A, B, scheme="2m"))
    assert zoz.scheme_of(None, None) == "2m" and zoz.scheme_of(None, 9) == "3m" and zoz.scheme_of("4m", None) == "4m"
