"""The Ozaki scheme's results: accuracy against exact references, zeros and cancellations, wide
exponents, empty shapes, overwrite and out, ``target=`` (auto slices), errors, and ``gemm_ex``'s
emulated recipes. Exactness of the slice products and the fold: ``test_ozaki.py``."""

from itertools import pairwise

import numpy as np
import pytest

from accuracy.generate import cancellation_pair, phi_matrix
from accuracy.metrics import error_report
from accuracy.reference import exact_matmul
from gpu import ozaki
from gpu.backend import get_backend
from gpu.backend.blas import gemm_recipe

FORMATS = tuple(ozaki.FORMATS)
NP = get_backend("numpy")


def phi_pair(m, k, n, phi=1.0, seed=1):
    return phi_matrix(m, k, phi, (seed, 0)), phi_matrix(k, n, phi, (seed, 1))


# --------------------------------------------------------------------------- accuracy and special inputs

@pytest.mark.parametrize("fmt", ["fp32", "int8"])
def test_error_decreases_with_slices_on_phi_01(fmt):
    A, B = phi_pair(64, 96, 48, phi=0.1, seed=2)
    ref = exact_matmul(A, B, backend="numpy")
    errors = [error_report(ozaki.matmul(A, B, slices=s, slice_format=fmt, backend="numpy"), ref).max_rel
              for s in range(1, 11)]
    above_floor = [e for e in errors if e > 1e-14]
    assert len(above_floor) >= 5 and all(b < a / 8 for a, b in pairwise(above_floor))
    assert errors[-1] < 1e-13


@pytest.mark.parametrize("fmt", FORMATS)
def test_exact_zeros_and_cancellations_reproduced(fmt):
    A, B = cancellation_pair(12, 31, 10, seed=4)
    ref = exact_matmul(A, B, backend="numpy")
    for slices in (2, 5, 9):
        C = ozaki.matmul(A, B, slices=slices, slice_format=fmt, backend="numpy")
        zeros = ref == 0
        assert zeros[:, :5].all() and (C[zeros] == 0).all() and not np.signbit(C[zeros]).any()
    assert error_report(C, ref).max_rel < 1e-6     # Y (X2 - X3) keeps about 23 of its bits at 9 slices


def test_sign_symmetry_and_power_of_two_scaling_are_exact():
    A, B = phi_pair(16, 40, 12, phi=2.0, seed=5)
    C = ozaki.matmul(A, B, slices=4, slice_format="int8", backend="numpy")
    np.testing.assert_array_equal(ozaki.matmul(-A, B, slices=4, slice_format="int8", backend="numpy"), -C)
    r, c = np.arange(16) * 37 - 300, 250 - np.arange(12) * 41
    scaled = ozaki.matmul(np.ldexp(A, r[:, None]), np.ldexp(B, c[None, :]), slices=4, slice_format="int8",
                          backend="numpy")
    np.testing.assert_array_equal(scaled, np.ldexp(C, r[:, None] + c[None, :]))


def test_inputs_beyond_fp32_range_work():
    A, B = phi_pair(24, 50, 20, phi=1.0, seed=6)
    A[:12] *= 2.0**400                                 # far outside FP32's (and FP16's) exponent range
    A[12:] *= 2.0**-300
    B[:, ::2] *= 1e-150
    ref = exact_matmul(A, B, backend="numpy")
    for fmt in ("fp32", "fp16", "int8"):
        C = ozaki.matmul(A, B, slices=10, slice_format=fmt, backend="numpy")
        assert np.isfinite(C).all() and error_report(C, ref).max_rel < 1e-11
    tiny = np.full((2, 3), 5e-324)                     # subnormal rows: exponents below -1022
    assert (ozaki.matmul(tiny, np.full((3, 2), 2.0**1000), slices=2, backend="numpy")
            == exact_matmul(tiny, np.full((3, 2), 2.0**1000), backend="numpy")).all()


def test_empty_and_degenerate_shapes():
    for m, k, n in ((0, 3, 4), (3, 0, 4), (3, 4, 0)):
        C = ozaki.matmul(np.ones((m, k)), np.ones((k, n)), slices=2, backend="numpy")
        assert C.shape == (m, n) and (C == 0).all()
    C = ozaki.matmul(np.zeros((4, 5)), np.ones((5, 3)), slices=3, backend="numpy")
    assert (C == 0).all() and not np.signbit(C).any()


def test_overwrite_and_out():
    A, B = phi_pair(10, 20, 6)
    want = ozaki.matmul(A, B, slices=3, backend="numpy")
    a, b = A.copy(), B.copy()
    out = np.empty((10, 6))
    got = ozaki.matmul(a, b, slices=3, backend="numpy", overwrite_a=True, overwrite_b=True, out=out)
    assert got is out and (got == want).all()
    assert not np.array_equal(a, A), "overwrite_a lets the scheme keep its remainders in A"
    square = phi_pair(12, 12, 12)[0]
    want = ozaki.matmul(square, square.T.copy(), slices=3, backend="numpy")
    np.testing.assert_array_equal(ozaki.matmul(square, square.T, slices=3, backend="numpy", overwrite_a=True,
                                               overwrite_b=True), want)
    with pytest.raises(ValueError, match=r"out has shape \(6, 10\) .*; pass a numpy\.ndarray of shape \(10, 6\)"):
        ozaki.matmul(A, B, slices=3, backend="numpy", out=np.empty((6, 10)))


def test_phases_cover_split_gemm_and_sum():
    A, B = phi_pair(32, 32, 32)
    phases = {}
    ozaki.matmul(A, B, slices=3, backend="numpy", phases=phases)
    assert set(phases) == {"split", "gemm", "sum"} and all(v >= 0 for v in phases.values())


# --------------------------------------------------------------------------- auto

def test_auto_slices_is_the_smallest_count_meeting_the_bound():
    for alpha, ratio, target in ((7, 2.0**10, 2.0**-53), (5, 300.0, 1e-8), (8, 1.0, 0.5), (7, 0.0, 1e-3)):
        s = ozaki.auto_slices(alpha, ratio, target)
        assert ozaki.predicted_error(alpha, s, ratio) + ozaki.SUM_ERROR <= target
        assert s == 1 or ozaki.predicted_error(alpha, s - 1, ratio) + ozaki.SUM_ERROR > target
    assert ozaki.auto_slices(7, 2.0**10, "dgemm") > ozaki.auto_slices(7, 2.0**10, "sgemm")
    assert ozaki.predicted_error(7, 9, 2.0**10) == 10 * 2.0**-63 * 2.0**10
    with pytest.raises(ValueError, match="cannot meet target 1e-20 with at most 64 slices of 1 bits"):
        ozaki.auto_slices(1, 1e6, 1e-20)
    with pytest.raises(ValueError, match="cannot meet target 'dgemm'.*more than 2.900"):
        ozaki.auto_slices(7, float("inf"), "dgemm")
    with pytest.raises(ValueError, match="below what the float64 sum"):
        ozaki.auto_slices(7, 1.0, 1e-300)


@pytest.mark.parametrize("phi", [0.1, 1.0, 2.0])
def test_auto_meets_its_target_and_dgemm(phi):
    A, B = phi_pair(96, 128, 80, phi=phi, seed=7)
    ref = exact_matmul(A, B, backend="numpy")
    P = exact_matmul(np.abs(A), np.abs(B), backend="numpy")
    dgemm = error_report(A @ B, ref, A, B)
    for fmt in ("fp32", "int8"):
        for target in (1e-5, 1e-10, "dgemm"):
            C = ozaki.matmul(A, B, target=target, slice_format=fmt, backend="numpy")
            bound = ozaki.target_value(target) * P * (1 + 2.0**-50) + 2.0**-53 * (np.abs(C) + np.abs(ref))
            assert (np.abs(C - ref) <= bound).all()
        rep = error_report(ozaki.matmul(A, B, slice_format=fmt, backend="numpy"), ref, A, B)   # target="dgemm"
        assert rep.max_rel <= dgemm.max_rel
    fewer = ozaki.configure(A, B, target=1e-5, slice_format="int8", backend="numpy").slices
    assert fewer < ozaki.configure(A, B, target="dgemm", slice_format="int8", backend="numpy").slices


# --------------------------------------------------------------------------- errors

@pytest.mark.parametrize("A,B,kw,error,match", [
    (np.full((2, 2), np.nan), np.ones((2, 2)), {"check_finite": True}, ValueError,
     "A has NaN or infinity in 2 rows and B in 0 columns"),
    (np.ones((2, 2)), np.array([[1.0, np.inf], [0, 0]]), {"check_finite": True}, ValueError,
     "in 0 rows and B in 1 columns"),
    (np.ones((2, 2), np.float32), np.ones((2, 2)), {}, TypeError, "float64"),
    (np.ones((2, 2), np.int64), np.ones((2, 2)), {}, TypeError, "float64"),
    (np.ones((2, 3)), np.ones((2, 2)), {}, ValueError, "columns must equal"),
    (np.ones(3), np.ones((3, 2)), {}, ValueError, "2-D"),
    (np.ones((2, 2)), np.ones((2, 2)), {"slice_format": "fp8"}, ValueError, "unknown slice format"),
    (np.ones((2, 2)), np.ones((2, 2)), {"slices": 0}, ValueError, "slices must be"),
    (np.ones((2, 2)), np.ones((2, 2)), {"slices": 2.5}, ValueError, "slices must be"),
    (np.ones((2, 2)), np.ones((2, 2)), {"slices": 2, "target": 1e-8}, ValueError, "not both"),
    (np.ones((2, 2)), np.ones((2, 2)), {"target": 2.0}, ValueError, "target must be"),
    (np.ones((2, 2)), np.ones((2, 2)), {"target": "exact"}, ValueError, "unknown target"),
    (np.ones((2, 2)), np.ones((2, 2)), {"slices": 2, "k_block": 8}, ValueError, "k_block must be"),
    (np.ones((2, 2)), np.ones((2, 2)), {"slices": 2, "slice_format": "int8", "k_block": 2**31},
     ValueError, "too long"),
])
def test_clear_errors(A, B, kw, error, match):
    with pytest.raises(error, match=match):
        ozaki.matmul(A, B, backend="numpy", **kw)


def test_gemm_ex_checks_dtypes_and_emulates_each_recipe():
    rng = np.random.default_rng(0)
    ints = rng.integers(-100, 100, size=(2, 6, 5)).astype(np.float64)
    for name in ("fp32", "tf32", "fp16", "bf16", "int8"):
        rec = gemm_recipe(name)
        a, b = (ozaki.encode(np, x, rec.operands.name) for x in (ints[0], ints[1].T.copy()))
        C = np.ones((6, 6), dtype=rec.output)
        NP.gemm_ex(a, b, C, recipe=name, beta=1.0)
        np.testing.assert_array_equal(C, ints[0] @ ints[1].T + 1)
    with pytest.raises(TypeError, match="int8 GEMM: C has dtype float32"):
        NP.gemm_ex(np.ones((2, 2), np.int8), np.ones((2, 2), np.int8), np.ones((2, 2), np.float32), recipe="int8")
    with pytest.raises(ValueError, match="unknown GEMM recipe"):
        NP.gemm_ex(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), recipe="fp64")


@pytest.mark.gpu
def test_gpu_strided_inputs_batched_fold_zeros_and_errors(cupy_backend, monkeypatch):
    cp = cupy_backend.xp
    A, B = cancellation_pair(40, 64, 30, seed=2)
    big = cp.zeros((80, 200))
    big[::2, 10:74] = cp.asarray(A)
    Bf = cp.asfortranarray(cp.asarray(B))
    want = ozaki.matmul(A, B, slices=5, slice_format="int8", backend="numpy")
    got = ozaki.matmul(big[::2, 10:74], Bf, slices=5, slice_format="int8", backend=cupy_backend)
    np.testing.assert_array_equal(cp.asnumpy(got), want)
    assert (cp.asnumpy(got)[:, :15] == 0).all()
    p = ozaki.plan(40, 64, 30, 5, "fp16", k_block=16)
    free = p.workspace_bytes - p.workspace()["buffers"] + 8 * 40 * 30 + 3 * 40 * 32 * 4
    monkeypatch.setattr(cupy_backend, "memory_info", lambda: (int(free / ozaki.HEADROOM) + 1, 2**40))
    got = ozaki.matmul(cp.asarray(A), cp.asarray(B), slices=5, slice_format="fp16", k_block=16,
                       backend=cupy_backend)
    np.testing.assert_array_equal(cp.asnumpy(got), ozaki.matmul(A, B, slices=5, slice_format="fp16", k_block=16,
                                                                backend="numpy"))
    monkeypatch.undo()
    with pytest.raises(ValueError, match="NaN or infinity in 3 rows"):
        ozaki.matmul(cp.full((3, 3), cp.nan), cp.ones((3, 3)), slices=2, backend=cupy_backend, check_finite=True)
    free = cupy_backend.memory_info()[0]
    n = int((free / 8) ** 0.5)
    with pytest.raises(ozaki.WorkspaceError):
        ozaki.configure(cp.ones((n, 8)), cp.ones((8, n)), slices=2, backend=cupy_backend)
