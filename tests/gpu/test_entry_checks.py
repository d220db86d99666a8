"""Bad inputs at the entry points: each case reproduced, refused (or handled) now, on NumPy and CuPy.

1. ``np.matrix`` inputs: Ozaki gave a wrong product (max abs error 40.8 at N = 128), Strassen
   failed ten frames deep; masked arrays would silently use their hidden values.
2. Non-finite inputs: one convention, ``check_finite=True`` by default, with an opt-out that has
   a defined result.
3. (Deep levels on small matrices: ``test_strassen.py``.)
4. Ozaki ``out``: a read-only ``out`` failed only after the whole computation, and an ``out``
   aliasing A was accepted and overwrote A.
5. A 200000 x 1 @ 1 x 200000 product (a 298 GiB output) died with NumPy's MemoryError.
"""

import numpy as np
import pytest

from accuracy.reference import exact_matmul, mpfr_matmul
from gpu import ozaki
from gpu.backend import MemoryPlanError, get_backend
from gpu.ozaki import execution as ozaki_execution
from gpu.ozaki.ops import HostOps
from gpu.strassen import matmul as strassen

N = 128


def pair(seed=1, n=N):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, (n, n))


METHODS = {
    "strassen": lambda A, B, be, **kw: strassen(A, B, level=2, backend=be, **kw),
    "ozaki": lambda A, B, be, **kw: ozaki.matmul(A, B, slices=6, backend=be, **kw),
    "exact": lambda A, B, be, **kw: exact_matmul(A, B, backend=be, **kw),
}


@pytest.mark.parametrize("method", METHODS)
def test_matrix_subclass_inputs_give_the_product(backend, method):
    A, B = pair()
    C = backend.to_numpy(METHODS[method](np.asmatrix(A), np.asmatrix(B), backend))
    assert type(C) is np.ndarray and C.shape == (N, N)
    assert np.abs(C - A @ B).max() < 1e-12, "np.matrix's * is a product: the subclass must not reach the method"


@pytest.mark.parametrize("method", METHODS)
def test_masked_arrays_are_refused(backend, method):
    A, B = pair()
    masked = np.ma.masked_array(A, mask=A > 0.9)
    with pytest.raises(TypeError, match=r"A is a masked array; .* A\.filled\(value\)"):
        METHODS[method](masked, B, backend)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_inputs_are_refused_where_asked(backend, method, bad):
    """check_finite=True refuses NaN and infinity before any work; the GEMM methods take them by default and
    give what the library GEMM gives (exact_matmul refuses by default: a reference is asked for finite data)."""
    A, B = pair()
    B[3, 5] = bad
    with pytest.raises(ValueError, match="NaN or infinity .*check_finite=True.*check_finite=False"):
        METHODS[method](backend.asarray(A), backend.asarray(B), backend, check_finite=True)
    if method != "exact":
        C = backend.to_numpy(METHODS[method](backend.asarray(A), backend.asarray(B), backend))
        assert np.array_equal(np.isfinite(C), np.isfinite(A @ B))


def test_strassen_without_the_check_gives_the_library_gemms_nonfinite_entries(backend):
    """A level spread one NaN of A to 512 entries at level 2 on 128 x 128 (A @ B has 128), and turned an
    infinity into NaN where A @ B is infinite; its non-finite entries are now recomputed by the library GEMM
    (more cases: ``test_strassen_nonfinite.py``)."""
    A, B = pair()
    for bad in (np.nan, np.inf):
        A[3, 4] = bad
        C = backend.to_numpy(strassen(backend.asarray(A), backend.asarray(B), level=2, check_finite=False,
                                      backend=backend))
        with np.errstate(invalid="ignore"):
            R = A @ B
        assert np.array_equal(np.isnan(C), np.isnan(R)) and np.array_equal(np.isinf(C), np.isinf(R))
        assert np.array_equal(C[3], R[3], equal_nan=True) and (~np.isfinite(C)).sum() == 128


def test_ozaki_without_the_check_computes_nonfinite_lines_as_the_library_gemm(backend):
    A, B = pair()
    A[7, 2], B[9, 11], B[0, 30] = np.nan, np.inf, -np.inf
    C = backend.to_numpy(ozaki.matmul(backend.asarray(A), backend.asarray(B), slices=8, slice_format="int8",
                                      check_finite=False, backend=backend))
    with np.errstate(invalid="ignore"):
        R = A @ B
    bad = ~np.isfinite(R)
    assert np.array_equal(np.isnan(C), np.isnan(R)) and np.array_equal(C[np.isinf(R)], R[np.isinf(R)])
    good_a, good_b = np.delete(A, 7, axis=0), np.delete(B, [11, 30], axis=1)
    want = exact_matmul(good_a, good_b, backend="numpy")
    got = np.delete(np.delete(C, 7, axis=0), [11, 30], axis=1)
    assert np.abs(got - want).max() <= 2**-45
    assert bad[7].all() and bad[:, [11, 30]].all(), "A's NaN row and B's infinite columns are non-finite"


def test_exact_matmul_without_the_check_gives_the_exact_ieee_values():
    A, B = pair(n=12)
    A[2, 3], A[5, 0], B[4, 6], B[1, 1], A[7, 1], B[2, 8] = np.inf, np.nan, -np.inf, 0.0, np.inf, np.inf
    C = exact_matmul(A, B, check_finite=False, backend="numpy")
    assert np.array_equal(C, mpfr_matmul(A, B, check_finite=False), equal_nan=True)
    assert np.isnan(C).any() and np.isinf(C).any() and np.isfinite(C).any()


def test_ozaki_read_only_or_aliasing_out_is_refused_before_any_work(monkeypatch):
    A, B = pair()

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the refusal")

    monkeypatch.setattr(ozaki_execution, "_products_and_sum", no_work)
    monkeypatch.setattr(HostOps, "split", no_work)
    out = np.zeros((N, N))
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        ozaki.matmul(A, B, slices=3, out=out, backend="numpy")
    a0 = A.copy()
    for alias in (A, A[:, :]):
        with pytest.raises(ValueError, match="out overlaps A"):
            ozaki.matmul(A, B, slices=3, out=alias, backend="numpy")
    with pytest.raises(ValueError, match="out overlaps B"):
        ozaki.matmul(A, B, slices=3, out=B, backend="numpy")
    assert np.array_equal(A, a0)


@pytest.mark.parametrize("method", METHODS)
def test_an_output_larger_than_memory_is_refused_before_any_work(method, monkeypatch):
    """Case 5's 200000 x 1 @ 1 x 200000 product: 298 GiB of output, refused with both numbers."""
    be = get_backend("numpy")
    monkeypatch.setattr(be, "memory_info", lambda: (16 * 2**30, 32 * 2**30))
    A, B = np.ones((200_000, 1)), np.ones((1, 200_000))
    with pytest.raises(MemoryPlanError, match=r"needs 298\.02 GiB but 16\.00 GiB are free on the numpy device"):
        METHODS[method](A, B, be) if method != "strassen" else strassen(A, B, backend=be)


@pytest.mark.parametrize("order", ["C", "F", "view"])
@pytest.mark.parametrize("bad", [None, np.nan, np.inf, "overflow"])
def test_the_threaded_finite_check_finds_every_bad_entry(monkeypatch, order, bad):
    from gpu.backend import numpy_backend

    monkeypatch.setattr(numpy_backend, "PARALLEL_FINITE_BYTES", 512)
    monkeypatch.setattr(numpy_backend, "FINITE_THREADS", 4)
    be = get_backend("numpy")
    base = np.random.default_rng(3).random((70, 90))
    x = {"C": base, "F": np.asfortranarray(base), "view": base[3:60:2, 5:80]}[order]
    where = (x.shape[0] - 1, x.shape[1] // 3)
    if bad == "overflow":
        x[:2] = np.finfo(np.float64).max        # finite entries whose sums overflow: still all finite
        assert be.all_finite(x)
        return
    if bad is not None:
        x[where] = bad
    assert be.all_finite(x) == (bad is None)
