"""Page-locked operands of the out-of-core engine (``gpu.outofcore.pagelock``, ``page_locked``): the locked
ranges as data (one registration per disjoint range, merged where they meet, restored where a registration
fails), and the engine's direct route (no staging, no placement) giving the staged route's result bit for
bit on NumPy and, where a GPU is usable, on CuPy."""

import mmap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.backend import get_backend
from gpu.outofcore import LANES, Timeline, matmul, page_locked, plan, run
from gpu.outofcore.pagelock import LockedRanges, extent
from gpu.outofcore.plan import ALL_STAGED

PAGE = mmap.PAGESIZE


class Driver:
    """Stands for cudaHostRegister: the registrations alive, and addresses that refuse to register."""

    def __init__(self, refuse=()):
        self.alive, self.refuse, self.calls = {}, set(refuse), 0

    def register(self, address, nbytes, writeable):
        self.calls += 1
        if address in self.refuse or any(a < address + nbytes and address < a + n for a, (n, _) in self.alive.items()):
            raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered or refused")
        self.alive[address] = (nbytes, writeable)

    def unregister(self, address):
        del self.alive[address]

    def ranges(self):
        return LockedRanges(self.register, self.unregister)


def test_a_range_is_held_only_inside_one_registration_and_merged_where_it_meets_another():
    driver = Driver()
    ranges = driver.ranges()
    assert ranges.lock(10 * PAGE + 8, 2 * PAGE, False)
    assert driver.alive == {10 * PAGE: (3 * PAGE, False)}, "page-aligned, the partial pages included"
    assert ranges.holds(10 * PAGE + 8, 100) and not ranges.holds(10 * PAGE, 100, writeable=True)
    assert ranges.lock(14 * PAGE, PAGE, False)
    assert not ranges.holds(12 * PAGE, 3 * PAGE), "two registrations side by side do not hold a range across them"
    assert ranges.lock(12 * PAGE, 3 * PAGE, False)
    assert driver.alive == {10 * PAGE: (5 * PAGE, False)} and ranges.holds(10 * PAGE, 5 * PAGE)
    assert ranges.nbytes == 5 * PAGE and ranges.seconds > 0
    calls = driver.calls
    assert ranges.lock(11 * PAGE, PAGE, False) and driver.calls == calls, "a held range is not registered again"
    ranges.unlock(13 * PAGE, 1)
    assert driver.alive == {} and not ranges.holds(10 * PAGE, 1)
    assert ranges.holds(5, 0) and ranges.lock(5, 0, True), "an empty range needs nothing"


def test_a_failed_registration_leaves_the_old_ranges_locked():
    driver = Driver(refuse={0})
    ranges = driver.ranges()
    assert ranges.lock(PAGE, PAGE, False)
    assert not ranges.lock(0, 3 * PAGE, False)
    assert driver.alive == {PAGE: (PAGE, False)} and ranges.ranges == {PAGE: (2 * PAGE, False)}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40), st.integers(1, 12), st.booleans()), max_size=25))
def test_locked_ranges_stay_disjoint_and_match_the_registrations(ops):
    driver = Driver()
    ranges = driver.ranges()
    for lock, start, pages, writeable in ops:
        if lock:
            assert ranges.lock(start * PAGE, pages * PAGE, writeable)
            assert ranges.holds(start * PAGE, pages * PAGE, writeable)
        else:
            ranges.unlock(start * PAGE, pages * PAGE)
            assert not any(ranges.holds(a, 1) for a in range(start * PAGE, (start + pages) * PAGE, PAGE))
        spans = sorted((a, b) for a, (b, _) in ranges.ranges.items())
        assert all(b <= c for (_, b), (c, _) in zip(spans, spans[1:])), "disjoint"
        assert {a: (b - a, w) for a, (b, w) in ranges.ranges.items()} == driver.alive


def test_the_extent_of_a_view():
    x = np.zeros((10, 12))
    assert extent(x[2:4, 3:5]) == (x.ctypes.data + (2 * 12 + 3) * 8, (12 + 2) * 8)
    assert extent(x.T) == (x.ctypes.data, x.nbytes) and extent(x[:0])[1] == 0


def _operands(m, k, n, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)), np.asfortranarray(rng.uniform(-1, 1, (k, n)))


def _own_pages(x):
    """``x`` copied into pages of its own: small heap arrays may share a page, and a lock covers whole pages."""
    order = "F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C"
    out = np.ndarray(x.shape, x.dtype, buffer=mmap.mmap(-1, max(1, x.nbytes)), order=order)
    out[...] = x
    return out


def _lanes(backend, p, A, B, C):
    line = Timeline()
    run(backend, backend.ops("outofcore"), p, A, B, C, line)
    return {lane: sum(s.lane == lane for s in line.spans()) for lane in LANES}


def _route(backend_name):
    be = get_backend(backend_name)
    A, B = _operands(61, 53, 45, seed=3)
    big = np.full((70, 50), np.nan)
    staged, locked = np.empty((61, 45)), big[3:64, 2:47]            # C a view with a leading dimension
    p = plan(61, 53, 45, 8, device_memory=10**6, block=(17, 13), panel=7, buffers=3, c_buffers=2)
    before = _lanes(be, p, A, B, staged)
    with page_locked(A, B, big, backend=be) as done:
        assert done == [True, True, True]
        assert be.ops("outofcore").staged(A, B, locked) == (False, False, False)
        after = _lanes(be, p, A, B, locked)
    assert be.ops("outofcore").staged(A, B, locked) == ALL_STAGED, "unlocked on leaving"
    assert np.array_equal(staged, locked), "the direct route gives the staged route's result bit for bit"
    assert np.isnan(np.delete(big, np.s_[3:64], 0)).all() and np.isnan(big[3:64, 47:]).all(), "only C written"
    loads, stores = sum(s.load for s in p.steps()), sum(s.last for s in p.steps())
    assert before["staging"] == 2 * loads and before["placement"] == stores
    assert after == {**before, "staging": 0, "placement": 0}, "no staging and no placement"


def test_page_locked_operands_skip_the_staging_on_numpy():
    _route("numpy")


def test_the_engine_call_records_its_run_into_a_time_line():
    A, B = _operands(30, 20, 25, seed=6)
    line = Timeline()
    C = matmul(A, B, block=(10, 10), panel=5, backend="numpy", timeline=line)
    assert np.allclose(C, A @ B)
    gemms = [s for s in line.spans() if s.lane == "GEMM"]
    assert len(gemms) == len(list(plan(30, 20, 25, 8, device_memory=10**6, block=(10, 10), panel=5).steps()))


def test_page_locked_operands_need_no_staging_memory():
    ops = get_backend("numpy").ops("outofcore")
    p = plan(1000, 1000, 1000, 8, device_memory=10**7, block=200, panel=100)
    assert ops.host_bytes(p, (False, False, False)) == p.device_bytes
    assert ops.host_bytes(p, (True, False, True)) == p.device_bytes + 8 * (200 * 200 + 2 * 200 * 100)
    assert ops.host_bytes(p) == p.device_bytes + p.pinned_bytes


def test_only_a_writeable_lock_lets_the_device_write_c():
    A, B, C = (_own_pages(x) for x in (*_operands(8, 6, 4, seed=5), np.empty((8, 4))))
    ops = get_backend("numpy").ops("outofcore")
    C.flags.writeable = False
    with page_locked(C, backend="numpy"):
        assert ops.staged(A, B, C)[2], "a read-only lock holds no output"
    C.flags.writeable = True
    with page_locked(A, C, backend="numpy"):
        assert ops.staged(A, B, C) == (False, True, False)
        assert np.allclose(matmul(A, B, out=C, backend="numpy"), A @ B)


def test_page_locked_leaves_what_was_locked_before_it_locked():
    ops = get_backend("numpy").ops("outofcore")
    outer, inner = (np.frombuffer(mmap.mmap(-1, 4 * PAGE), np.float64) for _ in range(2))   # no page shared
    with page_locked(outer, backend="numpy"):
        with page_locked(outer, inner, backend="numpy") as done:
            assert done == [True, True]
        assert ops.pages_locked(*extent(outer)), "the outer lock outlives the inner with"
        assert not ops.pages_locked(*extent(inner)), "what the inner with locked is unlocked"
    assert not ops.pages_locked(*extent(outer))


def test_page_locked_takes_host_arrays_only():
    class Device:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f8", "data": (0, False), "version": 3}

    with pytest.raises(TypeError, match="array 1 is a device array"), page_locked(np.ones(2), Device()):
        pass
    with pytest.raises(TypeError, match="not a NumPy array"), page_locked([1.0, 2.0]):
        pass


@pytest.mark.gpu
def test_page_locked_operands_skip_the_staging_on_the_gpu(cupy_backend):
    _route(cupy_backend.name)
