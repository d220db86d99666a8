"""Memory planned before any work: scheme II's workspace is one block whose size bounds the call's real peak,
and a device whose free bytes lie in cached blocks too small for it (CuPy's pool after another call) makes the
call take the smaller layout or raise MemoryPlanError before any product, never fail in the middle. The same
one-block question guards every method's ``require_memory``. On NumPy a backend with a simulated pool stands
in for the device; on the GPU the pool's own limit does."""

import math
import random

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from gpu import ozaki2, splitk
from gpu.backend import MemoryPlanError, get_backend, require_memory
from gpu.backend.numpy_backend import NumpyBackend
from gpu.backend.plans import free_kept_plans
from gpu.ozaki2 import memory, tiled, workspace
from gpu.ozaki2.options import k_block as k_block_of

GIB = 2**30


class PoolNumpy:
    """NumPy as a device's array module whose pool can hand out no single block larger than ``largest`` bytes
    (a CuPy pool whose free bytes are split across cached blocks): a larger ``empty`` or ``zeros`` raises
    MemoryError, as CuPy's OutOfMemoryError is one."""

    def __init__(self, largest):
        self.largest, self.sizes = largest, []

    def __getattr__(self, name):
        return getattr(np, name)

    def _take(self, shape, dtype):
        size = math.prod((shape,) if isinstance(shape, int) else shape) * np.dtype(dtype).itemsize
        if size > self.largest:
            raise MemoryError(f"Out of memory allocating {size:,} bytes")
        self.sizes.append(size)

    def empty(self, shape, dtype=float, order="C"):
        self._take(shape, dtype)
        return np.empty(shape, dtype, order)

    def zeros(self, shape, dtype=float, order="C"):
        self._take(shape, dtype)
        return np.zeros(shape, dtype, order)


class FragmentedBackend(NumpyBackend):
    """The NumPy backend with ``free`` bytes free, of which one block holds at most ``largest``; counts the
    GEMMs it runs (any GEMM is work). ``host_scratch``: the temporaries NumPy makes by itself (scheme II's
    host operations) are host memory, not the simulated pool's, so ``can_allocate`` takes them."""

    def __init__(self, free, largest, host_scratch=False):
        super().__init__()
        self.xp, self.free, self.gemms = PoolNumpy(largest), free, 0
        self.one_block = free if host_scratch else largest

    def memory_info(self):
        return self.free, 2 * self.free

    def can_allocate(self, nbytes, free=None):
        return nbytes <= min(self.free, self.one_block)

    def gemm(self, *args, **kwargs):
        self.gemms += 1
        return super().gemm(*args, **kwargs)

    def gemm_ex(self, *args, **kwargs):
        self.gemms += 1
        return super().gemm_ex(*args, **kwargs)


def operands(m, k, n, seed=1):
    return phi_matrix(m, k, 1.0, seed), phi_matrix(k, n, 1.0, seed + 1)


def test_the_h200_workspace_holds_every_buffer_the_call_takes():
    """At N = 32768 fast-15 takes the residues of A and B (15 GiB each) and the INT32 products of every modulus
    (60 GiB) at once: the direct block holds them, 90 GiB; the planes layout holds the residues, 15 GiB of
    INT8 planes and one INT32 product. (The old estimate was 61.5 GiB.)"""
    N = 32768
    direct = workspace.layout(N, N, N, 15, "fast", direct=True)
    assert direct.nbytes >= (2 * 15 + 60) * GIB
    assert {"res_a", "res_b", "products"} <= set(direct.buffers)
    planes = workspace.layout(N, N, N, 15, "fast", direct=False)
    assert planes.nbytes >= (2 * 15 + 15 + 4) * GIB
    assert ozaki2.workspace_bytes(N, N, N, 15, "fast", direct=True) == direct.nbytes


@pytest.mark.parametrize("scaling", ozaki2.SCALINGS)
@pytest.mark.parametrize("direct", [True, False])
def test_buffers_do_not_overlap_within_a_phase(scaling, direct):
    """The residues, products and planes lie side by side; the scaling's scratch shares their start (it is dead
    before they are written), and every buffer starts aligned."""
    ws = workspace.layout(300, 5000, 200, 14, scaling, direct)
    main = ["res_a", "res_b"] + (["products"] if direct else ["planes", "product"])
    spans = sorted((ws.buffers[name].offset, ws.buffers[name].end) for name in main)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert all(b.offset % workspace.ALIGNMENT == 0 and b.end <= ws.nbytes for b in ws.buffers.values())


def test_the_plan_bounds_the_peak_on_numpy():
    """tracemalloc's peak of random calls (both scalings, counts or "auto", one or several k blocks) stays within
    the plan: the block, C, NumPy's temporaries and "auto"'s bound; and the plan is not wildly above it."""
    be, rng = get_backend("numpy"), random.Random(3)
    for count, scaling in ((None, "fast"), (1, "accurate")):      # the process's one-time caches, outside the peaks
        ozaki2.matmul(np.ones((3, 5)), np.ones((5, 2)), moduli=count or "auto", scaling=scaling, backend=be)
    for trial in range(24):
        m, k, n = rng.randint(1, 160), rng.randint(1, 260), rng.randint(1, 160)
        count, k_block = rng.choice([None, 1, 6, 15, 20]), rng.choice([None, 32])
        scaling = rng.choice(ozaki2.SCALINGS if count else ozaki2.AUTO_SCALINGS)
        A, B = phi_matrix(m, k, 1.0 if count else 0.5, trial), phi_matrix(k, n, 1.0 if count else 0.5, trial + 1)
        with be.track_allocations() as report:
            ozaki2.matmul(A, B, moduli=count or "auto", scaling=scaling, k_block=k_block, backend=be)
        direct = k_block is None or -(-k // 16) * 16 <= k_block
        plan = memory.peak_bytes(be, m, k, n, count, scaling, direct)
        assert report.peak_bytes <= plan, (m, k, n, count, scaling, k_block)
        assert plan <= 6 * max(report.peak_bytes, 2**16), (m, k, n, count, scaling, k_block)


def _reference(A, B, **kw):
    return ozaki2.matmul(A, B, backend="numpy", **kw)


@pytest.mark.parametrize("scaling", ozaki2.SCALINGS)
def test_a_split_pool_makes_the_call_take_a_smaller_layout(scaling, row_panels_at_any_size):
    """The device has room for the direct layout, but no cached block holds its INT32 products (as on the H200):
    the call takes the direct layout in row panels, no larger than the planes, gives the same bits, and never
    asks the pool for a block it cannot give."""
    m, k, n, count = 64, 16, 64, 15
    A, B = operands(m, k, n)
    planes = ozaki2.workspace_bytes(m, k, n, count, scaling)
    paneled = workspace.layout(m, k, n, count, scaling, True, rows=memory.panel_rows(m, k, n, count, scaling))
    assert 4 * count * m * n > planes >= paneled.nbytes  # the products alone: more than the pool's largest block
    be = FragmentedBackend(free=100 * planes, largest=planes, host_scratch=True)
    got = ozaki2.matmul(A, B, moduli=count, scaling=scaling, backend=be)
    assert np.array_equal(got, _reference(A, B, moduli=count, scaling=scaling))
    assert max(be.xp.sizes) == paneled.nbytes


def test_row_panels_whose_gemms_do_little_work_give_way_to_the_planes():
    """The default takes the planes layout where a row panel's INT8 GEMM would do fewer than MIN_PANEL_WORK
    multiply-adds (N = 4096 and 6144 on the H200: 4 panels of a quarter of the rows ran 24-27% and 6% slower than
    the planes), the panels from N = 8192 and in the tiles of a capped product at 16384; a workspace= that holds
    the whole direct layout takes it first either way."""
    block = k_block_of(None)

    def taken(m, k, n, whole=False, keep_a=False):
        return [(ws.direct, ws.rows) for ws in memory.layouts(m, k, n, 15, "fast", block, whole=whole,
                                                                keep_a=keep_a)]
    for n in (4096, 6144):
        assert memory.panel_rows(n, n, n, 15, "fast") * n * n < memory.MIN_PANEL_WORK
        assert taken(n, n, n) == [(False, None)] and taken(n, n, n, whole=True) == [(True, n), (False, None)]
    assert taken(8192, 8192, 8192) == [(True, 2048), (False, None)]
    assert taken(8192, 8192, 8192, whole=True) == [(True, 8192), (True, 2048), (False, None)]
    assert taken(8192, 16384, 4096, whole=True, keep_a=True) == [(True, 8192), (True, 2048), (False, None)]


def test_a_capped_product_takes_the_tallest_row_panels_its_room_holds():
    """Where ``workspace=`` leaves the block more than GEMMul8's bytes, the direct layout in the fewest balanced
    row panels that fit that room comes after the whole layout and before the GEMMul8-bounded panels (the tile of
    a product capped at 2 FP64 matrices at N = 16384: panels of 4096 rows, not 2048); a room no larger than
    GEMMul8's changes nothing."""
    block, n = k_block_of(None), 16384
    room = 2 * 8 * n * n - 10**7

    def size(rows):
        return workspace.layout(8192, n, 4096, 15, "fast", True, rows=rows, keep_a=True).nbytes
    rows = memory.room_rows(8192, n, 4096, 15, "fast", True, room)
    assert rows == 4096 and size(rows) <= room < size(8192 // 2 + 8192 // 4)
    assert memory.room_rows(8192, n, 4096, 15, "fast", True, 10**9 * 50) == 8192
    assert memory.room_rows(8192, n, 4096, 15, "fast", True, size(16) - 1) is None
    for m in (100, 1000, 8192):
        got = memory.room_rows(m, 300, 48, 15, "fast", False, room=size_at(m, 300, 48, 40))
        panels = -(-m // got)
        assert workspace.layout(m, 300, 48, 15, "fast", True, rows=got).nbytes <= size_at(m, 300, 48, 40)
        assert panels == 1 or size_at(m, 300, 48, -(-m // (panels - 1))) > size_at(m, 300, 48, 40)
    kept = [workspace.layout(16384, 300, 48, 15, "fast", True, rows=r, keep_a=True).nbytes for r in (8192, 6144)]
    assert memory.room_rows(16384, 300, 48, 15, "fast", True, kept[0]) == 8192, \
        "the fewest panels where A's kept residues make the layout grow slower than its products per row"
    assert memory.room_rows(16384, 300, 48, 15, "fast", True, kept[0] - 1) == 6144 and kept[1] < kept[0]
    taken = [(ws.direct, ws.rows) for ws in memory.layouts(8192, n, 4096, 15, "fast", block, whole=True, keep_a=True,
                                                            room=room)]
    assert taken == [(True, 8192), (True, 4096), (True, 2048), (False, None)]
    gemmul8 = workspace.layout(8192, n, 4096, 15, "fast", False, keep_a=True).nbytes
    assert memory.layouts(8192, n, 4096, 15, "fast", block, whole=True, keep_a=True, room=gemmul8) == \
        memory.layouts(8192, n, 4096, 15, "fast", block, whole=True, keep_a=True)


def size_at(m, k, n, rows):
    """Bytes of the direct layout of m x k x n in row panels of ``rows`` (rounded up to ALIGN)."""
    return workspace.layout(m, k, n, 15, "fast", True, rows=-(-rows // 16) * 16).nbytes


def test_no_block_that_fits_raises_before_any_work():
    A, B = operands(64, 100, 48)
    planes = ozaki2.workspace_bytes(64, 100, 48, 15, "fast")
    least = min(ws.nbytes for ws in memory.layouts(64, 100, 48, 15, "fast", 2**17 - 16))
    be = FragmentedBackend(free=100 * planes, largest=least - 1, host_scratch=True)
    with pytest.raises(MemoryPlanError, match=r"Ozaki scheme II on 64 x 100 x 48 with 15 moduli needs .* in one "
                                              r"block.*pass fewer moduli, out=, or split"):
        ozaki2.matmul(A, B, moduli=15, scaling="fast", backend=be)
    assert be.gemms == 0


def test_too_little_free_memory_raises_before_any_work():
    """A plan refused for memory says what it needs; ``matmul`` then tiles within the free memory, and raises
    before any work only where not even the least tiles fit."""
    A, B = operands(64, 100, 48)
    need = memory.peak_bytes(get_backend("numpy"), 64, 100, 48, 15, "fast", direct=False)
    be = FragmentedBackend(free=need - 1, largest=need, host_scratch=True)
    with pytest.raises(MemoryPlanError, match=r"needs .* \(workspace .* output and scratch .*\) but .* are free"):
        ozaki2.Plan(A, B, options={"moduli": 15}, backend=be)
    assert be.gemms == 0
    tight = FragmentedBackend(free=4096, largest=4096, host_scratch=True)
    with pytest.raises(MemoryPlanError, match="even in tiles of 64 x 64|holds no workspace"):
        ozaki2.matmul(A, B, moduli=15, backend=tight)
    assert tight.gemms == 0
    ok = FragmentedBackend(free=need, largest=need, host_scratch=True)
    assert np.array_equal(ozaki2.matmul(A, B, moduli=15, backend=ok), _reference(A, B, moduli=15))


def test_tiles_cut_to_free_bytes_that_are_not_one_block_are_halved_until_one_is():
    """The free memory counts cached blocks (CuPy's pool) that may each be too small for the tile its bytes allow:
    the tiled plan halves its tiles until the first one's block can be had, before any work, and gives the
    untiled product's bits (a count given, the fast scaling)."""
    m, k, n = 256, 100, 256
    A, B = operands(m, k, n, 3)
    whole = tiled.tile_bytes(get_backend("numpy"), m, k, n, 15, "fast", "normwise")
    largest = tiled.tile_bytes(get_backend("numpy"), m // 4, k, n // 4, 15, "fast", "normwise")
    be = FragmentedBackend(free=4 * whole, largest=largest)
    with ozaki2.TiledPlan(A, B, options={"moduli": 15, "workspace": whole // 2}, backend=be) as plan:
        cut = (plan.rows, plan.cols)
        got = plan.execute(A, B)
        assert (plan.rows, plan.cols) < cut and max(plan.rows, plan.cols) <= m // 4
    assert np.array_equal(got, _reference(A, B, moduli=15))
    none, out, options = FragmentedBackend(free=4 * whole, largest=1024), np.full((m, n), 7.0), \
        {"moduli": 15, "workspace": whole // 2}
    with pytest.raises(MemoryPlanError), ozaki2.TiledPlan(A, B, out=out, options=options, backend=none) as plan:
        plan.execute(A, B, out)
    assert (out == 7.0).all(), "nothing written"

def test_require_memory_asks_for_one_block():
    """Every method's check: bytes that are free but not in one block are refused, with the reason."""
    be = FragmentedBackend(free=10 * GIB, largest=GIB)
    require_memory(be, GIB, "a workspace", "free memory")
    with pytest.raises(MemoryPlanError, match=r"a workspace needs 2\.00 GiB: 10\.00 GiB are free on the numpy device, "
                                              r"but not in one block .*; free memory"):
        require_memory(be, 2 * GIB, "a workspace", "free memory")


def test_split_k_refuses_a_workspace_the_pool_cannot_give():
    A, B = np.ones((4, 2**14)), np.ones((2**14, 4))
    be = FragmentedBackend(free=GIB, largest=2048)
    with pytest.raises(MemoryPlanError, match="split-K of 4 x 16384 x 4 .* not in one block"):
        splitk.matmul(A, B, chunks=64, deterministic=True, backend=be)
    assert be.gemms == 0


# --------------------------------------------------------------------------- on the GPU

@pytest.fixture
def small_device(cupy_backend):
    """CuPy's pool limited (a small device), emptied first (every family's kept plans freed: a refused plan frees
    them and asks again, and plans left by earlier tests would make room the small device does not have) and
    restored after."""
    pool = cupy_backend.xp.get_default_memory_pool()
    free_kept_plans()
    cupy_backend.release_memory()
    before = pool.get_limit()
    yield pool
    pool.set_limit(size=before)
    cupy_backend.release_memory()


@pytest.mark.gpu
@pytest.mark.parametrize("scaling", ozaki2.SCALINGS)
@pytest.mark.parametrize("shape, count, k_block", [((300, 500, 200), 15, None), ((256, 700, 129), 8, 256),
                                                   ((64, 64, 64), None, None)])
def test_gpu_peak_within_the_plan_and_one_block(cupy_backend, scaling, shape, count, k_block, row_panels_at_any_size):
    """The counting allocator sees every CuPy allocation of a call that makes its plan: the peak stays within
    the plan, and the largest one is the workspace block itself (moduli given)."""
    m, k, n = shape
    A, B = (cupy_backend.asarray(x) for x in operands(m, k, n))
    scaling = scaling if count or scaling in ozaki2.AUTO_SCALINGS else "fast"     # fine takes a given count
    kw = dict(moduli=count or "auto", scaling=scaling, k_block=k_block, backend=cupy_backend)
    ozaki2.matmul(A, B, **kw)                               # kernels compiled, tables cached
    ozaki2.PLANS.clear()
    with cupy_backend.track_allocations() as report:
        ozaki2.matmul(A, B, **kw)
    direct = k_block is None or -(-k // 16) * 16 <= k_block
    assert report.peak_bytes <= memory.peak_bytes(cupy_backend, m, k, n, count, scaling, direct)
    if count:
        taken = memory.layouts(m, k, n, count, scaling, k_block_of(k_block))[0]
        assert max(report.sizes) == taken.nbytes and taken.direct is direct


def _occupy_cached_blocks(be):
    """Arrays over the blocks CuPy's pool still caches after ``release_memory``: free parts of chunks that live
    arrays split (earlier tests' module tables, say), which the pool serves within its limit. Without them a small
    device set as the bytes in use plus some room has that room and those blocks (the likely reason the full GPU
    run at ead3cf9 built the tiling test's whole plan). The pool is held to the bytes it has meanwhile, so that
    they, not the driver, serve the arrays."""
    pool, xp = be.xp.get_default_memory_pool(), be.xp
    if pool.free_bytes() < 512:
        return []
    limit, held = pool.get_limit(), []
    pool.set_limit(size=pool.total_bytes())
    try:
        size, tries = pool.free_bytes(), 0
        while size >= 512 and pool.free_bytes() >= 512 and tries < 4096:
            tries += 1
            try:
                held.append(xp.empty(size, dtype=np.uint8))
                size = pool.free_bytes()
            except xp.cuda.memory.OutOfMemoryError:
                size //= 2
    finally:
        pool.set_limit(size=limit)
    return held


def _device_operands(be, N, seed=1):
    A, B = operands(N, N, N, seed)
    return be.asarray(A), be.asarray(B), A, B


@pytest.mark.gpu
def test_gpu_fast_15_after_fast_14_on_a_small_device(cupy_backend, small_device):
    """The H200 sequence at N = 1024 under a pool limit that holds A, B, two outputs and fast-15's direct block
    with room for its headroom: fast-14 runs, then fast-15 (its block larger than the one fast-14 left cached)
    runs too, and both equal NumPy; the old memory check read the driver's free memory and the INT32 products
    then ran out of memory in the middle of the call."""
    N = 1024
    dA, dB, A, B = _device_operands(cupy_backend, N)
    block = ozaki2.workspace_bytes(N, N, N, 15, "fast", direct=True)
    small_device.set_limit(size=small_device.used_bytes() + 2 * 8 * N * N + int(block / 0.85) + 2**20)
    first = ozaki2.matmul(dA, dB, moduli=14, scaling="fast", backend=cupy_backend)
    second = ozaki2.matmul(dA, dB, moduli=15, scaling="fast", backend=cupy_backend)
    assert np.array_equal(cupy_backend.to_numpy(first), _reference(A, B, moduli=14, scaling="fast"))
    assert np.array_equal(cupy_backend.to_numpy(second), _reference(A, B, moduli=15, scaling="fast"))


@pytest.mark.gpu
def test_gpu_repeated_call_is_served_by_the_pool(cupy_backend, small_device):
    """A repeated call that fits takes its block and C from the pool's cache: the pool takes nothing more from
    the driver (the path with no wait for the device). The second call captures the graph, whose cuBLAS
    handle takes its own workspace once (:mod:`gpu.backend.stream_blas`)."""
    dA, dB, _, _ = _device_operands(cupy_backend, 512)
    for _ in range(2):
        ozaki2.matmul(dA, dB, moduli=15, scaling="fast", backend=cupy_backend)
    held = small_device.total_bytes()
    for _ in range(3):
        ozaki2.matmul(dA, dB, moduli=15, scaling="fast", backend=cupy_backend)
    assert small_device.total_bytes() == held


@pytest.mark.gpu
def test_gpu_small_device_tiles_or_refuses_before_any_work(cupy_backend, small_device):
    """Room for half the least whole workspace: the call runs in tiles, bitwise the untiled product (a count
    given, the fast scaling); a cap that not even the least tiles fit: MemoryPlanError before any work (the
    pool's limit cannot stand for that: free parts of chunks that live arrays split stay usable beyond it)."""
    N = 1024
    dA, dB, A, B = _device_operands(cupy_backend, N)
    planes = ozaki2.workspace_bytes(N, N, N, 15, "fast")
    ozaki2.matmul(dA, dB, moduli=15, scaling="fast", backend=cupy_backend)     # kernels compiled, tables cached
    free_kept_plans()
    cupy_backend.release_memory()                   # the free memory the tiles are cut to is one block
    holes = _occupy_cached_blocks(cupy_backend)
    small_device.set_limit(size=small_device.used_bytes() + 8 * N * N + planes // 2)
    got = ozaki2.matmul(dA, dB, moduli=15, scaling="fast", backend=cupy_backend)
    assert isinstance(next(reversed(ozaki2.PLANS._plans.values())), ozaki2.TiledPlan)
    assert np.array_equal(cupy_backend.to_numpy(got), _reference(A, B, moduli=15, scaling="fast"))
    del got
    out = cupy_backend.xp.full((N, N), 7.0)
    with pytest.raises(MemoryPlanError, match="even in tiles of 64 x 64"):
        ozaki2.matmul(dA, dB, moduli=15, scaling="fast", out=out, workspace=2**16, backend=cupy_backend)
    assert (cupy_backend.to_numpy(out) == 7.0).all(), "nothing written"
    del holes


@pytest.mark.gpu
def test_gpu_split_cached_blocks_are_not_one_block(cupy_backend, small_device):
    """A chunk split by a live array cannot be handed back to the driver: its free part serves what it holds,
    and a larger block is refused although memory_info counts the cached bytes as free. The unit U outsizes all
    free remnants earlier tests leave together, so only the 4 U chunk can hold the 3 U pin and serve."""
    xp, MiB = cupy_backend.xp, 2**20
    unit = max(256 * MiB, -(-(small_device.free_bytes() + 1) // MiB) * MiB)
    small_device.set_limit(size=small_device.total_bytes() + 4 * unit + 64 * MiB)
    big = xp.empty(4 * unit, dtype=np.uint8)
    del big
    pin = xp.empty(3 * unit, dtype=np.uint8)        # splits the cached 4 U chunk: no remnant holds 3 U
    assert cupy_backend.memory_info()[0] >= unit + 64 * MiB
    assert cupy_backend.can_allocate(unit * 4 // 5)
    assert not cupy_backend.can_allocate(unit * 6 // 5)
    with pytest.raises(MemoryPlanError, match="not in one block"):
        require_memory(cupy_backend, unit * 6 // 5, "a workspace", "free memory")
    del pin
