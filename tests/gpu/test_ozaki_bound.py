"""``target=``: the Ozaki scheme meets the componentwise bound it promises, or refuses before any product.

A target t promises |C - AB| <= t (|A||B|) + 2**-53 |C| entrywise (plus the float64 underflow
threshold). These tests hold results to it against the correctly rounded product, on the inputs that
broke the first auto-slice rule: a tiny entry of A meeting a huge one of B, exponents spread over
hundreds of binades, subnormals, and the papers' phi = 4 inputs.
"""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accuracy.audit import audit_point
from accuracy.generate import phi_matrix, wide_exponent_matrix
from accuracy.methods import get_method, method_names
from accuracy.reference import exact_matmul
from gpu import get_backend, ozaki
from gpu.backend import MemoryPlanError
from tests.gpu.ozaki_digits import digit_sums

FORMATS = tuple(ozaki.FORMATS)
NP = get_backend("numpy")


def excess(C, A, B, target):
    """max over entries of |C - AB| / (t |A||B| + 2**-53 |C|), with AB and |A||B| correctly rounded
    (their own rounding allowed for): at most 1 when C meets the target's bound. Where AB overflows,
    C must be the same infinity (inf when it is not)."""
    ref = exact_matmul(A, B, backend="numpy")
    P = exact_matmul(np.abs(A), np.abs(B), backend="numpy")
    over = np.isinf(ref)
    if (C[over] != ref[over]).any():
        return np.inf
    C, ref, P = C[~over], ref[~over], P[~over]
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
def test_exponents_of_plus_minus_300_meet_the_bound(target):
    """153 x 300 x 1 with exponents of +-300: the first rule chose 11 slices and returned 0.0 in 7 rows
    whose exact value is far from 0."""
    A, B = wide_exponent_matrix(153, 300, 5, -300, 300), wide_exponent_matrix(300, 1, 6, -300, 300)
    C = ozaki.matmul(A, B, target=target, backend="numpy")
    assert (C != 0).all()
    assert excess(C, A, B, target) <= 1


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_target_out_of_reach_is_refused_before_any_product(fmt):
    """1 + 2**-700 2**700: the row's slices would need alpha S > 700 bits to carry 2**-700 next to 1."""
    A, B = np.array([[1.0, 2.0**-700]]), np.array([[2.0**-700], [2.0**700]])
    out = np.full((1, 1), 7.0)
    with pytest.raises(ValueError, match=r"cannot meet target 'dgemm' with at most 64 slices .*pass slices="):
        ozaki.matmul(A, B, slice_format=fmt, out=out, verdict="host", backend="numpy")
    assert out[0, 0] == 7.0
    plan = ozaki.Plan(A, B, options={"slice_format": fmt}, backend="numpy")      # the device verdict: no refusal
    np.testing.assert_array_equal(plan.execute(A, B), A @ B)
    assert plan.last_verdict()["slices"] == 0 and plan.last_verdict()["ieee"]
    with pytest.raises(ValueError, match="cannot meet target 'sgemm'"):
        ozaki.configure(A, B, target="sgemm", slice_format=fmt, backend="numpy")


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


# --------------------------------------------------------------------------- the proof's parts

@settings(max_examples=100, deadline=None)
@given(x=st.floats(-1, 1, exclude_max=True, exclude_min=True), y=st.floats(-1, 1, exclude_max=True, exclude_min=True),
       alpha=st.integers(1, 10), slices=st.integers(1, 8))
def test_dropped_pairs_of_one_term_stay_below_s_plus_1_times_2_to_minus_alpha_s(x, y, alpha, slices):
    """The truncation lemma of :mod:`gpu.ozaki.bound`, in exact arithmetic: the pairs s + t <= S + 1 of
    the digits of x and y miss xy by less than (S + 1) 2**(-alpha S), and by nothing when x or y is 0."""
    zero = np.zeros(1, dtype=np.int32)
    dx = [Fraction(float(d[0, 0])) for d in ozaki.split_values(np, np.array([[x]]), zero, alpha, slices)]
    dy = [Fraction(float(d[0, 0])) for d in ozaki.split_values(np, np.array([[y]]), zero, alpha, slices)]
    kept = sum(dx[s] * dy[t] * Fraction(2) ** (-alpha * (s + t + 2))
               for s in range(slices) for t in range(slices) if s + t + 2 <= slices + 1)
    missed = abs(Fraction(x) * Fraction(y) - kept)
    assert missed < (slices + 1) * Fraction(2) ** (-alpha * slices)
    assert missed == 0 or (x != 0 and y != 0)


def exact_ratio(A, B):
    """G = max K_ij / P_ij over the entries with a nonzero term, in exact arithmetic (0 if none), as a
    float (inf beyond float64's range)."""
    e = np.frexp(np.abs(A).max(axis=1, initial=0))[1]
    f = np.frexp(np.abs(B).max(axis=0, initial=0))[1]
    nr, nc = np.count_nonzero(A, axis=1), np.count_nonzero(B, axis=0)
    best = Fraction(0)
    for i, j in np.ndindex(A.shape[0], B.shape[1]):
        P = sum(abs(Fraction(float(a)) * Fraction(float(b))) for a, b in zip(A[i], B[:, j]))
        if P:
            best = max(best, min(nr[i], nc[j]) * Fraction(2) ** int(e[i] + f[j]) / P)
    return float(best) if best < 2**1023 else np.inf


def entries(draw, shape, spread):
    """A float64 matrix: random significands times 2**e, e uniform on [-spread, spread], some zeros and
    subnormals, or the papers' phi inputs."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["wide", "phi", "phi4"]))
    if kind != "wide":
        X = phi_matrix(*shape, 4.0 if kind == "phi4" else draw(st.sampled_from([0.1, 1.0, 2.0])), seed)
    else:
        X = rng.standard_normal(shape) * np.ldexp(1.0, rng.integers(-spread, spread + 1, shape))
    X[rng.random(shape) < draw(st.sampled_from([0.0, 0.2, 0.6]))] = 0.0
    if draw(st.booleans()):
        X[rng.random(shape) < 0.15] = 5e-324 * rng.integers(1, 2**20)
    return X


@st.composite
def operands(draw):
    m, k, n = draw(st.integers(1, 5)), draw(st.integers(1, 7)), draw(st.integers(1, 5))
    spread = draw(st.sampled_from([0, 10, 40, 300, 1000]))
    return entries(draw, (m, k), spread), entries(draw, (k, n), spread)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ab=operands(), fmt=st.sampled_from(FORMATS))
def test_slice_ratio_bounds_the_exact_ratio_tightly(ab, fmt):
    """G from one magnitude GEMM (and float64 for weak entries) is never below the exact ratio, and at
    most 5% above it (BF16 keeps 8 bits per factor), unless no slice count could reach the entry anyway."""
    A, B = ab
    e = np.frexp(np.abs(A).max(axis=1))[1].astype(np.int32)
    f = np.frexp(np.abs(B).max(axis=0))[1].astype(np.int32)
    got, want = ozaki.slice_ratio(NP, A, B, e, f, ozaki.FORMATS[fmt]), exact_ratio(A, B)
    assert got >= want
    assert got <= want * 1.05 or (got == np.inf and want > 2.0**890)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ab=operands(), fmt=st.sampled_from(FORMATS), target=st.sampled_from(["dgemm", "sgemm", 1e-10]))
def test_target_is_met_or_refused_only_when_out_of_reach(ab, fmt, target):
    A, B = ab
    try:
        C = ozaki.matmul(A, B, target=target, slice_format=fmt, verdict="host", backend="numpy")
    except ValueError as exc:
        assert "cannot meet target" in str(exc)
        alpha = ozaki.choose_alpha(ozaki.FORMATS[fmt], A.shape[1])[0]
        with pytest.raises(ValueError, match="cannot meet target"):      # even the exact ratio needs > 64
            ozaki.auto_slices(alpha, exact_ratio(A, B) * 1.05, target)
        return
    assert excess(C, A, B, target) <= 1


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 6), slices=st.integers(4, 12))
def test_the_fold_adds_the_slice_products_within_one_rounding_of_c(seed, k, slices):
    """The compensated fold: |C - T| <= 2**-53 |C| + 2**-91 (|A||B|), T the exact sum of the kept slice
    products, on near-cancelling products where a plain float64 sum of the diagonals loses up to half
    a unit of (|A||B|)_ij."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(k) * np.ldexp(1.0, rng.integers(-30, 1, k))
    b = rng.standard_normal(k) * np.ldexp(1.0, rng.integers(-30, 1, k))
    b[-1] = -float(np.dot(a[:-1], b[:-1])) / a[-1]
    A, B = a[None, :], b[:, None]
    C = ozaki.matmul(A, B, slices=slices, slice_format="int8", backend="numpy")[0, 0]
    sums, alpha, e, f = digit_sums(A, B, slices, "int8")
    T = sum(Fraction(int(D[0, 0])) * Fraction(2) ** (int(e[0] + f[0]) - alpha * d)
            for d, D in zip(range(slices + 1, 1, -1), sums))
    P = sum(abs(Fraction(float(x)) * Fraction(float(y))) for x, y in zip(a, b))
    assert abs(Fraction(float(C)) - T) <= Fraction(2) ** -53 * abs(Fraction(float(C))) + Fraction(2) ** -91 * P


def screen_inputs():
    """A magnitude product with zeros, weak entries and ordinary ones, and nonzero counts."""
    rng = np.random.default_rng(3)
    P = (rng.random((23, 31)) * np.ldexp(1.0, rng.integers(-30, 5, (23, 31)))).astype(np.float32)
    P[rng.random(P.shape) < 0.2] = 0.0
    P[[2, 9, 17], [4, 4, 30]] = 2.0**-60
    return P, rng.integers(1, 50, 23).astype(np.int64), rng.integers(1, 50, 31).astype(np.int64)


def test_screening_in_blocks_of_rows_changes_nothing(monkeypatch):
    from gpu.ozaki import ops as ozaki_ops

    P, nr, nc = screen_inputs()
    whole = ozaki_ops.HostOps(NP).screen(P, nr, nc, 0.75)
    monkeypatch.setattr(ozaki_ops, "BLOCK_ENTRIES", 40)
    blocked = ozaki_ops.HostOps(NP).screen(P, nr, nc, 0.75)
    assert whole[1].any() and not whole[1].all() and 0 < float(whole[0]) < 2.0**48
    for w, b in zip(whole, blocked):
        np.testing.assert_array_equal(w, b)


def test_configure_reports_the_slices_and_the_proven_bound():
    A, B = phi_pair(64, 80, 48, 1.0, 4)
    p = ozaki.configure(A, B, backend="numpy")
    assert p.bound <= 2.0**-53 and "proven |C - AB| <=" in p.report() and p.as_dict()["bound"] == p.bound
    assert ozaki.configure(A, B, slices=p.slices, backend="numpy").bound is None
    loose = ozaki.configure(A, B, target="sgemm", backend="numpy")
    assert loose.slices < p.slices and 2.0**-53 < loose.bound <= 2.0**-24


def test_non_finite_lines_give_the_library_gemm_and_the_rest_meets_the_bound():
    A, B = phi_pair(30, 40, 20, 4.0, 6)
    A[3, 7], B[5, 2], B[9, 11] = np.nan, np.inf, -np.inf
    with pytest.raises(ValueError, match="NaN or infinity in 1 rows and B in 2 columns"):
        ozaki.matmul(A, B, backend="numpy", check_finite=True)
    C = ozaki.matmul(A, B, backend="numpy")
    with np.errstate(invalid="ignore"):
        ieee = A @ B
    bad_rows, bad_cols = [3], [2, 11]
    np.testing.assert_array_equal(C[bad_rows], ieee[bad_rows])
    np.testing.assert_array_equal(C[:, bad_cols], ieee[:, bad_cols])
    rows, cols = np.delete(np.arange(30), bad_rows), np.delete(np.arange(20), bad_cols)
    assert excess(C[np.ix_(rows, cols)], A[rows], B[:, cols], "dgemm") <= 1


def test_the_bound_is_refused_before_any_work_when_it_would_not_fit(monkeypatch):
    A, B = phi_pair(64, 64, 64, 1.0, 1)
    monkeypatch.setattr(NP, "memory_info", lambda: (2**12, 2**40))
    with pytest.raises(MemoryPlanError, match="GEMM of magnitudes.* are free .*pass slices="):
        ozaki.configure(A, B, backend="numpy")


def test_audited_target_methods_run_the_default_path_and_meet_their_bound():
    A, B = phi_pair(40, 48, 36, 4.0, 9)
    method = get_method("ozaki-int8-dgemm")
    assert "proving |C - AB| <= 2**-53 |A||B| + 2**-53 |C|" in method.description
    np.testing.assert_array_equal(method.run(NP, A, B), ozaki.matmul(A, B, slice_format="int8", backend="numpy"))
    assert {"ozaki-fp32-dgemm", "ozaki-bf16-sgemm"} <= set(method_names())
    with pytest.raises(ValueError, match="rounded-tail form takes a slice count"):
        get_method("ozaki-fp32r-dgemm")
    reports = audit_point(NP, [get_method("ozaki-fp32-dgemm"), get_method("ozaki-int8-sgemm")], 40, 4.0, 9)
    assert reports["ozaki-fp32-dgemm"].report.max_comp <= 3 * 2.0**-53
    assert 3 * 2.0**-53 < reports["ozaki-int8-sgemm"].report.max_comp <= 2.0**-24 + 3 * 2.0**-53


# --------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("storage,bits", [("float32", 24), ("uint16", 8)])
def test_gpu_magnitude_operands_are_numpys_bitwise(storage, bits, cupy_backend):
    """The CUDA kernel writes the bound's magnitude operand as NumPy does: rounded down, raised to
    2**-63, zeros kept, from strided rows and from columns."""
    from gpu.ozaki.ops import HostOps

    X = wide_exponent_matrix(37, 45, 3, -300, 300)
    X[::5] = 0.0
    X[2, ::3] = 5e-324
    big = cupy_backend.xp.zeros((74, 50))
    big[::2, 5:] = cupy_backend.asarray(X)
    for axis in (1, 0):
        exps = np.frexp(np.abs(X).max(axis=axis))[1].astype(np.int32)
        want = HostOps(NP).magnitudes(X, exps, axis, bits, storage)
        got = cupy_backend.ops("ozaki").magnitudes(big[::2, 5:], cupy_backend.asarray(exps), axis, bits, storage)
        np.testing.assert_array_equal(cupy_backend.to_numpy(got), want)


@pytest.mark.gpu
def test_gpu_ratio_is_numpys_bitwise_and_close_where_entries_are_weak(cupy_backend):
    """The device's one-pass ratio equals NumPy's screen bit for bit where no entry is weak; where some are,
    its per-entry float64 dot products give NumPy's BLAS bound to within the rounding of a dot product."""
    from gpu.ozaki.ops import HostOps

    P, nr, nc = screen_inputs()
    P[[2, 9, 17], [4, 4, 30]] = 0.5
    dev = [cupy_backend.asarray(x) for x in (P, nr, nc)]
    A, B = np.ones((23, 3)), np.ones((3, 31))
    e, f = np.zeros(23, dtype=np.int32), np.zeros(31, dtype=np.int32)
    want = HostOps(NP).ratio(P, nr, nc, 0.75, A, B, e, f, None)
    got = cupy_backend.ops("ozaki").ratio(*dev, 0.75, *(cupy_backend.asarray(x) for x in (A, B, e, f)),
                                           ozaki.FORMATS["int8"])
    np.testing.assert_array_equal(cupy_backend.to_numpy(got), want)
    for A, B in ((np.array([[1.0, 2.0**-200]]), np.array([[2.0**-200], [2.0**200]])),
                 (wide_exponent_matrix(153, 300, 5, -300, 300), wide_exponent_matrix(300, 1, 6, -300, 300))):
        e = np.frexp(np.abs(A).max(axis=1))[1].astype(np.int32)
        f = np.frexp(np.abs(B).max(axis=0))[1].astype(np.int32)
        want = ozaki.slice_ratio(NP, A, B, e, f, ozaki.FORMATS["fp32"])
        got = ozaki.slice_ratio(cupy_backend, cupy_backend.asarray(A), cupy_backend.asarray(B),
                                cupy_backend.asarray(e), cupy_backend.asarray(f), ozaki.FORMATS["fp32"])
        assert got == want or abs(got - want) <= 2.0**-40 * want


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["fp32", "int8", "bf16"])
def test_gpu_target_chooses_numpys_slices_and_meets_the_bound(fmt, cupy_backend):
    """On the findings' inputs the device's magnitude GEMM (tensor cores for BF16) leads to the slices
    NumPy chose, the same bits, and the promised bound; the out-of-reach input is refused."""
    cases = [(np.array([[1.0, 2.0**-200]]), np.array([[2.0**-200], [2.0**200]])), phi_pair(277, 31, 277, 4.0, 2),
             (wide_exponent_matrix(153, 300, 5, -300, 300), wide_exponent_matrix(300, 1, 6, -300, 300)),
             phi_pair(200, 3000, 150, 1.0, 4)]
    for A, B in cases:
        a, b = cupy_backend.asarray(A), cupy_backend.asarray(B)
        p = ozaki.configure(a, b, slice_format=fmt, backend=cupy_backend)
        assert p.slices == ozaki.configure(A, B, slice_format=fmt, backend="numpy").slices
        C = cupy_backend.to_numpy(ozaki.matmul(a, b, slice_format=fmt, backend=cupy_backend))
        np.testing.assert_array_equal(C, ozaki.matmul(A, B, slice_format=fmt, backend="numpy"))
        assert excess(C, A, B, "dgemm") <= 1
    far = cupy_backend.asarray(np.array([[1.0, 2.0**-700]])), cupy_backend.asarray(np.array([[2.0**-700], [2.0**700]]))
    with pytest.raises(ValueError, match="cannot meet target 'dgemm'"):
        ozaki.matmul(*far, slice_format=fmt, verdict="host", backend=cupy_backend)
    C = ozaki.matmul(*far, slice_format=fmt, backend=cupy_backend)                # the device verdict: IEEE
    assert cupy_backend.to_numpy(C)[0, 0] == 1.0
