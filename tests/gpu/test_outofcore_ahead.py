"""Locking ahead of the copies (``gpu.outofcore.ahead``, ``staging="lock"``, ``lock_pages="ahead"``): pieces as
data, copies cut where they cross a piece, the order the pieces are locked in, and the engine's result bit for
bit that of the staged route, on NumPy and, where a GPU is usable, on CuPy."""

import mmap
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.backend import get_backend
from gpu.outofcore import Timeline, ahead, matmul, plan
from gpu.outofcore.ahead import Ahead, first_uses, pieces, segments
from gpu.outofcore.ops import HOST_RANGES
from gpu.outofcore.pagelock import LockedRanges, extent

PAGE = mmap.PAGESIZE


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 5000), st.integers(0, 40), st.integers(1, 60), st.integers(1, 12),
       st.lists(st.integers(1, 1200), max_size=8))
def test_a_cut_copy_moves_every_byte_once_and_no_part_crosses_a_boundary(base, gap, width, height, offsets):
    pitch = width + gap
    span = (height - 1) * pitch + width
    bounds = sorted({base + o for o in offsets if o < span})
    moved = Counter()
    for line, lines, offset, nbytes in segments(base, pitch, width, height, bounds):
        assert lines >= 1 and nbytes >= 1 and 0 <= offset and offset + nbytes <= width
        assert lines == 1 or (offset, nbytes) == (0, width), "several lines go whole"
        lo, hi = base + line * pitch + offset, base + (line + lines - 1) * pitch + offset + nbytes
        assert not any(lo < b < hi for b in bounds), "a part lies between two boundaries"
        moved.update((r, x) for r in range(line, line + lines) for x in range(offset, offset + nbytes))
    assert moved == Counter({(r, x): 1 for r in range(height) for x in range(width)})


def test_a_copy_that_crosses_nothing_is_one_part():
    assert segments(100, 64, 40, 9, []) == [(0, 9, 0, 40)]
    assert segments(100, 64, 40, 9, [100 + 64 * 3]) == [(0, 3, 0, 40), (3, 6, 0, 40)], "a boundary between lines"
    assert segments(0, 64, 40, 2, [20]) == [(0, 1, 0, 20), (0, 1, 20, 20), (1, 1, 0, 40)]


def test_pieces_are_aligned_chunks_of_the_memory_that_views_of_one_array_share():
    bounds = (3 * PAGE + 100, 40 * PAGE)
    assert pieces(5 * PAGE + 7, 20 * PAGE, bounds, 8 * PAGE) == [
        (3 * PAGE, 8 * PAGE), (8 * PAGE, 16 * PAGE), (16 * PAGE, 24 * PAGE), (24 * PAGE, 32 * PAGE)]
    assert pieces(40 * PAGE, 3 * PAGE + 50, bounds, 8 * PAGE) == [(40 * PAGE, 44 * PAGE)], "clipped to the memory"
    assert pieces(9 * PAGE, 0, bounds, 8 * PAGE) == []
    x = np.zeros((300, 41))
    left, right = set(pieces(*extent(x[:, :9]), ahead.root_extent(x), 4 * PAGE)), set(
        pieces(*extent(x[100:200, 20:]), ahead.root_extent(x[1:]), 4 * PAGE))
    assert right <= left, "two views of one array: the same pieces where they meet"


class Recorder(LockedRanges):
    """Locked ranges that record the order of their registrations (and refuse some)."""

    def __init__(self, refuse=()):
        self.order, self.refuse = [], set(refuse)
        super().__init__(self._register, lambda address: None)

    def _register(self, address, nbytes, writeable):
        if address in self.refuse:
            raise RuntimeError("refused")
        self.order.append((address, address + nbytes, writeable))


def test_the_schedule_first_reads_each_view_in_order_and_pieces_lock_in_that_order():
    A, B, C = (np.frombuffer(mmap.mmap(-1, 8 * r * c), np.float64).reshape(r, c)     # no page shared
               for r, c in ((40, 30), (30, 50), (40, 50)))
    p = plan(40, 30, 50, 8, device_memory=10**6, block=(20, 50), panel=10)
    uses = first_uses(p.steps(), A, B, C)
    assert [extent(v) for v, _ in uses] == [extent(v) for v, _ in (
        (A[:20, :10], 0), (B[:10], 0), (A[:20, 10:20], 0), (B[10:20], 0), (A[:20, 20:], 0), (B[20:], 0),
        (C[:20], 0), (A[20:, :10], 0), (A[20:, 10:20], 0), (A[20:, 20:], 0), (C[20:], 0))][:len(uses)]
    assert [w for _, w in uses].count(True) == 2, "C's blocks, writeable"
    ranges = Recorder()
    locker = Ahead(ranges, keep=True, populate_pages=False, piece=PAGE)
    for view, writeable in uses:
        locker.request(view, writeable)
    locker.wait(C, writeable=True)
    locker.close()
    def of(x):
        return pieces(*extent(x), ahead.root_extent(x), PAGE)
    band = of(A[:20])
    assert [(a, b) for a, b, _ in ranges.order[:len(band)]] == band, "A's first band first, in address order"
    assert {(a, b) for a, b, w in ranges.order if w} == set(of(C)), "C's pieces, writeable"
    assert len(ranges.order) == len(set(ranges.order)), "each piece once"


def _operands(m, k, n, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)), np.asfortranarray(rng.uniform(-1, 1, (k, n)))


@pytest.mark.parametrize("keep", [False, True])
def test_locking_ahead_gives_the_staged_result_and_unlocks_what_it_locked(monkeypatch, keep):
    """Pieces of two pages cut rows of A, columns of B and rows of C: every copy is cut, and the product is the
    staged route's bit for bit; the pieces are unlocked when the call ends, or kept with ``keep_locked``."""
    import gpu.outofcore.ops as ops
    monkeypatch.setattr(ahead, "PIECE", 2 * PAGE)
    parts = []

    def counted(*args):
        parts.append(ahead.copy_segments(*args))
        return parts[-1]
    monkeypatch.setattr(ops, "copy_segments", counted)
    A, B = _operands(61, 53, 45, seed=3)
    big = np.full((70, 50), np.nan)
    options = {"block": (17, 13), "panel": 7, "buffers": 3, "c_buffers": 2, "backend": "numpy"}
    want = matmul(A, B, staging="pinned", **options)
    before, spent = dict(HOST_RANGES.ranges), ahead.costs()["lock_bytes"]
    got = matmul(A, B, out=big[3:64, 2:47], staging="lock", keep_locked=keep, **options)
    assert np.array_equal(got, want) and np.isnan(big[:3]).all() and np.isnan(big[3:64, 47:]).all()
    assert max(parts) > 1, "copies were cut at piece boundaries"
    assert ahead.costs()["lock_bytes"] > spent
    assert (HOST_RANGES.ranges != before) == keep
    for x in (A, B, big):
        HOST_RANGES.unlock(*extent(x))


def test_a_piece_that_fails_to_lock_is_read_in_place_all_the_same(monkeypatch):
    be = get_backend("numpy")
    ops = be.ops("outofcore")
    A, B = _operands(40, 30, 20, seed=4)
    refuse = {lo for lo, _ in pieces(*extent(B), ahead.root_extent(B), PAGE)[1:2]}
    ranges = Recorder(refuse)
    monkeypatch.setattr(ops, "ranges", ranges)
    p = plan(40, 30, 20, 8, device_memory=10**6, block=(20, 20), panel=8)
    C = np.empty((40, 20))
    from gpu.outofcore import run
    locker = Ahead(ranges, piece=PAGE)
    run(be, ops, p, A, B, C, ahead=locker)
    locker.close()
    assert np.allclose(C, A @ B) and ranges.ranges == {}, "unlocked after"
    assert not any(a in refuse for a, _, _ in ranges.order)


def test_dask_tasks_lock_ahead_and_keep_the_pieces_with_the_mappings(client, assert_product, mapped_files):
    from gpu.multigpu import mapped
    from gpu.multigpu.dask_matmul import matmul as dask_matmul
    A0, B0, A, B, out = mapped_files(40, 30, 50, seed=21)
    dask_matmul(A, B, client=client, block=(20, 50), backend="numpy", out=out, lock_pages="ahead", panel=8)
    assert_product(np.load(out.filename), A0, B0)
    assert HOST_RANGES.ranges, "kept with the worker's mappings"
    client.run(mapped.release)
    assert not HOST_RANGES.ranges, "unlocked when the mappings go"
    dask_matmul(A0, B0, client=client, block=(20, 50), backend="numpy", lock_pages="ahead")
    assert not HOST_RANGES.ranges, "memory the workers do not keep is unlocked after each task"


@pytest.mark.gpu
def test_locking_ahead_gives_the_staged_result_on_the_gpu(cupy_backend, monkeypatch):
    """Pieces of 64 pages: the copies are cut where they cross one (a copy across two registrations fails on
    the device), the product is the staged route's bit for bit, and the time-line shows each piece mapped
    and locked; ``keep_locked`` keeps the pieces of the caller's arrays only."""
    monkeypatch.setattr(ahead, "PIECE", 64 * PAGE)
    ranges = cupy_backend.ops("outofcore").ranges
    rng = np.random.default_rng(5)
    A, B = rng.uniform(-1, 1, (700, 600)), np.asfortranarray(rng.uniform(-1, 1, (600, 500)))
    out = np.empty((700, 500))
    options = {"block": (256, 256), "panel": 128, "backend": cupy_backend}

    def kept(x):
        lo, n = extent(x)
        return [s for s in ranges.spans() if s[0] < lo + n and lo < s[1]]
    try:
        want = matmul(A, B, staging="pinned", **options)
        line = Timeline()
        got = matmul(A, B, staging="lock", timeline=line, **options)
        assert np.array_equal(got, want) and not kept(A) and not kept(got), "unlocked when the call ends"
        lanes = Counter(s.lane for s in line.spans())
        assert lanes["locking"] == lanes["mapping"] >= len(pieces(*extent(A), ahead.root_extent(A), 64 * PAGE))
        got = matmul(A, B, staging="lock", keep_locked=True, **options)
        assert np.array_equal(got, want) and len(kept(A)) > 1 and not kept(got), "a C made by the call: unlocked"
        assert np.array_equal(matmul(A, B, out=out, staging="lock", keep_locked=True, **options), want)
        assert kept(out) and np.array_equal(matmul(A, B, out=out, staging="lock", **options), want), "kept: reused"
    finally:
        for x in (A, B, out):
            ranges.unlock(*extent(x))


def test_pieces_lock_in_queue_order_as_copies_need_them_and_while_the_device_is_busy():
    ranges = Recorder()
    x = np.frombuffer(mmap.mmap(-1, 8 * PAGE), np.uint8)
    locker = Ahead(ranges, populate_pages=False, piece=PAGE)
    locker.request(x[5 * PAGE:])
    locker.request(x[:2 * PAGE])
    locker.advance(lambda: False)
    assert ranges.order == [] and locker.pending == 5, "an idle device: nothing locked ahead of the copies"
    locker.wait(x[PAGE:PAGE + 1])
    assert [a - x.ctypes.data for a, _, _ in ranges.order] == [5 * PAGE, 6 * PAGE, 7 * PAGE, 0, PAGE], "in order"
    locker.wait(x[3 * PAGE:4 * PAGE])
    busy = iter([True, False])
    locker.advance(lambda: next(busy))
    assert len(ranges.order) == 6 and locker.pending == 0
    locker.close()
    assert ranges.ranges == {}


@pytest.mark.parametrize("staging", ["auto", "lock"])
def test_panels_of_one_line_copy_in_their_host_arrays_order(staging):
    """A 1 x 2 panel of a column-major B is two lines of one element, as its packed buffer is (found by the
    property tests: the views' own orders disagreed where a side is 1)."""
    rng = np.random.default_rng(2)
    A, B = rng.uniform(-1, 1, (1, 2)).astype(np.float32), np.asfortranarray(rng.uniform(-1, 1, (2, 2)), np.float32)
    got = matmul(A, B, panel=1, backend="numpy", staging=staging)
    assert np.allclose(got, A @ B, rtol=1e-6, atol=1e-6)


def test_pieces_locked_already_are_not_queued_again():
    """A later call on kept pieces queues nothing: no mapping in, no registration (the x2 run that mapped kept
    pieces in again on every call ran 20% slower than whole ranges locked once)."""
    ranges = Recorder()
    x = np.frombuffer(mmap.mmap(-1, 6 * PAGE), np.uint8)
    first = Ahead(ranges, keep=True, populate_pages=False, piece=2 * PAGE)
    first.wait(x)
    first.close()
    locked = list(ranges.order)
    assert len(locked) == len(pieces(*extent(x), ahead.root_extent(x), 2 * PAGE))
    later = Ahead(ranges, keep=True, piece=2 * PAGE)
    assert later.request(x) == -1 and later.pending == 0
    later.wait(x[PAGE:])
    later.close()
    assert ranges.order == locked
    for lo, hi, _ in ranges.order:
        ranges.unlock(lo, hi - lo)


def test_pieces_lock_around_a_range_locked_before_and_leave_it_locked():
    """A caller's locked range inside the pieces (a ``page_locked`` operand sharing pages with them) is neither
    merged into a registration of this call nor unlocked when the call ends: only the parts around it are
    locked, and unlocked (the default staging locks ahead on every call)."""
    ranges = Recorder()
    x = np.frombuffer(mmap.mmap(-1, 8 * PAGE), np.uint8)
    base = x.ctypes.data
    assert ranges.lock(base + 3 * PAGE, 2 * PAGE, False)
    locker = Ahead(ranges, populate_pages=False, piece=4 * PAGE)
    locker.wait(x)
    mine = sorted((lo - base, hi - base) for lo, hi, _ in ranges.order[1:])
    assert mine[0][0] == 0 and mine[-1][1] == 8 * PAGE and all(hi <= 3 * PAGE or lo >= 5 * PAGE for lo, hi in mine)
    assert sum(hi - lo for lo, hi in mine) == 6 * PAGE, "the pieces less the caller's range, each byte once"
    locker.close()
    assert ranges.spans() == [(base + 3 * PAGE, base + 5 * PAGE)], "the caller's range stays locked"
    assert ranges.gaps(base, 8 * PAGE) == [(base, base + 3 * PAGE), (base + 5 * PAGE, base + 8 * PAGE)]
    assert ranges.gaps(base + 3 * PAGE, PAGE) == [] and ranges.gaps(base, 8 * PAGE, writeable=True) == [
        (base, base + 8 * PAGE)], "a read-only range holds nothing the device must write"
    ranges.unlock(base, 8 * PAGE)


def test_ranges_side_by_side_hold_what_they_cover_and_lock_gaps_registers_only_gaps():
    """Pieces locked as gaps leave adjacent ranges: together they hold a view (copies are cut at their
    boundaries), and ``lock_gaps`` registers the uncovered parts only, returning just those; an empty range has no
    gap; ``close`` returns the ranges the call locked."""
    ranges = Recorder()
    x = np.frombuffer(mmap.mmap(-1, 8 * PAGE), np.uint8)
    base = x.ctypes.data
    assert ranges.lock(base, 2 * PAGE, False) and ranges.lock(base + 2 * PAGE, 2 * PAGE, False)
    assert ranges.holds(base + PAGE, 2 * PAGE) and not ranges.holds(base + PAGE, 4 * PAGE)
    assert ranges.gaps(base + 5, 0) == [] and ranges.holds(base + 5, 0)
    assert ranges.lock_gaps(base, 6 * PAGE, False) == [(base + 4 * PAGE, base + 6 * PAGE)]
    assert ranges.spans() == [(base, base + 2 * PAGE), (base + 2 * PAGE, base + 4 * PAGE),
                              (base + 4 * PAGE, base + 6 * PAGE)], "no merge"
    locker = Ahead(ranges, populate_pages=False, piece=8 * PAGE)
    locker.wait(x)
    mine = locker.close()
    assert mine[0][0] == base + 6 * PAGE and mine[-1][1] == base + 8 * PAGE and sum(b - a for a, b in mine) == 2 * PAGE
    ranges.unlock(base, 8 * PAGE)
