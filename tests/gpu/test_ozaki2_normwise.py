"""``moduli="auto"``'s default bound, normwise per entry from the scaling's line statistics: it holds (the error of
every count stays within t ||a_i|| ||b_j|| + 2**-53 |C|), it takes no float64 GEMM, it picks 15 moduli for phi = 1
operands, the componentwise GEMM-based bound stays available, and the GPU computes the same count."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from accuracy.generate import phi_matrix
from accuracy.reference import exact_matmul
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import normwise
from gpu.ozaki2.api import line_stats
from gpu.ozaki2.normwise import first_meeting, predicted_error, target_value

U = 2.0**-53


def operands(m, k, n, phi, seed):
    return phi_matrix(m, k, phi, seed), phi_matrix(k, n, phi, seed + 1)


def bound_of(A, B):
    """E for counts 1..20 on NumPy."""
    rows, cols = line_stats(get_backend("numpy"), A, B, norms=True)
    return predicted_error(rows, cols, A.shape[1])


def excess(A, B, C, E):
    """max over entries of |C - AB| - E ||a_i|| ||b_j|| - 2**-53 |C| (<= 0 where the bound holds), exactly."""
    exact = exact_matmul(A, B, backend="numpy")
    norms = np.sqrt((A**2).sum(axis=1))[:, None] * np.sqrt((B**2).sum(axis=0))[None, :]
    return np.max(np.abs(C - exact) - E * norms * (1 + 2.0**-40) - U * np.abs(C) - 2 * U * np.abs(exact))


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 12), k=st.integers(1, 300), n=st.integers(1, 12), phi=st.sampled_from([0.0, 0.5, 1.0, 4.0]),
       count=st.integers(2, 20), scaling=st.sampled_from(ozaki2.AUTO_SCALINGS), seed=st.integers(0, 2**16))
@example(m=3, k=257, n=2, phi=4.0, count=3, scaling="fast", seed=1)          # shifts below the bar exponent
def test_the_bound_holds_for_every_count(m, k, n, phi, count, scaling, seed):
    A, B = operands(m, k, n, phi, seed)
    E = bound_of(A, B)[count - 1]
    C = ozaki2.matmul(A, B, moduli=count, scaling=scaling, backend="numpy")
    assert excess(A, B, C, E) <= 0


@pytest.mark.parametrize("scaling", ozaki2.AUTO_SCALINGS)
@pytest.mark.parametrize("phi, target", [(0.1, "dgemm"), (1.0, "dgemm"), (4.0, 1e-13), (4.0, "sgemm"), (1.0, 1e-20)])
def test_auto_meets_its_target(scaling, phi, target):
    A, B = operands(40, 96, 36, phi, 3)
    t = target_value(target, 96)
    C = ozaki2.matmul(A, B, target=target, scaling=scaling, backend="numpy")
    assert excess(A, B, C, t) <= 0
    count = first_meeting(bound_of(A, B), t)
    assert count >= 2 and bound_of(A, B)[count - 2] > t, "the fewest moduli meeting the target"
    assert np.array_equal(C, ozaki2.matmul(A, B, moduli=count, scaling=scaling, backend="numpy")) or \
        scaling == "accurate"


@pytest.mark.parametrize("N", [256, 1024])
def test_phi_1_takes_15_moduli_as_dgemm_needs(N):
    """The count the issue's measurements call for: 14 moduli's error is DGEMM's, 15's well below."""
    A, B = operands(N, N, N, 1.0, 7)
    E = bound_of(A, B)
    t = target_value("dgemm", N)
    assert E[14] <= t < E[13]
    assert first_meeting(E, t) == 15


def test_dgemm_target_grows_as_the_square_root_of_k():
    assert target_value("dgemm", 1024) == 2.0**-51 and target_value("dgemm", 4096) == 2.0**-50
    assert target_value("sgemm", 64) == 2.0**-24 and target_value(1e-10, 10**6) == 1e-10
    with pytest.raises(ValueError, match="target must be"):
        target_value("hgemm", 4)


def test_the_default_count_takes_no_float64_gemm(monkeypatch):
    """The old bound multiplied |A~||B~| in float64 (:func:`gpu.ozaki2.auto.predicted_error`, the componentwise
    bound's GEMM); the default needs the line statistics only."""
    from gpu.ozaki2 import auto

    A, B = operands(64, 200, 48, 1.0, 2)
    called = []
    real = auto.predicted_error
    monkeypatch.setattr(auto, "predicted_error", lambda *a, **k: (called.append(1), real(*a, **k))[1])
    ozaki2.matmul(A, B, backend="numpy")
    assert not called
    ozaki2.matmul(A, B, bound="componentwise", backend="numpy")
    assert called


def test_componentwise_bound_stays_for_auditors():
    """``bound="componentwise"`` is the GEMM-based choice: the count choose_moduli gives, and its bound holds."""
    A, B = operands(30, 80, 20, 1.0, 5)
    C = ozaki2.matmul(A, B, bound="componentwise", scaling="accurate", backend="numpy")
    count = ozaki2.choose_moduli(A, B, ozaki2.accurate_bounds(A, B))
    assert np.array_equal(C, ozaki2.reference_matmul(A, B, moduli=count))
    with pytest.raises(ValueError, match="bound must be one of"):
        ozaki2.matmul(A, B, bound="loose", backend="numpy")


def test_no_count_meets_says_the_way_out():
    """Read back (``verdict="host"``), a target no count meets is refused before any product, naming the way
    out; decided on the device (the default), C is the library GEMM's and the plan's count says 0."""
    A, B = operands(5, 40, 4, 1.0, 8)
    out = np.full((5, 4), np.nan)
    with pytest.raises(ValueError, match=r"no modulus count up to 20 meets target 1e-40 .* pass moduli=20 "
                                         r"\(normwise bound .* here\)"):
        ozaki2.matmul(A, B, target=1e-40, out=out, verdict="host", backend="numpy")
    assert np.isnan(out).all()
    be, want = get_backend("numpy"), np.empty((5, 4))
    be.gemm(A, B, want)
    with ozaki2.Plan(A, B, out=out, options={"target": 1e-40}, backend=be) as plan:
        assert plan.execute(A, B, out) is out and np.array_equal(out, want) and plan.last_count == 0
        assert plan.deferred is None, "NumPy reads its count on the host: nothing to defer"


def test_zero_and_nonfinite_lines_are_left_out():
    """A zero row gives exact zeros, a row holding NaN the library's NaN: neither weighs in the count."""
    A, B = operands(20, 64, 10, 1.0, 9)
    clean = bound_of(A, B)
    A2 = np.vstack([A, np.zeros((1, 64)), np.full((1, 64), np.nan)])
    assert np.array_equal(bound_of(A2, B), clean)
    assert np.array_equal(normwise.limits()[1], [np.frexp(ozaki2.bound_limit(ozaki2.moduli_table(n)))[1]
                                                 for n in range(1, 21)])


@pytest.mark.gpu
@pytest.mark.parametrize("shape, phi", [((300, 700, 260), 1.0), ((64, 5000, 33), 4.0), ((1, 17, 1), 0.0)])
def test_gpu_count_and_bound_equal_numpy(cupy_backend, shape, phi):
    """The device's E per count is NumPy's to a few ulps (the norms are summed in another order) and the
    count the same; the line statistics other than the norms are equal bit for bit."""
    m, k, n = shape
    A, B = operands(m, k, n, phi, 4)
    A[min(2, m - 1), 0] = np.inf if m > 3 else A[0, 0]
    rows, cols = line_stats(get_backend("numpy"), A, B, norms=True)
    dA, dB = cupy_backend.asarray(A), cupy_backend.asarray(np.asfortranarray(B))
    drows, dcols = line_stats(cupy_backend, dA, dB, norms=True)
    for want, got in ((rows, drows), (cols, dcols)):
        for name in ("mx", "e", "R"):
            np.testing.assert_array_equal(cupy_backend.to_numpy(getattr(got, name)), getattr(want, name))
        finite = np.isfinite(want.mx)
        for name in ("n1", "n2sq"):
            np.testing.assert_allclose(cupy_backend.to_numpy(getattr(got, name))[finite], getattr(want, name)[finite],
                                       rtol=k * 2.0**-52)
    family = cupy_backend.ops("ozaki2")
    buffers = family.count_buffers(cupy_backend)
    E = family.auto_errors(drows, dcols, k, buffers)
    np.testing.assert_allclose(E, predicted_error(rows, cols, k), rtol=4 * k * 2.0**-52)
    t = target_value("dgemm", k)
    assert family.auto_count(drows, dcols, k, t, buffers) == first_meeting(predicted_error(rows, cols, k), t)
