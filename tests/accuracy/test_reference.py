"""Exact references: the sliced-GEMM product, gmpy2 and ``fractions.Fraction`` agree bit for bit,
on hard cases (cancellation, overflow, subnormal results, zeros, wide exponents) and on random
ones; blocking, carries and tiling are forced small to exercise them; clear errors."""

import math
from fractions import Fraction

import gmpy2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from accuracy import mpfr, reference
from accuracy.generate import cancellation_pair, phi_matrix, wide_exponent_matrix
from accuracy.reference import exact_matmul, mpfr_matmul, plan_exact, sample_entries

MAX = np.finfo(np.float64).max
TINY = 2.0**-1074


def fraction_matmul(A, B):
    """Correctly rounded A @ B through exact rationals; Python's int / int division rounds
    correctly, subnormals included; overflow becomes an infinity of the right sign."""
    m, n = A.shape[0], B.shape[1]
    C = np.zeros((m, n))
    cols = [[Fraction(x) for x in B[:, j].tolist()] for j in range(n)]
    for i in range(m):
        row = [Fraction(x) for x in A[i].tolist()]
        for j in range(n):
            s = sum((a * b for a, b in zip(row, cols[j])), Fraction(0))
            try:
                C[i, j] = float(s)
            except OverflowError:
                C[i, j] = math.inf if s > 0 else -math.inf
    return C


def host(backend, x):
    return np.asarray(backend.to_numpy(x))


def assert_bitwise(got, want):
    """Same values bit for bit: an exact zero is +0 in every path, a negative result that
    rounds to zero is -0, as IEEE 754 has it."""
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.int64), want.view(np.int64)), (got, want)


def col(*xs):
    return np.array(xs, dtype=np.float64)[:, None]


def row(*xs):
    return np.array(xs, dtype=np.float64)[None, :]


HARD = {
    # max + 2**970 is halfway between max (odd significand) and 2**1024: ties to even overflow
    "tie-to-overflow": (row(MAX, 2.0**970), col(1, 1)),
    "just-below-overflow-tie": (row(MAX, 2.0**970, -(2.0**900)), col(1, 1, 1)),
    "overflow-then-cancel": (row(MAX, MAX, -MAX), col(1, 1, 1)),
    "huge-times-huge": (row(2.0**600, -(2.0**600)), col(2.0**423, 2.0**423 - 2.0**371)),
    "subnormal-tie-to-even": (row(3 * 2.0**-540), col(2.0**-535)),          # 1.5 * 2**-1074 -> 2**-1073
    "below-half-smallest": (row(2.0**-540, 2.0**-600), col(2.0**-536, 2.0**-600)),  # 2**-1076 + ... -> 0
    "exactly-half-smallest": (row(2.0**-540), col(2.0**-535)),              # 2**-1075: tie -> 0 (even)
    "above-half-smallest": (row(2.0**-540, 2.0**-600), col(2.0**-535, 2.0**-600)),  # just above -> 2**-1074
    "subnormal-inputs": (row(TINY, 3 * TINY, -TINY), col(2.0**1000, 2.0**1000, 2.0**1023)),
    "absorbed-then-cancelled": (row(1e16, 1.0, -1e16), col(1.0, 1.0, 1.0)),
    "normal-boundary": (row(2.0**-511, -(2.0**-563)), col(2.0**-511, 2.0**-512)),
    "cancel-to-tiny": (row(1.0, 2.0**-200, -1.0), col(1.0, 2.0**-900, 1.0)),
    "sticky-far-below": (row(1.0, 2.0**-53, 2.0**-1000), col(1.0, 1.0, 2.0**-70)),
    "exact-zero": (row(3.0, -1.5, 0.0), col(1.0, 2.0, 7.0)),
    "negative-underflow": (row(-(2.0**-540)), col(2.0**-540)),              # -2**-1080 -> -0
    "signed-zero-products": (row(-0.0, 0.0), col(1.0, -1.0)),               # exactly zero -> +0
    "zero-row-and-col": (np.zeros((2, 3)), np.zeros((3, 2))),
}


@pytest.mark.parametrize("name", list(HARD))
def test_hard_cases_agree_bit_for_bit(backend, name):
    A, B = HARD[name]
    want = fraction_matmul(A, B)
    assert_bitwise(host(backend, exact_matmul(A, B, backend=backend)), want)
    assert_bitwise(mpfr_matmul(A, B), want)


def test_the_hard_cases_are_hard():
    """The cases hit what they claim: an overflow, a subnormal tie, and a naive sum gets some wrong."""
    assert fraction_matmul(*HARD["tie-to-overflow"])[0, 0] == math.inf
    assert fraction_matmul(*HARD["just-below-overflow-tie"])[0, 0] == MAX
    assert fraction_matmul(*HARD["subnormal-tie-to-even"])[0, 0] == 2 * TINY
    assert fraction_matmul(*HARD["exactly-half-smallest"])[0, 0] == 0.0
    assert fraction_matmul(*HARD["above-half-smallest"])[0, 0] == TINY
    naive = {n: sum((a * b for a, b in zip(A[0].tolist(), B[:, 0].tolist())), 0.0) for n, (A, B) in HARD.items()}
    wrong = [n for n in naive if naive[n] != fraction_matmul(*HARD[n])[0, 0]]
    assert len(wrong) >= 5, wrong


def test_cancellation_pair_gives_exact_zeros(backend):
    A, B = cancellation_pair(5, 14, 7, seed=3)
    want = fraction_matmul(A, B)
    got = host(backend, exact_matmul(A, B, backend=backend))
    assert_bitwise(got, want)
    assert (got[:, :4] == 0).all() and (got[:, 4:] != 0).all()
    assert_bitwise(mpfr_matmul(A, B), want)


@pytest.mark.parametrize("kind", ["phi", "wide", "subnormal"])
def test_random_inputs_agree_with_fractions(backend, kind):
    rng = np.random.default_rng(7)
    for trial in range(6):
        m, k, n = (int(x) for x in rng.integers(1, 7, 3))
        if kind == "phi":
            A, B = phi_matrix(m, k, 2.0, (trial, 0)), phi_matrix(k, n, 2.0, (trial, 1))
        elif kind == "wide":
            A = wide_exponent_matrix(m, k, (trial, 0), emin=-1074, emax=1000)
            B = wide_exponent_matrix(k, n, (trial, 1), emin=-600, emax=20)
        else:
            A = wide_exponent_matrix(m, k, (trial, 0), emin=-560, emax=-500)
            B = wide_exponent_matrix(k, n, (trial, 1), emin=-560, emax=-500)
        want = fraction_matmul(A, B)
        assert_bitwise(host(backend, exact_matmul(A, B, backend=backend)), want)
        assert_bitwise(mpfr_matmul(A, B), want)


finite = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True, width=64)


@st.composite
def operands(draw):
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    elements = st.one_of(finite, st.just(0.0), st.floats(-4, 4), st.sampled_from([TINY, -TINY, MAX, -MAX]))
    A = draw(hnp.arrays(np.float64, (m, k), elements=elements))
    B = draw(hnp.arrays(np.float64, (k, n), elements=elements))
    return A, B


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operands())
def test_any_finite_inputs_round_correctly(ops):
    A, B = ops
    assert_bitwise(exact_matmul(A, B, backend="numpy"), fraction_matmul(A, B))


@pytest.fixture
def small_blocks(monkeypatch):
    """Inner blocks of 8 terms, a carry every 3 additions and tiles of a few entries, and operands (A, B) whose
    rows and columns span wide exponent ranges (row subsets of slices in the tiles)."""
    A = phi_matrix(9, 61, 2.0, 1)
    B = phi_matrix(61, 7, 2.0, 2)
    A[2, 5], A[6, 0], B[3, 4] = 2.0**-1000, 2.0**300, 2.0**-200
    monkeypatch.setattr(reference, "max_block", lambda beta: min(8, 2 ** (55 - 2 * beta)))
    monkeypatch.setattr(reference, "ADDS_PER_CARRY", 3)
    monkeypatch.setattr(reference, "TILE_BYTES", 8 * 200 * 4)
    return A, B


def test_blocks_carries_and_tiles(small_blocks):
    """Inner blocks of 8 terms, a carry every 3 additions and tiles of a few entries; rows with a
    wide exponent range get more slices than the others (row subsets in the tiles)."""
    A, B = small_blocks
    plan = plan_exact(np, A, B)
    assert plan.block == 8
    assert len(reference.tiles(9, 7, 200)) > 1
    assert_bitwise(exact_matmul(A, B, backend="numpy"), fraction_matmul(A, B))


def test_plan_uses_few_slices_on_the_papers_inputs():
    A, B = phi_matrix(256, 256, 2.0, 1), phi_matrix(256, 256, 2.0, 2)
    plan = plan_exact(np, A, B)
    assert plan.block * 2 ** (2 * plan.beta - 2) <= 2**53     # every slice GEMM exact
    assert plan.slices_a <= 5 and plan.slices_b <= 5


def test_large_product_matches_gmpy2_on_sampled_entries():
    A, B = phi_matrix(256, 256, 2.0, 11), phi_matrix(256, 256, 2.0, 12)
    C = exact_matmul(A, B, backend="numpy")
    rows, cols = sample_entries(256, 256, 60, seed=1)
    assert_bitwise(C[rows, cols], mpfr_matmul(A, B, entries=(rows, cols)))


def test_empty_and_degenerate_shapes():
    for m, k, n in ((0, 3, 2), (2, 0, 3), (3, 2, 0), (1, 1, 1)):
        A, B = np.ones((m, k)), np.ones((k, n))
        C = exact_matmul(A, B, backend="numpy")
        assert C.shape == (m, n) and C.dtype == np.float64
        assert_bitwise(C, np.full((m, n), float(k)))
        assert_bitwise(mpfr_matmul(A, B), np.full((m, n), float(k)))


def test_inputs_are_not_modified_and_other_dtypes_are_exact():
    A, B = phi_matrix(6, 5, 1.0, 1), phi_matrix(5, 4, 1.0, 2)
    a0, b0 = A.copy(), B.copy()
    exact_matmul(A, B, backend="numpy")
    mpfr_matmul(A, B)
    assert np.array_equal(A, a0) and np.array_equal(B, b0)
    A32, Bint = A.astype(np.float32), np.arange(20, dtype=np.int32).reshape(5, 4)
    want = fraction_matmul(A32.astype(np.float64), Bint.astype(np.float64))
    assert_bitwise(exact_matmul(A32, Bint, backend="numpy"), want)


def test_mpfr_values_and_entries():
    A, B = HARD["cancel-to-tiny"]
    C, values = mpfr_matmul(A, B, prec=300, mpfr_values=True)
    assert values.shape == (1, 1) and values[0, 0].precision == 300
    assert values[0, 0] == gmpy2.mpfr(2.0) ** -1100      # exact at 300 bits
    assert C[0, 0] == 0.0                                  # below half the smallest subnormal
    A, B = phi_matrix(4, 6, 1.0, 1), phi_matrix(6, 5, 1.0, 2)
    full = mpfr_matmul(A, B)
    picked = mpfr_matmul(A, B, entries=([3, 0, 3], [4, 1, 0]))
    assert_bitwise(picked, full[[3, 0, 3], [4, 1, 0]])


@pytest.mark.parametrize("bad,match", [
    ((np.array([[np.nan]]), np.ones((1, 1))), r"A contains NaN or infinity \(check_finite=True\)"),
    ((np.ones((1, 2)), np.array([[np.inf], [1.0]])), "B contains NaN or infinity"),
    ((np.ones((2, 3)), np.ones((2, 3))), "A's columns must equal B's rows"),
    ((np.ones(3), np.ones((3, 1))), "must be 2-D"),
])
def test_bad_operands_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        exact_matmul(*bad, backend="numpy")
    with pytest.raises(ValueError, match=match):
        mpfr_matmul(*bad)


def test_inexact_dtypes_and_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="int64.*astype"):
        exact_matmul(np.ones((2, 2), dtype=np.int64), np.ones((2, 2)), backend="numpy")
    mixed = exact_matmul(np.ones((2, 2), dtype=complex), np.ones((2, 2)), backend="numpy")
    assert mixed.dtype == np.complex128 and np.array_equal(mixed, np.full((2, 2), 2.0 + 0j)), "complex: each part"
    with pytest.raises(ValueError, match="prec must be"):
        mpfr_matmul(np.ones((2, 2)), np.ones((2, 2)), prec=20)
    with pytest.raises(ValueError, match="entries must index"):
        mpfr_matmul(np.ones((2, 2)), np.ones((2, 2)), entries=([0], [2]))
    with pytest.raises(ValueError, match="one column per row"):
        mpfr_matmul(np.ones((2, 2)), np.ones((2, 2)), entries=([0, 1], [1]))


def test_without_gmpy2_only_mpfr_matmul_is_refused(monkeypatch):
    """gmpy2 is optional: exact_matmul needs none, mpfr_matmul says how to get it."""
    A, B = HARD["cancel-to-tiny"]
    want = exact_matmul(A, B, backend="numpy")
    monkeypatch.setattr(mpfr, "gmpy2", None)
    assert_bitwise(exact_matmul(A, B, backend="numpy"), want)
    with pytest.raises(RuntimeError, match="mpfr_matmul needs gmpy2: pip install gmpy2"):
        mpfr_matmul(A, B)


@pytest.mark.gpu
def test_cupy_and_numpy_give_the_same_bits(cupy_backend):
    A, B = phi_matrix(300, 257, 2.0, 5), phi_matrix(257, 190, 2.0, 6)
    A[3, 3] = 2.0**-1060
    got = host(cupy_backend, exact_matmul(A, B, backend=cupy_backend))
    assert_bitwise(got, exact_matmul(A, B, backend="numpy"))


@pytest.mark.gpu
def test_cupy_kernels_with_small_blocks_carries_and_tiles(cupy_backend, small_blocks):
    """The CUDA module's carries, row subsets of slices and tiles, forced small as on NumPy above, and a plan
    kept across calls whose ranges differ."""
    A, B = small_blocks
    reference.PLANS.clear()
    a, b = cupy_backend.asarray(A), cupy_backend.asarray(B)
    assert_bitwise(host(cupy_backend, exact_matmul(a, b, backend=cupy_backend)), fraction_matmul(A, B))
    a[2, 5] = 1.0
    want = fraction_matmul(host(cupy_backend, a), B)
    assert_bitwise(host(cupy_backend, exact_matmul(a, b, backend=cupy_backend)), want)


def test_exact_matmul_keeps_a_plan_per_signature(monkeypatch):
    """A repeated call reuses its plan and its split decisions while the exponent ranges repeat."""
    reference.PLANS.clear()
    A, B = phi_matrix(12, 20, 2.0, 3), phi_matrix(20, 9, 2.0, 4)
    decided = []
    real = reference.choose_plan
    monkeypatch.setattr(reference, "choose_plan", lambda *a: (decided.append(1), real(*a))[1])
    first = exact_matmul(A, B, backend="numpy")
    assert_bitwise(exact_matmul(A.copy(), B.copy(), backend="numpy"), first)
    assert len(reference.PLANS) == 1 and len(decided) == 1
    assert_bitwise(exact_matmul(2 * A, B, backend="numpy"), fraction_matmul(2 * A, B))    # the same ranges
    assert len(decided) == 1
    A[0, 0] = 2.0**-600
    assert_bitwise(exact_matmul(A, B, backend="numpy"), fraction_matmul(A, B))
    assert len(decided) == 2 and isinstance(next(iter(reference.PLANS._plans.values())), reference.ExactPlan)
