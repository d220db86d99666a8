"""The exact reference plans its memory before any work: with little memory free it runs in blocks of A's rows
and B's columns whose peak stays within it, with the same bits as the unblocked product; where not even one
row and one column fit it raises MemoryPlanError before any GEMM."""

import numpy as np
import pytest

from accuracy import blocking, reference
from accuracy.generate import cancellation_pair, phi_matrix, wide_exponent_matrix
from accuracy.reference import exact_matmul
from gpu.backend import MemoryPlanError, get_backend
from gpu.backend.memo import LRU
from gpu.backend.plans import free_kept_plans

GIB = 2**30


def assert_bitwise(got, want):
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.int64), want.view(np.int64))


def cases():
    rng = np.random.default_rng(5)
    sparse = np.where(rng.random((300, 90)) < 0.3, phi_matrix(300, 90, 2.0, 4), 0.0)
    return {
        "phi": (phi_matrix(40, 300, 1.0, 1), phi_matrix(300, 150, 1.0, 2)),
        "wide": (wide_exponent_matrix(12, 100, 3, -300, 300), wide_exponent_matrix(100, 50, 4, -300, 300)),
        "sparse": (phi_matrix(25, 300, 2.0, 5), sparse),
        "cancellation": cancellation_pair(20, 160, 100, seed=6),
        "tall": (phi_matrix(400, 60, 1.0, 7), phi_matrix(60, 30, 1.0, 8)),
    }


@pytest.fixture
def numpy_with(monkeypatch):
    """The NumPy backend reporting ``free`` bytes free; counts its GEMMs. Its table of checked GEMM signatures
    (host memory the backend keeps, up to MAX_GEMM_PLANS entries of about 2 KB) holds one entry here, so that
    tracemalloc's peak is the product's own arrays."""
    be = get_backend("numpy")
    monkeypatch.setattr(be, "_gemm_plans", LRU(1))
    calls = [0]                                         # a count: a list of calls would grow in the peak
    real = type(be).gemm

    def gemm(*args, **kwargs):
        calls[0] += 1
        return real(be, *args, **kwargs)

    monkeypatch.setattr(be, "gemm", gemm)

    def limited(free):
        monkeypatch.setattr(be, "memory_info", lambda: (free, 2**40))
        return be, calls

    return limited


def unblocked_peak(be, A, B, **kw):
    with be.track_allocations() as report:
        C = exact_matmul(A, B, backend=be, **kw)
    return C, report.peak_bytes


@pytest.mark.parametrize("name", list(cases()))
def test_blocks_within_the_free_memory_give_the_same_bits(numpy_with, name):
    A, B = cases()[name]
    be, _ = numpy_with(2**40)
    want, whole = unblocked_peak(be, A, B)
    for share in (0.4,) if name == "wide" else (0.5, 0.2):      # wide: 29 slices a line, 841 GEMMs a block
        free = int(share * whole)
        be, _ = numpy_with(free)
        with be.track_allocations() as report:
            got = exact_matmul(A, B, backend=be)
        assert_bitwise(got, want)
        assert report.peak_bytes <= free, (name, share, report.peak_bytes, free)


def test_blocks_are_rows_and_columns(numpy_with, monkeypatch):
    """A wide B comes in blocks of columns beside all of A's rows (here blocks of at least 8 columns are wide
    enough); a tall A in blocks of rows. (Splitting the 40 x 300 A takes about 1 MB, B 3.6 MB.)"""
    monkeypatch.setattr(blocking, "MIN_COLS", 8)
    seen = []
    plan = blocking.plan_blocks
    monkeypatch.setattr("accuracy.reference.plan_blocks", lambda s, b: seen.append(plan(s, b)) or seen[-1])
    for name, free, rows_blocked in (("phi", 1_600_000, False), ("tall", None, True)):
        A, B = cases()[name]
        be, _ = numpy_with(2**40)
        want, whole = unblocked_peak(be, A, B)
        be, _ = numpy_with(free or whole // 4)
        assert_bitwise(exact_matmul(A, B, backend=be), want)
        (m, _), n = A.shape, B.shape[1]
        assert seen[-1].cols < n or seen[-1].rows < m
        assert (seen[-1].rows < m) == rows_blocked


def test_a_split_pool_halves_the_budget(numpy_with, monkeypatch):
    """Memory that is free but not in one block (CuPy's cached blocks split across sizes): the plan takes the
    largest budget, halving, that one block holds, and the peak stays within it."""
    A, B = cases()["phi"]
    be, _ = numpy_with(2**40)
    want, whole = unblocked_peak(be, A, B)
    largest = whole // 3
    be, _ = numpy_with(10 * whole)
    monkeypatch.setattr(be, "can_allocate", lambda nbytes, free=None: nbytes <= largest)
    with be.track_allocations() as report:
        got = exact_matmul(A, B, backend=be)
    assert_bitwise(got, want)
    assert report.peak_bytes <= largest


def test_nonfinite_lines_in_blocks(numpy_with):
    A, B = phi_matrix(30, 200, 1.0, 9), phi_matrix(200, 140, 1.0, 10)
    A[3, 7], A[17, 0], B[5, 100], B[9, 3] = np.nan, np.inf, -np.inf, np.nan
    be, _ = numpy_with(2**40)
    want, whole = unblocked_peak(be, A, B, check_finite=False)
    assert np.isnan(want[3]).all() and np.isnan(want[:, 3]).all()
    be, _ = numpy_with(whole // 4)
    with be.track_allocations() as report:
        got = exact_matmul(A, B, backend=be, check_finite=False)
    assert_bitwise(got, want)
    assert report.peak_bytes <= whole // 4


def test_too_little_memory_raises_before_any_gemm(numpy_with):
    A, B = cases()["phi"]
    be, calls = numpy_with(int((8 * 40 * 150 + 4096) / blocking.SHARE))   # the output fits, a row and a column not
    with pytest.raises(MemoryPlanError, match=r"the exact 40 x 300 x 150 product needs .* even for one row of A "
                                              r"and one column of B .*; free memory"):
        exact_matmul(A, B, backend=be)
    assert calls == [0]
    be, calls = numpy_with(8 * 40 * 150 - 1)
    with pytest.raises(MemoryPlanError, match=r"the 40 x 150 reference product needs"):
        exact_matmul(A, B, backend=be)


def test_the_h200_reference_fits_beside_a_52_gb_allocation():
    """256 rows of A against a 32768 x 32768 B with the H200's memory less 52 GB, A and B: the plan takes B in
    a few blocks of columns beside all 256 rows, within the memory free."""
    free = 143771 * 2**20 - 52 * 10**9 - 8 * 32768**2 - 8 * 256 * 32768 - GIB
    s = blocking.Shape(256, 32768, 32768, slices_a=4, slices_b=4, limbs=11, max_tile=2**30 // 88)
    whole = blocking.block_peak(s, 256, 32768, s.max_tile)
    plan = blocking.plan_blocks(s, int(blocking.SHARE * free))
    assert whole > blocking.SHARE * free
    assert plan.rows == 256 and blocking.MIN_COLS <= plan.cols < 32768
    assert plan.peak <= blocking.SHARE * free


@pytest.mark.gpu
def test_gpu_reference_in_blocks_on_a_small_device(cupy_backend, monkeypatch):
    """On a device with a quarter of the unblocked reference's peak free (the pool may take that much beyond what
    it holds, and the free memory reads so: the blocks earlier tests left cached in the pool stay out of it), the
    reference runs in blocks with NumPy's bits, and CuPy's counting allocator sees its peak within the room."""
    A, B = phi_matrix(64, 2048, 1.0, 11), phi_matrix(2048, 2048, 1.0, 12)
    want = exact_matmul(A, B, backend="numpy")
    dA, dB = cupy_backend.asarray(A), cupy_backend.asarray(B)
    pool = cupy_backend.xp.get_default_memory_pool()
    free_kept_plans()
    cupy_backend.release_memory()
    with cupy_backend.track_allocations() as whole:
        exact_matmul(dA, dB, backend=cupy_backend)
    cupy_backend.release_memory()
    before, room = pool.get_limit(), whole.peak_bytes // 4
    pool.set_limit(size=pool.total_bytes() + room)
    monkeypatch.setattr(cupy_backend, "memory_info", lambda: (room, cupy_backend.xp.cuda.runtime.memGetInfo()[1]))
    try:
        with cupy_backend.track_allocations() as report:
            got = exact_matmul(dA, dB, backend=cupy_backend)
    finally:
        pool.set_limit(size=before)
        cupy_backend.release_memory()
    assert_bitwise(cupy_backend.to_numpy(got), want)
    assert report.peak_bytes <= room < whole.peak_bytes


def test_a_block_out_of_memory_is_planned_again_at_half_the_budget(monkeypatch):
    """Where the blocks' model undercounts the device's temporaries, the block that runs out of memory is
    planned again in half the budget, after the pool's cache is handed back, with the same bits."""
    A, B = phi_matrix(20, 300, 2.0, 21), phi_matrix(300, 30, 2.0, 22)
    want = exact_matmul(A, B, backend="numpy")
    be = get_backend("numpy")
    budgets, released, real = [], [], reference._exact

    def tight(be_, A_, B_, rows, cols, budget, plan):
        budgets.append(budget)
        if len(budgets) < 3:
            raise MemoryError("out of memory allocating a block")
        return real(be_, A_, B_, rows, cols, budget, plan)

    monkeypatch.setattr(reference, "_exact", tight)
    monkeypatch.setattr(be, "release_memory", lambda: released.append(True))
    assert_bitwise(exact_matmul(A, B, backend=be), want)
    assert budgets[1] == budgets[0] // 2 and budgets[2] == budgets[0] // 4 and released == [True, True]
    monkeypatch.setattr(reference, "_exact", lambda *a: (_ for _ in ()).throw(MemoryError("never fits")))
    with pytest.raises(MemoryError, match="never fits"):
        exact_matmul(A, B, backend=be)
