"""Ozaki scheme II beyond one INT8 GEMM's k (blocks reduced modulo each modulus, one CRT) and
``moduli="auto"`` (the fewest moduli whose componentwise bound meets the target), on the CPU."""

import functools
from fractions import Fraction

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from accuracy.reference import exact_matmul
from gpu import ozaki2

#: Scheme II on the NumPy backend (the reference the GPU is checked against).
host_matmul = functools.partial(ozaki2.matmul, backend="numpy")


def as_ints(X: np.ndarray) -> np.ndarray:
    return np.array([[int(x) for x in row] for row in X], dtype=object)


def test_k_beyond_int32_range_is_exact_with_blocking():
    k = 2**17 + 3
    assert k > ozaki2.MAX_K
    A, B = phi_matrix(3, k, 1.0, 11), phi_matrix(k, 2, 1.0, 12)
    t = ozaki2.moduli_table(8)
    s = ozaki2.scale_accurate(A, B, t)
    exact = as_ints(s.A) @ as_ints(s.B)
    assert max(abs(v) for v in exact.ravel()) <= ozaki2.bound_limit(t)
    R = ozaki2.modular_product(s.A, s.B, t)
    assert (ozaki2.reconstruct_exact(R, t) == exact).all()
    for g, v in zip(ozaki2.reconstruct(R, t).ravel(), exact.ravel(), strict=True):
        assert abs(Fraction(float(g)) - v) <= t.crt_error() + Fraction(float(np.spacing(abs(float(v))))) / 2
    C = exact_matmul(A, B, backend="numpy")
    got = host_matmul(A, B, moduli=16)
    assert np.max(np.abs(got - C) / np.abs(C)) < 1e-12


def test_blocks_equal_one_product():
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((5, 100)), rng.standard_normal((100, 4))
    t = ozaki2.moduli_table(10)
    s = ozaki2.scale_accurate(A, B, t)
    whole = ozaki2.modular_product(s.A, s.B, t)
    for block in (1, 7, 99, 100):
        assert np.array_equal(ozaki2.modular_product(s.A, s.B, t, k_block=block), whole)
    assert np.array_equal(host_matmul(A, B, moduli=10, k_block=7), host_matmul(A, B, moduli=10))


def test_bad_k_block_and_arguments():
    A, B = np.ones((2, 3)), np.ones((3, 2))
    for bad in (0, ozaki2.MAX_K + 1, 2.0, True):
        with pytest.raises(ValueError):
            host_matmul(A, B, moduli=4, k_block=bad)
    with pytest.raises(ValueError):
        host_matmul(A, B, moduli=4, target="dgemm")
    with pytest.raises(ValueError):
        host_matmul(A, B, target=2.0)


@pytest.mark.parametrize("target", ["dgemm", 1e-10, "sgemm"])
def test_auto_meets_target_on_phi4(target):
    A, B = phi_matrix(20, 64, 4.0, 1), phi_matrix(64, 16, 4.0, 2)
    C = exact_matmul(A, B, backend="numpy")
    scale = np.abs(A) @ np.abs(B)
    goal = 2.0**-53 if target == "dgemm" else {"sgemm": 2.0**-24}.get(target, target)
    bounds = ozaki2.accurate_bounds(A, B)
    n = ozaki2.choose_moduli(A, B, bounds, target)
    errs = ozaki2.predicted_error(A, B, bounds, range(1, 21))
    assert errs[n - 1] <= goal and (n == 1 or errs[n - 2] > goal)
    got = host_matmul(A, B, moduli="auto", target=target, bound="componentwise", scaling="accurate")
    assert np.array_equal(got, host_matmul(A, B, moduli=n, scaling="accurate"))
    assert (np.abs(got - C) <= goal * scale + 2.0**-52 * np.abs(C)).all()
    # one modulus fewer than the choice misses the target somewhere on these inputs (the bound is not idle)
    if n > 1:
        fewer = host_matmul(A, B, moduli=n - 1, scaling="accurate")
        assert np.max(np.abs(fewer - C) / scale) > goal / 2**12


def test_tighter_target_needs_at_least_as_many_moduli():
    A, B = phi_matrix(16, 48, 4.0, 5), phi_matrix(48, 12, 4.0, 6)
    bounds = ozaki2.accurate_bounds(A, B)
    counts = [ozaki2.choose_moduli(A, B, bounds, t) for t in ("sgemm", 1e-10, 1e-13, "dgemm")]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    with pytest.raises(ValueError):
        ozaki2.choose_moduli(A, B, bounds, 1e-30)


def test_auto_on_zero_product():
    A, B = np.zeros((3, 4)), np.ones((4, 2))
    assert ozaki2.choose_moduli(A, B, ozaki2.accurate_bounds(A, B)) == 1
    assert not host_matmul(A, B).any()
