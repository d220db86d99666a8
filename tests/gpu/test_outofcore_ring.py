"""Streaming panels through a small pinned ring (``gpu.outofcore.ring``, ``staging="stream"``): bands of whole
lines as data, buffers taken in turn once their last copy is done, C's pieces locked ahead while A and B are
not locked, and the engine's result bit for bit that of the staged route, on NumPy and, where a GPU is usable,
on CuPy."""

import mmap
import os
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.outofcore import Timeline, ahead, matmul, ring
from gpu.outofcore.ops import HOST_RANGES
from gpu.outofcore.pagelock import extent
from gpu.outofcore.ring import Ring, bands

PAGE = mmap.PAGESIZE


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.sampled_from([4, 8]), st.sampled_from("CF"), st.integers(1, 900))
def test_bands_are_whole_lines_in_order_each_within_a_buffer(rows, cols, itemsize, order, chunk):
    cut = bands((rows, cols), itemsize, order, chunk)
    axis = 0 if order == "C" else 1
    lines, line_bytes = (rows, cols)[axis], (rows, cols)[1 - axis] * itemsize
    got = [key[axis] for key in cut]
    assert all(key[1 - axis] == slice(None) for key in cut), "whole lines"
    assert [i for s in got for i in range(s.start, s.stop)] == list(range(lines)), "every line once, in order"
    assert all((s.stop - s.start) * line_bytes <= chunk or s.stop - s.start == 1 for s in got)
    assert all((s.stop - s.start) == max(1, chunk // max(1, line_bytes)) for s in got[:-1]), "as few as fit"


class Fence:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def synchronize(self):
        self.log.append(self.name)


def test_a_buffer_is_taken_again_only_once_its_last_copy_is_done():
    log = []
    made = Ring(np.empty, 64, np.dtype(np.float64), count=2)
    assert sum(b.nbytes for b in made.buffers) == 128 and [i for i, _ in (made.take(), made.take())] == [0, 1]
    made.fence(0, Fence(log, "copy from 0"))
    made.fence(1, Fence(log, "copy from 1"))
    index, flat = made.take()
    assert index == 0 and log == ["copy from 0"] and flat.size == 8
    assert made.take()[0] == 1 and log == ["copy from 0", "copy from 1"]
    assert made.take()[0] == 0 and len(log) == 2, "a fence is waited for once"


@pytest.mark.parametrize("orders", ["CC", "FC", "CF", "FF"])
def test_streaming_gives_the_staged_result_locks_only_c_and_unlocks_it(monkeypatch, orders):
    """Buffers of 3 KiB cut every panel into many bands (some of one line); the product is the staged route's bit
    for bit in every layout, with fringes; C's pieces are locked ahead and unlocked at the end, A and B never
    locked; the time-line shows a staging span per band."""
    monkeypatch.setattr(ring, "CHUNK", 3 * 1024)
    monkeypatch.setattr(ahead, "PIECE", 2 * PAGE)
    rng = np.random.default_rng(7)
    A, B = rng.uniform(-1, 1, (61, 53)), rng.uniform(-1, 1, (53, 45))
    A, B = (np.asfortranarray(x) if o == "F" else x for x, o in zip((A, B), orders))
    options = {"block": (17, 13), "panel": 7, "buffers": 3, "c_buffers": 2, "backend": "numpy"}
    want = matmul(A, B, staging="pinned", **options)
    locked = []
    real = HOST_RANGES.lock_gaps
    monkeypatch.setattr(HOST_RANGES, "lock_gaps", lambda a, n, w: locked.append((a, n, w)) or real(a, n, w))
    line = Timeline()
    big = np.full((70, 50), np.nan)
    got = matmul(A, B, out=big[3:64, 2:47], staging="stream", timeline=line, **options)
    assert np.array_equal(got, want) and np.isnan(big[:3]).all() and np.isnan(big[3:64, 47:]).all()
    assert locked and all(w for _, _, w in locked), "only C's pieces, writeable"
    c_lo, c_n = extent(big)
    assert all(c_lo - PAGE <= a and a + n <= c_lo + c_n + PAGE for a, n, _ in locked)
    assert not any(HOST_RANGES.holds(*extent(x)) for x in (A, B, big)), "unlocked when the call ends"
    lanes = Counter(s.lane for s in line.spans())
    assert lanes["staging"] == lanes["H2D"] > 2 * 4 * 7, "a staging span and a copy per band"


def test_each_band_fences_its_buffer_after_its_copy(monkeypatch):
    """The buffer a band was staged in is handed out again only after the fence taken after its copy."""
    from gpu.backend import get_backend
    ops = get_backend("numpy").ops("outofcore")
    events = []
    monkeypatch.setattr(ring, "CHUNK", 1024)
    monkeypatch.setattr(Ring, "fence", lambda self, i, done: events.append(("fence", i, done)))
    x, device = np.arange(40 * 9.0).reshape(40, 9), np.empty((40, 9))
    ops.ring = Ring(np.empty, 1024, x.dtype, count=2)
    ops.timeline = None
    ops.stream_panel(device, x, lambda d, s: events.append(("copy", d.shape)) or d.__setitem__(..., s),
                     lambda: "after copy")
    ops.release()
    assert np.array_equal(device, x)
    assert events == [("copy", (14, 9)), ("fence", 0, "after copy"), ("copy", (14, 9)), ("fence", 1, "after copy"),
                      ("copy", (12, 9)), ("fence", 0, "after copy")], "bands of 14 lines of 72 bytes in 1 KiB"


def test_operands_locked_already_are_copied_in_place_not_streamed(monkeypatch):
    from gpu.outofcore import page_locked
    rng = np.random.default_rng(8)
    A, B = rng.uniform(-1, 1, (40, 30)), rng.uniform(-1, 1, (30, 20))
    line = Timeline()
    with page_locked(A, backend="numpy"):
        got = matmul(A, B, block=(20, 20), panel=8, staging="stream", timeline=line, backend="numpy")
    assert np.array_equal(got, matmul(A, B, block=(20, 20), panel=8, staging="pinned", backend="numpy"))
    lanes = Counter(s.lane for s in line.spans())
    assert lanes["staging"] == 8 and lanes["H2D"] == 16, "B's 8 panels staged, A's read in place"


def test_the_ring_is_the_host_memory_a_streamed_product_asks_for(monkeypatch):
    """A plan whose pinned staging would not fit in the host memory left is refused, and the same product streamed
    (a ring of COUNT x CHUNK bytes) runs."""
    from gpu.backend import MemoryPlanError, get_backend
    be = get_backend("numpy")
    A, B = np.ones((64, 64)), np.ones((64, 64))
    need = be.ops("outofcore").host_bytes(__import__("gpu.outofcore", fromlist=["plan"]).plan(
        64, 64, 64, 8, device_memory=10**6, block=64, panel=64), (True, True, True))
    monkeypatch.setattr(ring, "CHUNK", 1024)
    monkeypatch.setattr(type(be), "memory_info", lambda self: (need - 1, need))
    with pytest.raises(MemoryPlanError):
        matmul(A, B, block=64, panel=64, device_memory=10**6, staging="pinned", backend=be)
    assert np.array_equal(matmul(A, B, block=64, panel=64, device_memory=10**6, staging="stream", backend=be),
                          A @ B)


def test_dask_tasks_stream_a_and_b_and_keep_only_c_locked_with_the_mappings(client, assert_product, mapped_files):
    from gpu.multigpu import mapped
    from gpu.multigpu.dask_matmul import matmul as dask_matmul
    A0, B0, A, B, out = mapped_files(40, 30, 50, seed=22)
    dask_matmul(A, B, client=client, block=(20, 50), backend="numpy", out=out, lock_pages="stream", panel=8)
    assert_product(np.load(out.filename), A0, B0)
    spans = HOST_RANGES.spans()
    assert spans and all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "one run of pages: C's, kept"
    assert spans[-1][1] - spans[0][0] <= (-(-os.path.getsize(out.filename) // mmap.PAGESIZE) + 1) * mmap.PAGESIZE, \
        "C's pieces kept with the worker's mapping of C, A's and B's never locked"
    client.run(mapped.release)
    assert not HOST_RANGES.ranges, "unlocked when the mappings go"
    with pytest.raises(ValueError, match="lock_pages must be True, False, 'reuse', 'ahead' or 'stream'"):
        dask_matmul(A, B, client=client, lock_pages="ring")


@pytest.mark.gpu
def test_streaming_gives_the_staged_result_on_the_gpu(cupy_backend, monkeypatch):
    """Buffers of 256 KiB: many bands per panel, each copied once its buffer's last copy is done; the product is
    the staged route's bit for bit, and C's pieces are unlocked when the call ends."""
    monkeypatch.setattr(ring, "CHUNK", 256 * 1024)
    monkeypatch.setattr(ahead, "PIECE", 64 * PAGE)
    ranges = cupy_backend.ops("outofcore").ranges
    rng = np.random.default_rng(5)
    A, B = rng.uniform(-1, 1, (700, 600)), np.asfortranarray(rng.uniform(-1, 1, (600, 500)))
    options = {"block": (256, 256), "panel": 128, "backend": cupy_backend}
    want = matmul(A, B, staging="pinned", **options)
    for _ in range(2):
        got = matmul(A, B, staging="stream", **options)
        assert np.array_equal(got, want) and not any(ranges.holds(*extent(x)) for x in (A, B, got))


def test_a_streamed_plan_is_sized_by_the_device_not_by_pinned_staging(monkeypatch):
    """The plan's memory budget counts no staging twin for a streamed product (its ring is 256 MiB), where the
    pinned route's staging is as large as the device buffers."""
    from gpu.backend import get_backend
    from gpu.outofcore import Plan
    seen, ops = [], get_backend("numpy").ops("outofcore")
    real = ops.budget
    monkeypatch.setattr(ops, "budget", lambda host_free, staged: seen.append(staged) or real(host_free, staged))
    A, B = np.ones((32, 24)), np.ones((24, 16))
    Plan(A, B, options={"staging": "stream"}, backend="numpy")
    Plan(A, B, options={"staging": "pinned"}, backend="numpy")
    assert seen == [(False, False, False), (True, True, True)]
