"""Fine scaling (``scaling="fine"``): scales that are not powers of two keep A'B' inside the CRT's range, the
codes are the same on both backends, the levels give the plain product's bits, fast mode's bits are those of
powers of two, and the error falls against fast scaling's."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from accuracy.generate import phi_matrix
from accuracy.reference import exact_matmul
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2.api import line_stats
from gpu.ozaki2.moduli import moduli_table
from gpu.ozaki2.scaling import (
    FINE_BITS,
    MAX_K_FINE,
    bound_limit,
    code_parts,
    codes,
    fine_limit,
    half_shift,
    to_integers,
)


def integers(X, code, e):
    """The scaled integers of X's rows as the residue pass forms them, as Python ints."""
    s, rho = code_parts(code)
    Y = to_integers(np.ldexp(X, s[:, None]) * rho[:, None], (s >= e)[:, None])
    return np.vectorize(int, otypes=[object])(Y)


def line_codes(A, B, count, fine_k):
    rows, cols = line_stats(get_backend("numpy"), A, B, wide=fine_k is not None)
    table = moduli_table(count)
    return rows, cols, codes(rows.e, rows.R, table, fine_k, rows.Rw), codes(cols.e, cols.R, table, fine_k, cols.Rw)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 6), k=st.integers(1, 200), n=st.integers(1, 6), kind=st.sampled_from(["phi", "equal", "one"]),
       count=st.integers(1, 20), seed=st.integers(0, 2**16))
@example(m=2, k=200, n=2, kind="equal", count=14, seed=0)
@example(m=1, k=7, n=1, kind="equal", count=3, seed=1)
def test_fine_codes_keep_every_product_entry_inside_the_crt_range(m, k, n, kind, count, seed):
    """|A'B'|_ij <= L_N exactly, also where Cauchy-Schwarz is tight (equal entries: A'B' reaches the bound) and
    where the fine bound T is 0 (a few moduli and long k: fast mode's codes)."""
    rng = np.random.default_rng(seed)
    if kind == "phi":
        A, B = phi_matrix(m, k, 2.0, (seed, 0)), phi_matrix(k, n, 2.0, (seed, 1))
    elif kind == "equal":
        A, B = np.full((m, k), 0.7) * rng.choice([-1, 1], (m, 1)), np.full((k, n), 3.1)
    else:
        A, B = rng.random((m, k)) * 2.0**-30, rng.random((k, n))
        A[:, rng.integers(k)] = 1.0
    rows, cols, ca, cb = line_codes(A, B, count, k)
    exact = integers(A, ca, rows.e) @ integers(B.T, cb, cols.e).T
    assert max(abs(int(x)) for x in exact.ravel()) <= bound_limit(moduli_table(count))


def test_fine_codes_are_at_least_fast_ones_and_fast_codes_are_powers_of_two():
    A, B = phi_matrix(40, 3000, 1.0, 4), phi_matrix(3000, 30, 1.0, 5)
    for count in (1, 8, 14, 15, 20):
        rows, cols, fine_a, fine_b = line_codes(A, B, count, A.shape[1])
        _, _, fast_a, fast_b = line_codes(A, B, count, None)
        assert np.all(fine_a >= fast_a) and np.all(fine_b >= fast_b)
        assert np.array_equal(fast_a, (rows.e + half_shift(rows.R, bound_limit(moduli_table(count)))) << FINE_BITS)
        assert fine_limit(moduli_table(count), 3000) == 0.0 or np.any(fine_a % 2**FINE_BITS)


def test_fine_scaling_needs_a_count():
    A = np.ones((3, 4))
    with pytest.raises(ValueError, match="scaling='fine' needs a modulus count"):
        ozaki2.matmul(A, A.T, scaling="fine", backend="numpy")


@pytest.mark.parametrize("workspace", [None, 2**22])
def test_fine_scaling_refuses_a_k_its_wide_sums_cannot_hold(workspace):
    """Beyond MAX_K_FINE the uint64 sums of the wide bars' squares could wrap, and the scales taken from them
    overflow the CRT's range: a clear error before any work, for the whole product's plan and the tiled one (the
    operands are broadcast views: nothing of their 2**32 entries is read)."""
    assert MAX_K_FINE * (2**16) ** 2 < 2**64 <= (MAX_K_FINE + 1) * (2**16) ** 2
    A = np.broadcast_to(np.full((1, 1), 0.5), (1, MAX_K_FINE + 1))
    with pytest.raises(ValueError, match=rf"scaling='fine' takes k up to {MAX_K_FINE} .* not k = {MAX_K_FINE + 1}"):
        ozaki2.matmul(A, A.T, moduli=14, scaling="fine", workspace=workspace, backend="numpy")


def test_fine_scaling_lowers_the_error_of_fast_scaling():
    """phi = 1, k = 16384, 14 moduli: the median error per entry falls by a third or more (1.5x in a simulation of
    the roundings at this k); the arithmetic is exact integers and correctly rounded operations, so the numbers
    are the same on every machine."""
    A, B = phi_matrix(24, 16384, 1.0, 7), phi_matrix(16384, 24, 1.0, 8)
    exact = exact_matmul(A, B, backend="numpy")
    err = {s: np.median(np.abs(ozaki2.matmul(A, B, moduli=14, scaling=s, backend="numpy") - exact) / np.abs(exact))
           for s in ("fast", "fine")}
    assert err["fine"] <= 0.75 * err["fast"], err


@pytest.mark.parametrize("level", [1, 2])
def test_fine_levels_give_the_plain_products_bits(level):
    A, B = phi_matrix(37, 70, 1.0, 2), phi_matrix(70, 29, 1.0, 3)
    plain = ozaki2.matmul(A, B, moduli=15, scaling="fine", backend="numpy")
    assert np.array_equal(ozaki2.matmul(A, B, moduli=15, scaling="fine", level=level, backend="numpy"), plain)
    assert np.array_equal(ozaki2.matmul(A.T.copy().T, B, moduli=15, scaling="fine", level=level,
                                        backend="numpy"), plain)


@pytest.mark.gpu
def test_gpu_fine_codes_equal_numpy(cupy_backend):
    """The shift kernel's codes are NumPy's: R at and around powers of four, 0, 1 and huge, every count."""
    rng = np.random.default_rng(9)
    R = np.concatenate([[0.0, 1.0, 2.0, 3.0, 4.0, 4.0**20, 4.0**20 + 1, 4.0**20 - 1],
                        rng.integers(1, 2**50, 300).astype(float), np.ldexp(rng.random(100), rng.integers(0, 80, 100))])
    e = rng.integers(-1000, 1000, R.size).astype(np.int32)
    e[:3] = -(1 << 20)
    dev = ozaki2.LineStats(*(cupy_backend.asarray(x) for x in (np.ones(R.size), e, R)))
    gpu_ops = cupy_backend.ops("ozaki2")
    for count in (1, 5, 14, 15, 20):
        table = moduli_table(count)
        for fine_k in (None, 1, 4096, 2**40):
            got = cupy_backend.to_numpy(gpu_ops.shifts(dev, table, None, fine_k))
            assert np.array_equal(got, codes(e, R, table, fine_k)), (count, fine_k)


def test_wide_bars_are_the_squares_of_bars_a_thousand_times_finer():
    """Rw = sum ceil(|x| 2**(e + 10))**2 exactly, 0 for a line that is not finite, and above R 4**10 by at most
    the rounding of the coarse bars."""
    X = phi_matrix(5, 700, 1.0, 3)
    X[1, 5], X[2] = np.nan, 0.0
    stats = get_backend("numpy").ops("ozaki2").line_stats(X, wide=True)
    for i, row in enumerate(X):
        want = 0 if i == 1 else sum(int(np.ceil(abs(x) * 2.0 ** (int(stats.e[i]) + 10))) ** 2 for x in row)
        assert int(stats.Rw[i]) == want
        assert want <= stats.R[i] * 4**10


@pytest.mark.gpu
def test_gpu_wide_bars_and_their_codes_equal_numpy(cupy_backend):
    """The wide-bars pass gives NumPy's Rw in both layouts, NaN, infinity and zero lines among them, and the shift
    kernel NumPy's codes from them."""
    X = phi_matrix(70, 1000, 2.0, 5)
    X[3, 7], X[4, 0], X[5] = np.nan, -np.inf, 0.0
    host = get_backend("numpy").ops("ozaki2")
    want = host.line_stats(X, wide=True)
    gpu_ops = cupy_backend.ops("ozaki2")
    for dev in (cupy_backend.asarray(X), cupy_backend.asarray(np.ascontiguousarray(X.T)).T):
        got = gpu_ops.line_stats(dev, wide=True)
        assert np.array_equal(cupy_backend.to_numpy(got.Rw), want.Rw)
        for count in (5, 14, 20):
            table = moduli_table(count)
            assert np.array_equal(cupy_backend.to_numpy(gpu_ops.shifts(got, table, None, 1000)),
                                  host.shifts(want, table, None, 1000)), count
