"""The out-of-core engine (``gpu.outofcore``): the plan's invariants and model, the one schedule on NumPy
(odd shapes, odd blocks and panels, fringes, layouts, float32), ``out`` and the inputs, and the refusals
before any work; the same products on CuPy where a GPU is usable."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.backend import MemoryPlanError, get_backend
from gpu.outofcore import ALIGN, OutOfCorePlan, flops, matmul, plan, predict, run, traffic_bytes
from gpu.outofcore import api as outofcore_api
from gpu.outofcore import ops as outofcore_ops

U = {np.dtype(np.float64): 2.0**-53, np.dtype(np.float32): 2.0**-24}


def operands(m, k, n, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)


def assert_product(got, A, B):
    """|C - A B| <= gamma_(k+2) |A| |B| entry by entry, whatever order the k products add up in: a missed,
    repeated or misplaced panel or block gives errors of the size of the entries."""
    a, b = A.astype(np.longdouble), B.astype(np.longdouble)
    nu = (A.shape[1] + 2) * U[np.dtype(got.dtype)]
    err = np.abs(got.astype(np.longdouble) - a @ b)
    assert got.shape == (A.shape[0], B.shape[1]) and got.dtype == A.dtype
    assert np.all(err <= nu / (1 - nu) * (np.abs(a) @ np.abs(b))), float(err.max())


# --- the engine on NumPy ---------------------------------------------------------------------------

@pytest.mark.parametrize("block,panel,buffers,c_buffers", [
    ((7, 5), 3, 2, 1),           # fringe blocks along both sides and a fringe panel (53 = 17 x 3 + 2)
    ((7, 5), 3, 3, 2),           # triple buffering, two C buffers
    ((7, 5), 100, 2, 1),         # a panel wider than k
    ((50, 40), 17, 2, 2),        # a block larger than C (one block)
    (11, 1, 2, 1),               # a square block, one-column panels
    (None, None, 2, 1),          # the plan's own choice
])
def test_the_product_equals_a_at_b_on_odd_shapes_blocks_and_panels(block, panel, buffers, c_buffers):
    A, B = operands(37, 53, 29)
    assert_product(matmul(A, B, block=block, panel=panel, buffers=buffers, c_buffers=c_buffers, backend="numpy"),
                   A, B)


def _layout(X, how):
    """X as a row-major array ("C"), a column-major one ("F"), or a view with a leading dimension beyond
    its width inside a larger array ("V"), holding the same values."""
    if how == "C":
        return X.copy()
    if how == "F":
        return np.asfortranarray(X)
    big = np.full((X.shape[0] + 3, X.shape[1] + 6), 7.0, dtype=X.dtype)
    big[2:2 + X.shape[0], 3:3 + X.shape[1]] = X
    return big[2:2 + X.shape[0], 3:3 + X.shape[1]]


@pytest.mark.parametrize("la,lb,lc", [("F", "F", "F"), ("V", "F", "V"), ("F", "V", "C"), ("V", "V", "F")])
def test_layouts_of_a_b_and_out_are_honoured_and_nothing_else_is_written(la, lb, lc):
    A0, B0 = operands(23, 31, 19, seed=1)
    A, B = _layout(A0, la), _layout(B0, lb)
    host = np.full((30, 30), np.nan)
    out = {"C": np.full((23, 19), np.nan), "F": np.full((23, 19), np.nan, order="F"),
           "V": host[4:27, 5:24]}[lc]
    bases = [x.base if x.base is not None else x for x in (A, B)]
    before = [x.copy() for x in bases]
    got = matmul(A, B, out=out, block=(6, 4), panel=5, backend="numpy")
    assert got is out
    assert_product(got, A0, B0)
    assert all(np.array_equal(x, y) for x, y in zip(bases, before)), "an input (or the array around it) changed"
    if lc == "V":
        outside = np.ones(host.shape, bool)
        outside[4:27, 5:24] = False
        assert np.isnan(host[outside]).all(), "matmul wrote outside out"


def test_float32_and_a_transposed_view():
    A, B = operands(40, 70, 33, seed=2, dtype=np.float32)
    At = np.ascontiguousarray(A.T).T
    assert_product(matmul(At, B, block=(16, 8), panel=9, backend="numpy"), A, B)


def test_the_staging_copy_cut_into_bands_by_threads(monkeypatch):
    monkeypatch.setattr(outofcore_ops, "MIN_BAND_BYTES", 1)
    pool = outofcore_ops.ThreadPoolExecutor(3)
    src = np.arange(20 * 30, dtype=np.float64).reshape(20, 30)[1:18:, 2:29]
    for order in ("C", "F"):
        dst = outofcore_ops.packed(np.empty(src.size), src.shape, order)
        outofcore_ops.stage(pool, dst, src, bands=4)
        assert np.array_equal(dst, src)
    A, B = operands(45, 20, 37, seed=3)
    assert_product(matmul(A, B, block=(20, 30), panel=8, backend="numpy"), A, B)


def test_an_empty_inner_dimension_gives_zeros_and_empty_outputs_return():
    out = np.full((4, 3), np.nan)
    assert matmul(np.ones((4, 0)), np.ones((0, 3)), out=out, backend="numpy") is out
    assert np.array_equal(out, np.zeros((4, 3)))
    assert matmul(np.ones((0, 5)), np.ones((5, 3)), backend="numpy").shape == (0, 3)


class _Failing:
    """Operations that fail at the second product and record whether they were released."""

    def __init__(self):
        self.calls, self.released = [], False

    def begin(self, *args):
        self.calls.append("begin")

    def load(self, slot, a, b):
        self.calls.append(("load", slot, a.shape, b.shape))

    def multiply(self, slot, c_slot, first, strip=None):
        if len([c for c in self.calls if c[0] == "multiply"]) == 1:
            raise RuntimeError("device lost")
        self.calls.append(("multiply", slot, c_slot, first))

    def release(self):
        self.released = True


def test_the_executor_releases_the_operations_on_error():
    A, B = operands(10, 9, 8)
    ops, C = _Failing(), np.empty((10, 8))
    with pytest.raises(RuntimeError, match="device lost"):
        run(get_backend("numpy"), ops, plan(10, 9, 8, 8, device_memory=10**6, block=(4, 8), panel=4), A, B, C)
    assert ops.released and ops.calls == ["begin", ("load", 0, (4, 4), (4, 8)), ("multiply", 0, 0, True),
                                          ("load", 1, (4, 4), (4, 8))]


# --- the plan --------------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(m=st.integers(0, 90), k=st.integers(0, 90), n=st.integers(0, 90), itemsize=st.sampled_from([4, 8]),
       memory=st.integers(1, 2**17), block=st.none() | st.integers(1, 100) | st.tuples(st.integers(1, 100),
                                                                                        st.integers(1, 100)),
       panel=st.none() | st.integers(1, 100), buffers=st.sampled_from([2, 3]), c_buffers=st.sampled_from([1, 2]),
       rates=st.booleans())
def test_plans_tile_c_and_k_exactly_once_and_fit(m, k, n, itemsize, memory, block, panel, buffers, c_buffers, rates):
    model = {"link_bytes_per_s": 55e9, "gemm_flops_per_s": 60e12} if rates else {}
    try:
        p = plan(m, k, n, itemsize, device_memory=memory, block=block, panel=panel, buffers=buffers,
                 c_buffers=c_buffers, **model)
    except MemoryPlanError as exc:
        need = int(str(exc).split(" needs ")[1].split(" bytes")[0])
        assert need > memory
        return
    assert p.device_bytes <= memory
    assert 1 <= p.block[0] <= max(m, 1) and 1 <= p.block[1] <= max(n, 1) and 1 <= p.panel <= max(k, 1)
    if block is None:
        assert p.block[0] >= min(ALIGN, m) and p.block[1] >= min(ALIGN, n)
    check_schedule(p, m, k, n)


def check_schedule(p, m, k, n):
    """Every (row, column, k) term is multiplied once, beta = 0 on an element's first term only, every element
    stored once after its last term; loads fill the slots in turn, and a step multiplies the panel its slot
    holds; C buffers go to the blocks in turn."""
    terms, stored, slots = np.zeros((m, n, k), int), np.zeros((m, n), int), {}
    steps = list(p.steps())
    loads = [s.slot for s in steps if s.load]
    assert loads == [i % p.buffers for i in range(len(loads))]
    for s in steps:
        rows = range(m)[s.rows][s.strip or slice(None)]
        rows = slice(rows.start, rows.stop)
        if s.load:
            slots[s.slot] = (s.rows, s.cols, s.panel)
        assert slots[s.slot] == (s.rows, s.cols, s.panel), "a step multiplies a panel its slot no longer holds"
        assert (terms[rows, s.cols].sum(axis=2) == 0).all() == s.first or not terms[rows, s.cols].size
        terms[rows, s.cols, s.panel] += 1
        if s.last:
            assert (terms[rows, s.cols].sum(axis=2) == k).all(), "stored before its last term"
            stored[rows, s.cols] += 1
    assert (terms == 1).all() and (stored == (1 if k else 0)).all()
    assert all(s.c_slot == 0 for s in steps) or p.c_buffers == 2


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 10**6), k=st.integers(1, 10**6), n=st.integers(1, 10**6), memory=st.integers(10**6, 10**11),
       buffers=st.sampled_from([2, 3]), c_buffers=st.sampled_from([1, 2]), rates=st.booleans())
def test_large_auto_plans_fit_with_aligned_even_blocks(m, k, n, memory, buffers, c_buffers, rates):
    model = {"link_bytes_per_s": 55e9, "gemm_flops_per_s": 60e12, "hbm_bytes_per_s": 3e12} if rates else {}
    try:
        p = plan(m, k, n, 8, device_memory=memory, buffers=buffers, c_buffers=c_buffers, **model)
    except MemoryPlanError as exc:
        assert int(str(exc).split(" needs ")[1].split(" bytes")[0]) > memory
        return
    assert p.device_bytes <= memory and p.panel <= k
    for side, dim in zip(p.block, (m, n)):
        assert side == dim or side % ALIGN == 0 or side == -(-dim // -(-dim // side))     # aligned, or an even split


def test_the_auto_block_is_the_largest_that_fits_evened_out_over_the_grid():
    p = plan(65536, 65536, 65536, 8, device_memory=40 * 10**9)     # room for a side of 62464: two blocks per side
    assert (p.block, p.panel, p.grid) == ((32768, 32768), 4096, (2, 2))
    assert plan(65536, 65536, 65536, 8, device_memory=72 * 10**9).block == (65536, 65536)
    assert plan(2305, 1, 119, 8, device_memory=10**6, buffers=3).block == (769, 119)   # 3 even rows, not 4 of 768
    thin = plan(300, 10**6, 10**6, 8, device_memory=10**9)         # m capped: the columns take the rest
    assert thin.block == (300, 14336) and thin.device_bytes <= 10**9
    assert 8 * (300 * (14336 + ALIGN) + 2 * 4096 * (300 + 14336 + ALIGN)) > 10**9


def test_traffic_and_flops_count_what_the_schedule_moves():
    p = plan(37, 53, 29, 8, device_memory=10**6, block=(7, 5), panel=3)
    moved = sum((s.rows.stop - s.rows.start + s.cols.stop - s.cols.start) * (s.panel.stop - s.panel.start)
                for s in p.steps())
    assert traffic_bytes(p) == 8 * (moved + 37 * 29) and flops(p) == 2 * 37 * 53 * 29
    big = OutOfCorePlan(65536, 65536, 65536, 8, (32768, 32768), 4096)
    assert flops(big) / traffic_bytes(big) == pytest.approx(32768 / 8 * 4 / 5)    # b/8, less C's write-back


def test_the_copies_hide_where_the_block_reaches_s_f_over_l():
    # FP64 at 60 TFLOP/s over 55 GB/s: b >= 8 x 60e12 / 55e9 = 8727 (the rule of thumb's "roughly 9,000").
    hidden = [predict(OutOfCorePlan(10**5, 10**5, 10**5, 8, (b, b), 4096), 55e9, 60e12).hidden for b in (8192, 9216)]
    assert hidden == [False, True]


def test_with_rates_the_model_picks_a_plan_that_it_predicts_no_slower_than_the_default():
    rates = (55e9, 60e12, 3.35e12)
    for side in (16384, 65536):
        auto = plan(side, side, side, 8, device_memory=72 * 10**9, c_buffers=2, link_bytes_per_s=rates[0],
                    gemm_flops_per_s=rates[1], hbm_bytes_per_s=rates[2])
        default = plan(side, side, side, 8, device_memory=72 * 10**9, c_buffers=2)
        assert auto.device_bytes <= 72 * 10**9
        assert predict(auto, *rates).seconds <= predict(default, *rates).seconds


# --- refusals, before any work ---------------------------------------------------------------------

def test_too_little_device_memory_is_refused_with_the_bytes_needed():
    A, B = operands(1000, 1000, 1000)
    need = 8 * (256 * 256 + 2 * 256 * (256 + 256))                   # the smallest block, 256-wide panels
    with pytest.raises(MemoryPlanError, match=rf"needs {need} bytes .* device_memory is {need - 1} bytes: pass a "
                                              "larger device_memory"):
        matmul(A, B, device_memory=need - 1, backend="numpy")
    with pytest.raises(MemoryPlanError, match="smaller block= or panel="):
        plan(1000, 1000, 1000, 8, device_memory=10**6, block=500, panel=100)
    with pytest.raises(MemoryPlanError, match="buffers=2, or c_buffers=1"):
        plan(1000, 1000, 1000, 8, device_memory=10**5, buffers=3, c_buffers=2)


def test_too_little_host_memory_is_refused(monkeypatch):
    host = get_backend("numpy")
    monkeypatch.setattr(host, "memory_info", lambda: (10**6, 10**9))
    A, B = operands(300, 300, 300)
    with pytest.raises(MemoryPlanError, match="staging buffers, out"):
        matmul(A, B, block=100, panel=50, device_memory=600_000, backend="numpy", staging="pinned")
    monkeypatch.setattr(host, "memory_info", lambda: (300 * 300 * 8 - 1, 10**9))
    with pytest.raises(MemoryPlanError, match="out"):
        matmul(A, B, block=100, panel=50, device_memory=600_000, backend="numpy")
    np.testing.assert_allclose(matmul(A, B, block=100, panel=50, device_memory=600_000, backend="numpy",
                                      out=np.empty((300, 300))), A @ B, rtol=1e-12, atol=1e-12)


def test_the_default_device_memory_leaves_room_for_out_and_the_staging(monkeypatch):
    host, seen = get_backend("numpy"), {}
    monkeypatch.setattr(host, "memory_info", lambda: (8 * 10**6, 10**9))
    real = outofcore_api.plan

    def spy(*args, **kwargs):
        seen["memory"] = kwargs["device_memory"]
        return real(*args, **kwargs)

    monkeypatch.setattr(outofcore_api, "plan", spy)
    outofcore_api.PLANS.clear()                      # a plan kept from another test would not decide again
    A, B = operands(300, 300, 300)
    assert_product(matmul(A, B, backend="numpy", staging="pinned"), A, B)
    free = 8 * 10**6 - 300 * 300 * 8                 # less the new out; "device" buffers and staging halve the rest
    assert seen["memory"] == int(free // 2 * outofcore_api.HEADROOM)


class _DeviceArray:
    """Stands for a CuPy array: what the engine recognises a device array by."""

    __cuda_array_interface__ = {"shape": (3, 3), "typestr": "<f8", "data": (0, False), "version": 3}
    shape, dtype = (3, 3), np.dtype(np.float64)


@pytest.mark.parametrize("case,error,match", [
    ("int", TypeError, "dtype int64 is not supported"),
    ("mixed", TypeError, "share one dtype"),
    ("shape", ValueError, "A's columns must equal B's rows"),
    ("nan", ValueError, "A contains NaN"),
    ("device", TypeError, "B is a device array"),
    ("device out", TypeError, "out is a device array"),
    ("out shape", ValueError, "out has shape"),
    ("out overlaps", ValueError, "out overlaps A"),
    ("strides", ValueError, "BLAS needs unit stride"),
    ("buffers", ValueError, "buffers must be 2"),
    ("block", ValueError, "block must be"),
    ("panel", ValueError, "panel must be"),
    ("memory", ValueError, "device_memory must be"),
])
def test_bad_calls_are_refused_before_any_work(case, error, match):
    A, B = operands(6, 5, 4)
    out = np.full((6, 4), 3.0)
    args, kwargs = [A, B], {"out": out, "backend": "numpy"}
    if case == "int":
        args = [np.ones((6, 5), int), np.ones((5, 4), int)]
    elif case == "mixed":
        args[1] = B.astype(np.float32)
    elif case == "shape":
        args[1] = np.ones((6, 4))
    elif case == "nan":
        kwargs["check_finite"] = True
        args[0] = A.copy()
        args[0][2, 3] = np.nan
    elif case == "device":
        args[1] = _DeviceArray()
    elif case == "device out":
        kwargs["out"] = _DeviceArray()
    elif case == "out shape":
        kwargs["out"] = np.empty((4, 6))
    elif case == "out overlaps":
        big = np.zeros((6, 9))
        big[:, :5] = A
        args[0], kwargs["out"] = big[:, :5], big[:, 3:7]
        out = big[:, 3:7]
    elif case == "strides":
        args[0] = np.ones((12, 10))[::2, ::2]
    else:
        kwargs[{"buffers": "buffers", "block": "block", "panel": "panel", "memory": "device_memory"}[case]] = 0
    snapshot = out.copy()
    with pytest.raises(error, match=match):
        matmul(*args, **kwargs)
    assert np.array_equal(out, snapshot), "out was written before the refusal"


def test_check_finite_false_lets_nan_flow_through_its_rows():
    A, B = operands(9, 8, 7)
    A[4, 2] = np.nan
    C = matmul(A, B, check_finite=False, block=(3, 3), panel=3, backend="numpy")
    assert np.isnan(C[4]).all() and np.isfinite(np.delete(C, 4, axis=0)).all()


# --- on the GPU ------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("block,panel,buffers,c_buffers", [((7, 5), 3, 2, 1), ((64, 48), 40, 3, 2), (None, None, 2, 1)])
def test_the_gpu_product_equals_a_at_b(cupy_backend, block, panel, buffers, c_buffers):
    A, B = operands(137, 253, 129, seed=4)
    out = np.full((129, 137), np.nan).T                  # a column-major view: the write-back honours its layout
    got = matmul(np.asfortranarray(A), B, out=out, block=block, panel=panel, buffers=buffers, c_buffers=c_buffers,
                 backend=cupy_backend)
    assert got is out
    assert_product(got, A, B)


@pytest.mark.gpu
def test_the_gpu_engine_splits_a_product_larger_than_its_memory_budget(cupy_backend):
    A, B = operands(1100, 700, 900, seed=5)
    p = plan(1100, 700, 900, 8, device_memory=4 * 2**20)
    assert p.grid[0] * p.grid[1] > 1
    assert_product(matmul(A, B, device_memory=4 * 2**20, backend=cupy_backend), A, B)
    with pytest.raises(TypeError, match="A is a device array"):
        matmul(cupy_backend.asarray(A), B, backend=cupy_backend)


@pytest.mark.gpu
def test_the_gpu_time_line_has_every_step_and_copies_under_products(cupy_backend):
    from gpu.outofcore import LANES, Timeline

    A, B = operands(1024, 700, 768, seed=6)
    p = plan(1024, 700, 768, 8, device_memory=10**9, block=(512, 384), panel=256, buffers=3, c_buffers=2)
    C, line = np.empty((1024, 768)), Timeline()
    run(cupy_backend, cupy_backend.ops("outofcore"), p, A, B, C, line)
    assert_product(C, A, B)
    spans, steps = line.spans(), len(list(p.steps()))
    count = {lane: sum(s.lane == lane for s in spans) for lane in LANES}
    loads, stores = sum(s.load for s in p.steps()), sum(s.last for s in p.steps())
    assert count == {"mapping": 0, "locking": 0, "staging": 2 * loads, "H2D": 2 * loads, "GEMM": steps,
                     "D2H": stores, "placement": stores}
    assert all(0 <= s.start <= s.end < 60 for s in spans)
    first_gemm = min(s.start for s in spans if s.lane == "GEMM")
    assert first_gemm >= sorted(s.end for s in spans if s.lane == "H2D")[1] - 1e-6, "a GEMM ran before its panels"

