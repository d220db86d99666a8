"""Ozaki scheme II's exact core on the CPU: the moduli table, residues at any magnitude, the
double-double CRT against Python-integer arithmetic, accurate scaling's bound, and the NumPy
reference whose error falls as moduli are added."""

import functools
import math
from fractions import Fraction
from math import gcd, prod

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.reference import exact_matmul
from gpu import ozaki2
from gpu.ozaki2.moduli import MAX_RESIDUE

COUNTS = range(1, ozaki2.MAX_MODULI + 1)

#: Scheme II on the NumPy backend (the reference the GPU is checked against).
host_matmul = functools.partial(ozaki2.matmul, backend="numpy")


def exact_residue(v: int, m: int) -> int:
    """The symmetric residue of a Python int, independently of the module."""
    lo, _ = ozaki2.residue_range(m)
    return (v - lo) % m + lo


def test_moduli_pairwise_coprime_and_int8():
    mods = ozaki2.MODULI
    assert len(mods) == 20 and len(set(mods)) == 20
    for i, a in enumerate(mods):
        lo, hi = ozaki2.residue_range(a)
        assert -128 <= lo and hi <= 127 and hi - lo + 1 == a
        for b in mods[i + 1:]:
            assert gcd(a, b) == 1, (a, b)
    assert ozaki2.greedy_moduli(20) == mods


@pytest.mark.parametrize("n", COUNTS)
def test_crt_constants(n):
    t = ozaki2.moduli_table(n)
    assert t.product == prod(ozaki2.MODULI[:n])
    for m, c, inv, w, hi, lo in zip(t.moduli, t.cofactors, t.inverses, t.weights, t.weights_hi, t.weights_lo,
                                    strict=True):
        assert c * m == t.product and c * inv % m == 1
        assert all(w % p == (p == m) for p in t.moduli)
        assert abs(w) <= t.product // 2
        assert int(hi) % (1 << t.grid) == 0 and abs(Fraction(hi) + Fraction(lo) - w) <= 2.0 ** (t.grid - 54)
    assert sum(abs(int(h)) for h in t.weights_hi) * MAX_RESIDUE <= 2 ** (53 + t.grid)
    assert t.exact == (n <= 5)


def test_table_refuses_bad_counts():
    for bad in (0, 21, 2.0, True):
        with pytest.raises(ValueError):
            ozaki2.moduli_table(bad)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**200), 2**200), min_size=1, max_size=30), st.integers(0, 970))
def test_residues_of_float_integers(vals, shift):
    with np.errstate(over="ignore"):
        X = np.array([float(v) for v in vals]) * 2.0**shift
    X = X[np.isfinite(X)]
    R = ozaki2.residues(X, ozaki2.MODULI)
    assert R.dtype == np.int8
    for t, m in enumerate(ozaki2.MODULI):
        assert [int(r) for r in R[t]] == [exact_residue(int(x), m) for x in X]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=30))
def test_residues_of_int64(vals):
    R = ozaki2.residues(np.array(vals, dtype=np.int64), ozaki2.MODULI)
    for t, m in enumerate(ozaki2.MODULI):
        assert [int(r) for r in R[t]] == [exact_residue(v, m) for v in vals]


def test_residues_refuse_non_integers():
    with pytest.raises(ValueError):
        ozaki2.residues(np.array([1.5]), ozaki2.MODULI)
    with pytest.raises(TypeError):
        ozaki2.residues(np.array([1.0], dtype=np.float32), ozaki2.MODULI)


def check_crt(vals: list[int], n: int) -> None:
    """reconstruct_exact returns the values; reconstruct is within crt_error plus half an ulp."""
    t = ozaki2.moduli_table(n)
    R = np.array([[exact_residue(v, m) for v in vals] for m in t.moduli], dtype=np.int8)
    assert list(ozaki2.reconstruct_exact(R, t)) == vals
    got = ozaki2.reconstruct(R, t)
    for g, v in zip(got, vals, strict=True):
        err = abs(Fraction(float(g)) - v)
        if t.exact:
            assert err == 0
        else:
            assert err <= t.crt_error() + Fraction(float(np.spacing(abs(float(v))))) / 2, (n, v, float(g))


@pytest.mark.parametrize("n", range(2, 21))
def test_crt_random_values(n):
    M = ozaki2.moduli_table(n).product
    rng = np.random.default_rng(n)
    margin = M // 2**50 + 1
    vals = [int.from_bytes(rng.bytes(24), "little") % (M - 2 * margin) - (M // 2 - margin) for _ in range(300)]
    vals += [0, 1, -1, 2**60 + 1, M // 2 - margin, -(M // 2) + margin]
    check_crt([v for v in vals if abs(v) < M // 2 - margin + 1], n)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 20), st.data())
def test_crt_random_residues(n, data):
    t = ozaki2.moduli_table(n)
    R = np.array([data.draw(st.integers(*ozaki2.residue_range(m))) for m in t.moduli], dtype=np.int8)[:, None]
    v = int(ozaki2.reconstruct_exact(R, t)[0])
    assert all(exact_residue(v, m) == r for m, r in zip(t.moduli, R[:, 0], strict=True))
    if abs(v) <= t.product // 2 - t.product // 2**50 - 1:
        check_crt([v], n)


@pytest.mark.parametrize("n", [2, 5, 8, 12, 16, 20])
@pytest.mark.parametrize("phi", [0.5, 4.0])
def test_scaled_product_recovered_exactly(n, phi):
    rng = np.random.default_rng(n)
    A = (rng.random((9, 33)) - 0.5) * np.exp(phi * rng.standard_normal((9, 33)))
    B = (rng.random((33, 7)) - 0.5) * np.exp(phi * rng.standard_normal((33, 7)))
    A[2] = 0.0
    t = ozaki2.moduli_table(n)
    s = ozaki2.scale_accurate(A, B, t)
    nearest = (s.shift_a >= ozaki2.accurate_bounds(A, B).e)[:, None]
    assert np.array_equal(s.A, np.where(nearest, np.rint(np.ldexp(A, s.shift_a[:, None])),
                                        np.trunc(np.ldexp(A, s.shift_a[:, None]))))
    assert np.array_equal(s.B, np.trunc(s.B))
    exact = np.array([[int(x) for x in row] for row in s.A], object) @ np.array([[int(x) for x in row] for row in s.B],
                                                                                  object)
    limit = ozaki2.bound_limit(t)
    assert Fraction(limit) <= Fraction(t.product, 2) * (1 - Fraction(1, 2**40))
    assert max(abs(v) for v in exact.ravel()) <= limit
    assert max(abs(v) for v in exact.ravel()) > limit / 2**4  # the shifts use the range
    R = ozaki2.modular_product(s.A, s.B, t)
    assert (ozaki2.reconstruct_exact(R, t) == exact).all()
    got = ozaki2.reconstruct(R, t)
    for g, v in zip(got.ravel(), exact.ravel(), strict=True):
        assert abs(Fraction(float(g)) - v) <= t.crt_error() + Fraction(float(np.spacing(abs(float(v))))) / 2


def test_error_falls_with_moduli():
    rng = np.random.default_rng(7)
    A, B = rng.standard_normal((24, 64)), rng.standard_normal((64, 20))
    C = exact_matmul(A, B, backend="numpy")
    errs = [np.max(np.abs(host_matmul(A, B, moduli=n) - C) / np.abs(C)) for n in (4, 6, 8, 10, 12, 14, 16)]
    assert all(b < a for a, b in zip(errs, errs[1:]))
    assert errs[-1] <= np.max(np.abs(A @ B - C) / np.abs(C)) and errs[0] > 1e-3


def test_matmul_refuses_nonfinite_where_asked():
    with pytest.raises(ValueError, match="NaN or infinity"):
        host_matmul(np.array([[np.nan]]), np.ones((1, 1)), moduli=8, check_finite=True)
    assert np.isnan(host_matmul(np.array([[np.nan]]), np.ones((1, 1)), moduli=8)).all()


@pytest.mark.parametrize("n", range(1, 21))
def test_bound_limit_is_the_largest_double_inside_the_margin(n):
    t = ozaki2.moduli_table(n)
    edge = Fraction(t.product, 2) * (1 - Fraction(1, 2**40))
    limit = ozaki2.bound_limit(t)
    assert limit == int(limit) and Fraction(limit) <= edge           # an integer bound, as |A'B'|_ij are
    assert Fraction(float(np.nextafter(limit, np.inf))) > math.floor(edge)


@pytest.mark.parametrize("n", [2, 9, 15])
@pytest.mark.parametrize("phi", [0.0, 1.0, 4.0])
def test_accurate_shifts_hold_the_bound_and_none_can_grow(n, phi):
    """2**(u_i + v_j) Cbar_ij <= L_N for all i, j, and doubling any row's (column's) scale would break it."""
    rng = np.random.default_rng(n)
    A = (rng.random((11, 40)) - 0.5) * np.exp(phi * rng.standard_normal((11, 40)))
    B = (rng.random((40, 8)) - 0.5) * np.exp(phi * rng.standard_normal((40, 8)))
    t = ozaki2.moduli_table(n)
    bounds = ozaki2.accurate_bounds(A, B)
    u, v = ozaki2.headroom(bounds, t)
    limit = Fraction(ozaki2.bound_limit(t))
    scaled = [[Fraction(int(c)) * Fraction(2) ** int(u[i] + v[j]) for j, c in enumerate(row)]
              for i, row in enumerate(bounds.cbar)]
    assert max(max(row) for row in scaled) <= limit
    assert all(2 * max(row) > limit for row in scaled)
    assert all(2 * max(col) > limit for col in zip(*scaled, strict=True))


def test_fast_shifts_are_the_largest_half_shifts():
    """Fast mode: R_i 4**u_i <= L_N < R_i 4**(u_i + 1), exactly."""
    rng = np.random.default_rng(3)
    rows = np.concatenate([[1.0, 2.0, 3.0, 4.0], rng.integers(1, 2**40, 200).astype(np.float64)])
    for n in (3, 14, 20):
        t = ozaki2.moduli_table(n)
        u, _ = ozaki2.headroom(ozaki2.Bounds(None, rows, None, rows), t)
        limit = Fraction(ozaki2.bound_limit(t))
        for r, x in zip(rows, u, strict=True):
            assert Fraction(int(r)) * Fraction(4) ** int(x) <= limit < Fraction(int(r)) * Fraction(4) ** (int(x) + 1)


def _rint_magic(x: np.float64) -> np.float64:
    magic = np.float64(1.5 * 2**52)
    return (x + magic) - magic


@settings(max_examples=300, deadline=None)
@given(v=st.one_of(st.integers(-(2**79 - 1), 2**79 - 1), st.integers(-(2**30), 2**30),
                   st.sampled_from([2**79 - 2**26, -(2**79 - 2**26), 2**53 + 2, 2**52 - 1, 0])))
def test_residue_kernel_limbs_are_exact_below_2_79(v):
    """The residue kernel's limbs path (``gpu.ozaki2.kernels.split_limbs``, float64 steps replayed here in
    NumPy): an integer-valued x' with |x'| < 2**79 is a 2**52 + b 2**26 + c exactly, |a| <= 2**27 and
    |b|, |c| <= 2**25, so y = a (2**52 mod m) + b (2**26 mod m) + c is an integer below 2**36 in float64,
    congruent to x' for every modulus: the bound ``residue_word`` needs."""
    n = np.float64(v)
    a = _rint_magic(n * np.float64(2.0**-52))
    rest = n - a * np.float64(2.0**52)
    b = _rint_magic(rest * np.float64(2.0**-26))
    c = rest - b * np.float64(2.0**26)
    assert int(a) * 2**52 + int(b) * 2**26 + int(c) == int(n)
    assert abs(int(a)) <= 2**27 and abs(int(b)) <= 2**25 and abs(int(c)) <= 2**25
    for m in ozaki2.moduli_table(ozaki2.MAX_MODULI).moduli:
        y = int(a) * (2**52 % m) + int(b) * (2**26 % m) + int(c)
        assert abs(y) < 2**36 and (y - int(n)) % m == 0
