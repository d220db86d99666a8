"""Strassen never returns a non-finite entry where the library GEMM's is finite.

A level adds quadrants before it multiplies: with ``check_finite=False`` one NaN in A gave 512 NaN entries at
level 2 on 128 x 128 (``A @ B`` has 128), an infinity met its own negation (inf - inf = NaN) where ``A @ B``
is infinite, and finite inputs near the top of the range overflowed in the additions (A11 + A22) where every
entry of ``A @ B`` is finite, with the finite check on. The product now recomputes its non-finite entries by
the library GEMM: they are then what ``A @ B`` gives, and the other entries keep the Strassen bound."""

import numpy as np
import pytest

from accuracy.reference import exact_matmul
from gpu.strassen import matmul as strassen

N = 128


def _pair(seed=1, n=N):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, (n, n))


def _library(A, B):
    with np.errstate(invalid="ignore", over="ignore"):
        return A @ B


def _assert_as_the_library(C, A, B, level, rows=(), cols=()):
    """Non-finite exactly where A @ B is, with its values there (NaN, or the same infinity); elsewhere within
    the Strassen bound of the exact product of the finite lines."""
    R = _library(A, B)
    assert np.array_equal(np.isnan(C), np.isnan(R)), f"{np.isnan(C).sum()} NaN entries, A @ B has {np.isnan(R).sum()}"
    assert np.array_equal(C[np.isinf(R)], R[np.isinf(R)]) and not np.isinf(C[~np.isinf(R)]).any()
    keep_a, keep_b = np.delete(A, list(rows), axis=0), np.delete(B, list(cols), axis=1)
    exact = exact_matmul(keep_a, keep_b, backend="numpy")
    got = np.delete(np.delete(C, list(rows), axis=0), list(cols), axis=1)
    scale = np.abs(keep_a).max() * np.abs(keep_b).max()
    assert np.abs(got - exact).max() <= 2.0**-52 * N * 12**level * scale * 4


@pytest.mark.parametrize("level", [1, 2, 3])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_nonfinite_entry_of_a_gives_the_library_gemms_row(backend, level, bad):
    A, B = _pair()
    A[3, 4] = bad
    C = backend.to_numpy(strassen(backend.asarray(A), backend.asarray(B), level=level, check_finite=False,
                                  backend=backend))
    _assert_as_the_library(C, A, B, level, rows=[3])


@pytest.mark.parametrize("schedule", ["rum", "winograd", "lai", "otsuka"])
def test_nonfinite_entries_of_both_operands_give_the_library_gemms_lines(backend, schedule):
    A, B = _pair(seed=2)
    A[70, 1], A[5, 100], B[9, 11], B[64, 30], B[2, 30] = np.nan, np.inf, np.inf, -np.inf, np.nan
    B[9, 100] = 0.0                                                   # inf * 0 = NaN in C[5, 100]
    C = backend.to_numpy(strassen(backend.asarray(A), backend.asarray(B), level=2, schedule=schedule,
                                  check_finite=False, backend=backend))
    _assert_as_the_library(C, A, B, 2, rows=[5, 70], cols=[11, 30])


def test_the_flat_and_padded_forms_follow_the_rule(backend):
    A, B = _pair(seed=3, n=100)
    A[50, 60] = np.inf
    for options in ({"flat": True}, {"fringe": "pad"}):
        C = backend.to_numpy(strassen(backend.asarray(A), backend.asarray(B), level=2, check_finite=False,
                                      backend=backend, **options))
        R = _library(A, B)
        assert np.array_equal(np.isnan(C), np.isnan(R)) and np.array_equal(C[np.isinf(R)], R[np.isinf(R)])
        assert np.isfinite(np.delete(C, 50, axis=0)).all()


@pytest.mark.parametrize("check_finite", [True, False])
def test_finite_inputs_that_overflow_in_the_additions_give_the_library_gemms_values(backend, check_finite):
    """A's entries near the top of the float64 range: A21 + A22 overflows at the first level, while every
    product A_ik B_kj is below 2**24 and every entry of A @ B is finite."""
    A, B = _pair(seed=4)
    A = np.abs(A) * 2.0**1023 + 2.0**1022
    B = B * 2.0**-1000
    assert np.isfinite(_library(A, B)).all()
    C = backend.to_numpy(strassen(backend.asarray(A), backend.asarray(B), level=2, check_finite=check_finite,
                                  backend=backend))
    assert np.isfinite(C).all(), f"{(~np.isfinite(C)).sum()} non-finite entries where A @ B is finite"
    exact = exact_matmul(A, B, backend="numpy")
    assert np.abs(C - exact).max() <= 2.0**-52 * N * 12**2 * np.abs(A).max() * np.abs(B).max() * 4


def test_out_and_the_kept_plans_follow_the_rule(backend):
    A, B = _pair(seed=5)
    A[7, 7] = np.nan
    out = backend.xp.empty((N, N))
    for _ in range(2):                                   # the second call takes the kept plan
        C = strassen(backend.asarray(A), backend.asarray(B), level=2, check_finite=False, out=out,
                     backend=backend)
        assert C is out
        _assert_as_the_library(backend.to_numpy(C), A, B, 2, rows=[7])


def test_many_nonfinite_lines_are_repaired_in_parts_of_bounded_size(monkeypatch):
    """NaN in 40 rows of A and an infinite column of B (Strassen spreads them to more): the library GEMM
    redoes them in parts of at most PART_BYTES (5 rows or columns here), every part, not one copy of C."""
    from gpu.strassen import finite

    monkeypatch.setattr(finite, "PART_BYTES", 5 * N * 8)
    A, B = _pair(seed=6)
    A[:40, 3] = np.nan
    B[17, 9] = np.inf
    C = strassen(A, B, level=2, check_finite=False, backend="numpy")
    _assert_as_the_library(C, A, B, 2, rows=range(40), cols=[9])


@pytest.mark.gpu
@pytest.mark.parametrize("options", [{"parallel": True, "schedule": "rum2"}, {"graph": True}, {"fused": True}])
def test_the_gpu_repair_follows_streams_graphs_and_fusion(cupy_backend, options):
    """The repair kernel runs on the current stream after the product: after a parallel schedule's join, a
    graph's replay (the second call) and fused additions alike."""
    be = cupy_backend
    if options.get("graph") and not be.supports_graphs:
        pytest.skip("graph=True needs nvmath-python")
    A, B = _pair(seed=7, n=256)
    A[100, 3], B[5, 200] = np.nan, -np.inf
    out = be.xp.empty((256, 256))
    for _ in range(2):
        C = strassen(be.asarray(A), be.asarray(B), level=2, check_finite=False, out=out, backend=be, **options)
        got = be.to_numpy(C)
        R = _library(A, B)
        assert np.array_equal(np.isnan(got), np.isnan(R)) and np.array_equal(got[np.isinf(R)], R[np.isinf(R)])
        assert np.isfinite(got[np.isfinite(R)]).all()


def test_one_huge_finite_entry_that_overflows_inside_a_level_gives_the_library_gemms_pattern(backend, monkeypatch):
    """One entry of 1e308 in A: every entry of A @ B is finite (each term is below 1e308 in size), but a level's
    sums (A11 + A22, B11 + B22 with entries up to 2) make 1e308 * 2 overflow in the products, so without the
    repair 100-odd entries of C come out NaN or infinite. Repaired on the device (CuPy) or the host (NumPy),
    C's non-finite entries are exactly A @ B's: none."""
    from gpu.strassen import finite

    A, B = _pair(seed=8)
    A[5, 7] = 1e308
    R = _library(A, B)
    assert np.isfinite(R).all()
    ops = type(backend.ops(finite.FAMILY))
    real = ops.repair
    monkeypatch.setattr(ops, "repair", lambda self, *a: None)
    unrepaired = backend.to_numpy(strassen(backend.asarray(A), backend.asarray(B), level=2, backend=backend))
    assert (~np.isfinite(unrepaired)).sum() > 0, "the level's sums overflow: the case the repair is for"
    monkeypatch.setattr(ops, "repair", real)
    C = backend.to_numpy(strassen(backend.asarray(A), backend.asarray(B), level=2, backend=backend))
    assert np.array_equal(np.isfinite(C), np.isfinite(R)), f"{(~np.isfinite(C)).sum()} non-finite entries"
    bad = ~np.isfinite(unrepaired)
    np.testing.assert_allclose(C[bad], R[bad], rtol=1e-12)
