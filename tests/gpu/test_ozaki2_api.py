"""``ozaki2.matmul`` written once over the backend: on NumPy it equals the all-NumPy reference chain bit for
bit, the fast scaling's bound holds and is scale-invariant, inputs are kept, bad input is refused; on the
GPU it equals NumPy bit for bit."""

import functools

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from accuracy.generate import phi_matrix
from accuracy.reference import exact_matmul
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki.plan import target_value
from gpu.ozaki2 import gemms
from gpu.ozaki2.bounds import bounds
from gpu.ozaki2.normwise import LineStats
from gpu.ozaki2.ops import HostOps
from gpu.ozaki2.scaling import bound_limit, full_shift, half_shift, headroom, to_integers

host_matmul = functools.partial(ozaki2.matmul, backend="numpy")


def operands(m, k, n, phi, seed):
    return phi_matrix(m, k, phi, seed), phi_matrix(k, n, phi, seed + 1)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 19), k=st.integers(1, 40), n=st.integers(1, 19), count=st.integers(1, 20),
       phi=st.sampled_from([0.0, 1.0, 4.0]), seed=st.integers(0, 2**16))
def test_numpy_backend_equals_the_reference_chain(m, k, n, count, phi, seed):
    A, B = operands(m, k, n, phi, seed)
    assert np.array_equal(host_matmul(A, B, moduli=count, scaling="accurate"),
                          ozaki2.reference_matmul(A, B, moduli=count))


def fast_scaled(A, B, count):
    """A', B' (Python ints) and the shifts of fast scaling for ``count`` moduli, through the API's own steps."""
    be = get_backend("numpy")
    e = 6 - np.frexp(np.abs(A).max(axis=1))[1]
    f = 6 - np.frexp(np.abs(B).max(axis=0))[1]
    rows, cols = HostOps(be).line_stats(A), HostOps(be).line_stats(B.T)
    assert np.array_equal(rows.e, e) and np.array_equal(cols.e, f)
    found = bounds(be, A, B, rows, cols, "fast")
    u, v = headroom(found, ozaki2.moduli_table(count))
    sa, sb = found.e + u, found.f + v
    Ai = to_integers(np.ldexp(A, sa[:, None]), (u >= 0)[:, None])
    Bi = to_integers(np.ldexp(B, sb[None, :]), (v >= 0)[None, :])
    Ai, Bi = (np.array([[int(x) for x in row] for row in X], dtype=object) for X in (Ai, Bi))
    return Ai, Bi, sa, sb


@pytest.mark.parametrize("phi", [0.0, 1.0, 4.0])
@pytest.mark.parametrize("count", [3, 9, 16, 20])
def test_fast_bound_holds(phi, count):
    """|A'B'| <= L_N < M/2 with fast scaling: the CRT recovers A'B' exactly."""
    A, B = operands(13, 50, 11, phi, 5)
    Ai, Bi, _, _ = fast_scaled(A, B, count)
    table = ozaki2.moduli_table(count)
    product = Ai.dot(Bi)
    assert max(abs(int(x)) for x in product.ravel()) <= bound_limit(table)
    assert int(np.abs(Ai).max()) > bound_limit(table) ** 0.5 / 2**10     # the bound is not slack by far


def test_fast_scaling_is_scale_invariant():
    """Rows of A and columns of B multiplied by powers of two (2**-300..2**300) give the same result, scaled."""
    A, B = operands(12, 30, 9, 4.0, 9)
    p, q = np.arange(-300, 300, 50)[:12], np.arange(-200, 250, 50)[:9]
    C = host_matmul(A, B, moduli=14, scaling="fast")
    C2 = host_matmul(np.ldexp(A, p[:, None]), np.ldexp(B, q[None, :]), moduli=14, scaling="fast")
    assert np.array_equal(C2, np.ldexp(C, p[:, None] + q[None, :]))


@pytest.mark.parametrize("scaling", ozaki2.AUTO_SCALINGS)
@pytest.mark.parametrize("phi, target", [(0.1, "dgemm"), (1.0, "dgemm"), (4.0, 1e-13), (4.0, "sgemm")])
def test_componentwise_auto_meets_its_target_in_both_modes(scaling, phi, target):
    A, B = operands(40, 96, 36, phi, 3)
    C = exact_matmul(A, B, backend="numpy")
    got = host_matmul(A, B, scaling=scaling, target=target, bound="componentwise")
    bound = target_value(target) * (np.abs(A) @ np.abs(B)) + 2.0**-53 * np.abs(C)
    assert np.all(np.abs(got - C) <= bound * (1 + 1e-12))


def test_fast_needs_no_fewer_moduli_than_accurate():
    A, B = operands(30, 64, 30, 1.0, 4)
    errs = {s: np.abs(host_matmul(A, B, moduli=12, scaling=s) - A @ B).max() for s in ozaki2.SCALINGS}
    assert errs["accurate"] <= errs["fast"]


def test_inputs_are_kept_and_out_is_honoured():
    A, B = operands(9, 20, 7, 1.0, 1)
    A0, B0, out = A.copy(), B.copy(), np.full((9, 7), np.nan)
    got = host_matmul(A, B, moduli=15, out=out, overwrite_a=True, overwrite_b=True)
    assert got is out and np.array_equal(A, A0) and np.array_equal(B, B0)
    assert np.array_equal(out, host_matmul(A, B, moduli=15))


def test_nonfinite_lines_follow_ieee_by_default():
    A, B = operands(6, 10, 5, 1.0, 2)
    A[2, 3], B[4, 1] = np.nan, np.inf
    with pytest.raises(ValueError, match="check_finite"):
        host_matmul(A, B, moduli=15, check_finite=True)
    got = host_matmul(A, B, moduli=15)
    ieee = A @ B
    assert np.array_equal(np.isnan(got), np.isnan(ieee)) and np.isnan(got[2]).all()
    fine = np.ones_like(got, dtype=bool)
    fine[2], fine[:, 1] = False, False
    clean = host_matmul(np.where(np.isfinite(A), A, 0), np.where(np.isfinite(B), B, 0), moduli=15)
    assert np.array_equal(got[fine], clean[fine])


@pytest.mark.parametrize("kwargs, match", [
    ({"scaling": "fastest"}, "scaling must be one of"), ({"moduli": 0}, "moduli must be"),
    ({"moduli": 21}, "moduli must be"), ({"moduli": 5, "target": "dgemm"}, "either a moduli count"),
    ({"k_block": 0}, "k_block must be")])
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        host_matmul(np.ones((2, 3)), np.ones((3, 2)), **kwargs)


def test_bad_operands_are_refused():
    with pytest.raises(TypeError, match="float64"):
        host_matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="A's columns"):
        host_matmul(np.ones((2, 3)), np.ones((4, 2)))


def test_empty_products_are_zero():
    assert host_matmul(np.ones((3, 0)), np.ones((0, 2))).tolist() == [[0.0, 0.0]] * 3
    assert host_matmul(np.ones((0, 4)), np.ones((4, 2))).shape == (0, 2)


@pytest.mark.gpu
@pytest.mark.parametrize("scaling", ozaki2.SCALINGS)
@pytest.mark.parametrize("shape, phi, count, k_block", [
    ((257, 301, 129), 1.0, 15, None), ((64, 1000, 33), 4.0, 20, None), ((100, 515, 77), 0.1, 8, 112),
    ((33, 4000, 45), 1.0, 16, 1000), ((1, 17, 1), 2.0, 5, None), ((512, 512, 512), 1.0, 14, None)])
def test_gpu_equals_numpy_bit_for_bit(cupy_backend, scaling, shape, phi, count, k_block):
    m, k, n = shape
    A, B = operands(m, k, n, phi, 11)
    want = host_matmul(A, B, moduli=count, scaling=scaling, k_block=k_block)
    dA, dB = cupy_backend.asarray(A), cupy_backend.asarray(np.asfortranarray(B))
    got = ozaki2.matmul(dA, dB, moduli=count, scaling=scaling, k_block=k_block, backend=cupy_backend)
    assert np.array_equal(cupy_backend.to_numpy(got), want)
    if scaling in ozaki2.AUTO_SCALINGS:
        auto = ozaki2.matmul(dA, dB, scaling=scaling, target="sgemm", backend=cupy_backend)
        assert np.array_equal(cupy_backend.to_numpy(auto), host_matmul(A, B, scaling=scaling, target="sgemm"))


@pytest.mark.gpu
def test_gpu_phases_and_views(cupy_backend, row_panels_at_any_size):
    """The phases of the direct layout (row panels forced on this small product), then of the planes (k blocked)."""
    A, B = operands(300, 200, 260, 1.0, 12)
    phases = {}
    big = cupy_backend.asarray(np.pad(A, ((0, 5), (3, 0))))
    got = ozaki2.matmul(big[:300, 3:], cupy_backend.asarray(B), moduli=14, backend=cupy_backend, phases=phases)
    assert np.array_equal(cupy_backend.to_numpy(got), host_matmul(A, B, moduli=14))
    assert set(phases) == {"scaling", "residues", "gemm", "crt"} and all(v > 0 for v in phases.values())
    assert np.array_equal(cupy_backend.to_numpy(got), host_matmul(A, B, moduli=14))
    blocked = {}
    got = ozaki2.matmul(big[:300, 3:], cupy_backend.asarray(B), moduli=14, k_block=64, backend=cupy_backend,
                        phases=blocked)
    assert np.array_equal(cupy_backend.to_numpy(got), host_matmul(A, B, moduli=14))
    assert set(blocked) == {"scaling", "residues", "gemm", "reduce", "crt"}


def tile_squares(X, tile=32):
    """The one-pass sums of :mod:`gpu.ozaki2.fused` in NumPy: per row and tile of ``tile`` entries the tile's
    maximum, its bar exponent e_t and S_t[d] = sum ceil(c / 2**d)**2 of its bars c (d = 0..7), combined as
    sum_t S_t[max(0, min(e_t - e, 7))] with e the row's bar exponent."""
    X = np.abs(X)
    out = np.zeros(X.shape[0], dtype=np.int64)
    for i, row in enumerate(X):
        tiles = [row[j:j + tile] for j in range(0, row.size, tile)]
        e_t = [6 - np.frexp(t.max())[1] for t in tiles]
        e = 6 - np.frexp(row.max())[1]
        for t, et in zip(tiles, e_t, strict=True):
            c = np.ceil(np.ldexp(t, et)).astype(np.int64)
            d = max(0, min(et - e, 7))               # an all-zero tile (e_t = 6) sums to 0 at any d
            out[i] += int((((c + 2**d - 1) >> d) ** 2).sum())
    return out


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 6), k=st.integers(1, 200), spread=st.integers(0, 60), zeros=st.floats(0.0, 0.9),
       seed=st.integers(0, 2**16))
@example(m=1, k=38, spread=6, zeros=0.875, seed=1)         # an all-zero tile in a row whose maximum is under 1/2
def test_one_pass_tile_sums_equal_the_two_pass_sums(m, k, spread, zeros, seed):
    """Fast scaling's sums of squared bars from tiles with their own exponents equal the two-pass sums with
    the row's exponent, exactly: ceil(c / 2**d) is the bar at the row's exponent, and beyond d = 7 every
    nonzero bar is 1."""
    rng = np.random.default_rng(seed)
    X = np.ldexp(rng.uniform(-1, 1, (m, k)), rng.integers(-spread, spread + 1, (m, k)))
    X[rng.uniform(size=(m, k)) < zeros] = 0.0
    stats = HostOps(get_backend("numpy")).line_stats(X)
    assert np.array_equal(stats.mx, np.abs(X).max(axis=1))
    assert np.array_equal(stats.R.astype(np.int64), tile_squares(X))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1), (33, 70), (300, 4099), (5, 2 * 32 * 40 + 7)])
def test_gpu_line_stats_equal_numpy_in_both_layouts(cupy_backend, shape):
    """Fast mode's maxima and sums of squared bars in one read: rows of a C-ordered array and of a transpose,
    wide exponents, zero rows, rows holding NaN or infinity (maximum NaN or infinity as NumPy's), and an
    all-zero tile in a row whose maximum is under 1/2 (its tile exponent falls below the row's)."""
    X = phi_matrix(*shape, 4.0, 3)
    X[0, -1] *= 2.0**-600
    if shape[0] > 4:
        X[1] = 0.0
        X[2, shape[1] // 2] = np.nan
        X[3, 0] = -np.inf
        X[4] *= 2.0**-20 / max(np.abs(X[4]).max(), 1e-300)
        X[4, :32] = 0.0
    want = HostOps(get_backend("numpy")).line_stats(X, norms=True)
    gpu_ops = cupy_backend.ops("ozaki2")
    for dev in (cupy_backend.asarray(X), cupy_backend.asarray(np.ascontiguousarray(X.T)).T):
        got = LineStats(*(cupy_backend.to_numpy(v) for v in gpu_ops.line_stats(dev, norms=True)))
        for name in ("mx", "e", "R"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        for name in ("n1", "n2sq"):
            np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=shape[1] * 2.0**-52)


@pytest.mark.gpu
def test_gpu_shifts_equal_numpy(cupy_backend):
    """The fused shift kernels equal scaling.half_shift / full_shift, around powers of two and below 1."""
    rng = np.random.default_rng(5)
    x = np.concatenate([[0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 2.0**52, 2.0**52 + 1], rng.integers(1, 2**50, 500).astype(float),
                        np.ldexp(rng.random(200), rng.integers(-30, 200, 200))])
    gpu_ops, d = cupy_backend.ops("ozaki2"), cupy_backend.asarray(x)
    for n in (1, 7, 15, 20):
        limit = ozaki2.bound_limit(ozaki2.moduli_table(n))
        assert np.array_equal(cupy_backend.to_numpy(gpu_ops.half_shift(d, limit)), half_shift(x, limit))
        assert np.array_equal(cupy_backend.to_numpy(gpu_ops.full_shift(d, limit)), full_shift(x, limit))


@pytest.mark.parametrize("panel", [(3, 5), (4, 64), (7, 2)])
def test_int8_products_in_panels_give_the_same_bits(monkeypatch, backend, panel):
    """The INT8 products run in output panels from PANEL_FROM rows up (a measured choice): any panel shape,
    ragged edges included, gives the whole product's bits."""
    A, B = operands(13, 30, 11, 1.0, 5)
    A, B = backend.asarray(A), backend.asarray(B)
    whole = backend.to_numpy(ozaki2.matmul(A, B, moduli=14, backend=backend))
    monkeypatch.setattr(gemms, "PANEL_FROM", 1)
    monkeypatch.setattr(gemms, "PANEL", panel)
    ozaki2.PLANS.clear()                                    # a kept plan holds the panels it was made with
    calls = []
    real = type(backend)._gemm_ex
    monkeypatch.setattr(backend, "_gemm_ex", lambda *a, **k: (calls.append(1), real(backend, *a, **k))[1])
    assert np.array_equal(backend.to_numpy(ozaki2.matmul(A, B, moduli=14, backend=backend)), whole)
    rows, cols = panel
    assert len(calls) >= -(-13 // rows) * -(-11 // cols), "every output panel is its own INT8 GEMM"


def test_auto_that_no_count_can_meet_says_the_way_out():
    """Rows of A and columns of B spanning 2**60 (every product 2**-60): no count of moduli reaches DGEMM's
    componentwise bound; the refusal gives the bound 20 moduli reach and the calls that work."""
    A, B = np.array([[1.0, 2.0**-30, 2.0**-60]]), np.array([[2.0**-60], [2.0**-30], [1.0]])
    out = np.full((1, 1), np.nan)
    with pytest.raises(ValueError, match=r"no modulus count up to 20 meets target 'dgemm'.*pass moduli=20 "
                                         r"\(bound 1\.2.e-06 here\).*target=1\.3e-06"):
        host_matmul(A, B, out=out, bound="componentwise", scaling="accurate")
    assert np.isnan(out).all()
    assert abs(host_matmul(A, B, moduli=20)[0, 0] - 3 * 2.0**-60) <= 1.3e-6 * 3 * 2.0**-60
