"""The segmented launcher (``gpu.segmented``): the accessor formulas against brute force, the launch geometry
of ``modeling.decomposition`` plans, the refusals before any work, and the products of every plan: on NumPy
through the emulation (the same formulas, geometry and schedule), on CuPy through the CUDA kernel."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.backend import MemoryPlanError
from gpu.segmented import (
    ACCESSORS,
    Accessor,
    Segment,
    device_bytes,
    index_type,
    kernel_source,
    launches,
    segmented_matmul,
    translated_matmul,
    whole_launch,
    whole_matmul,
)
from gpu.segmented import launcher as seg_launcher
from gpu.segmented import source as seg_source
from modeling.decomposition import Task, plan_segments

U = {np.dtype(np.float64): 2.0**-53, np.dtype(np.float32): 2.0**-24}
#: Plans of the product tests: (N, tile) and (2-D, M); N = 96 in tiles of 16 so that 1-D M = 4 fits.
SIZES = ((96, 16), (256, 32))
PLANS = ((False, 1), (False, 3), (False, 4), (True, 1), (True, 4), (True, 9))


def operands(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, n)).astype(dtype), rng.uniform(-1, 1, (n, n)).astype(dtype)


def assert_product(got, A, B):
    """|C - A B| <= gamma_(k+2) |A| |B| entry by entry, against an extended-precision reference: a task run
    twice or never, a misplaced segment or a wrong translation gives errors the size of the entries."""
    got = np.asarray(got)
    a, b = A.astype(np.longdouble), B.astype(np.longdouble)
    nu = (A.shape[1] + 2) * U[np.dtype(got.dtype)]
    err = np.abs(got.astype(np.longdouble) - a @ b)
    assert got.shape == (A.shape[0], B.shape[1]) and got.dtype == A.dtype
    assert np.all(err <= nu / (1 - nu) * (np.abs(a) @ np.abs(b))), float(err.max())


# --- the accessors -------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), data=st.data())
def test_translation_maps_every_element_of_a_segment_to_its_packed_place(n, data):
    r0, r1 = sorted(data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2)))
    c0, c1 = sorted(data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2)))
    rows, cols = np.mgrid[r0:r1 + 1, c0:c1 + 1]
    width = c1 - c0 + 1
    got = ACCESSORS["translated"].evaluate(rows * n + cols, n, c0, r0, width)
    assert np.array_equal(got, (rows - r0) * width + (cols - c0))
    assert ACCESSORS["translated"].evaluate(int(r1 * n + c1), n, c0, r0, width) == (r1 - r0) * width + c1 - c0
    assert np.array_equal(ACCESSORS["whole"].evaluate(rows * n + cols, n), rows * n + cols)


def test_the_c_macro_is_the_same_formula():
    t = ACCESSORS["translated"]
    assert t.c_macro("a") == "#define A_AT(f) A[((f) % n - a_ox) + ((f) / n - a_oy) * a_u]"
    assert ACCESSORS["whole"].c_macro("c") == "#define C_AT(f) C[(f)]"
    rng = np.random.default_rng(1)
    for _ in range(100):           # the C text read with C's integer semantics on non-negative operands
        n = int(rng.integers(1, 500))
        f, ox, oy, u = (int(v) for v in rng.integers(0, n, 4))
        f = f * n + ox
        c = eval(t.c_expression("a").replace("/", "//"), {}, {"f": f, "n": n, "a_ox": ox, "a_oy": oy, "a_u": u})
        assert c == t.evaluate(f, n, ox, oy, u)
    with pytest.raises(ValueError, match="unknown names"):
        Accessor("bad", "f + K", "")


@pytest.mark.parametrize("mode", list(ACCESSORS))
@pytest.mark.parametrize("dtype,ctype", [(np.float32, "float"), (np.float64, "double")])
def test_every_mode_shares_one_kernel_body(mode, dtype, ctype):
    src = kernel_source(mode, dtype, index_type(96), 16)
    assert src.endswith(seg_source.SOURCE) and f"typedef {ctype} real;" in src and "#define TILE 16" in src
    assert src.count("_AT(f) ") == 3 and "typedef int index_t;" in src
    assert "long long index_t" in kernel_source(mode, dtype, "long long")
    with pytest.raises(ValueError, match="unknown access mode"):
        kernel_source("strided", dtype)
    with pytest.raises(TypeError, match="float32 or float64"):
        kernel_source(mode, np.int32)


def test_indices_are_32_bit_while_n_squared_fits():
    assert index_type(46340) == "int" and index_type(46341) == "long long"


# --- launch geometry -----------------------------------------------------------------------------------

def test_1d_launches_run_block_rows_with_row_panels_of_a_and_c_and_all_of_b():
    found = launches(plan_segments(96, 3, two_d=False, tile=32).tasks, 96, 32)
    assert [(ln.grid, ln.by0, ln.bx0) for ln in found] == [((3, 1), j, 0) for j in range(3)]
    for j, ln in enumerate(found):
        assert (ln.a.origin, ln.b.origin, ln.c.origin) == ((0, 32 * j, 96), (0, 0, 96), (0, 32 * j, 96))
        assert ln.arguments() == (96, j, 0, 0, 32 * j, 96, 0, 0, 96, 0, 32 * j, 96) and ln.block == (32, 32)


def test_2d_launches_run_c_tiles_with_a_row_panel_and_a_column_panel():
    found = launches(plan_segments(256, 4, two_d=True, tile=32).tasks, 256, 32)
    assert [(ln.grid, ln.by0, ln.bx0) for ln in found] == [((4, 4), 4 * i, 4 * j) for i in (0, 1) for j in (0, 1)]
    for ln in found:
        i, j = ln.by0 // 4, ln.bx0 // 4
        assert ln.a == Segment((128 * i, 128 * i + 127), (0, 255)) and ln.a.origin == (0, 128 * i, 256)
        assert ln.b == Segment((0, 255), (128 * j, 128 * j + 127)) and ln.b.origin == (128 * j, 0, 128)
        assert ln.c.origin == (128 * j, 128 * i, 128) and (ln.rows, ln.cols) == (ln.c.rows, ln.c.cols)


@pytest.mark.parametrize("n,tile,two_d,m", [(96, 32, False, 1), (160, 32, False, 4), (160, 16, True, 9),
                                            (512, 32, True, 16), (512, 32, False, 7)])
def test_plans_cover_the_grid_once_and_their_buffers_hold_the_largest_task(n, tile, two_d, m):
    plan = plan_segments(n, m, two_d, tile, 8)
    found = launches(plan.tasks, n, tile)
    assert sum(ln.grid[0] * ln.grid[1] for ln in found) == (n // tile) ** 2
    assert device_bytes(found, 1, 8) >= plan.max_bytes and device_bytes(found, 2, 8) == 2 * device_bytes(found, 1, 8)
    whole = whole_launch(n, tile)
    assert whole.grid == (n // tile, n // tile) and whole.a.origin == (0, 0, n) and whole.a.size == n * n


# --- refusals before any work --------------------------------------------------------------------------

@pytest.fixture
def no_work(monkeypatch):
    """The executor, replaced by one that fails: a refusal must come before any work."""
    def fail(*args, **kwargs):
        raise AssertionError("work started before the refusal")
    monkeypatch.setattr(seg_launcher, "run", fail)
    monkeypatch.setattr(seg_launcher, "run_device", fail)


def task(by, bx, a, b, c):
    return Task((by, bx), a, b, c)


def tasks_2d(n=64, tile=32):
    return list(plan_segments(n, 4, True, tile).tasks)


@pytest.mark.parametrize("tasks,message", [
    ([], "no tasks"),
    (tasks_2d()[:3], r"no task runs C tile \(1, 1\)"),
    ([*tasks_2d(), tasks_2d()[2]], r"tasks 2 and 4 both run C tile \(1, 0\)"),
    ([task((0, 1), (0, 1), ((0, 63), (0, 63)), ((0, 63), (0, 63)), ((0, 63), (0, 63))),
      task((1, 1), (0, 1), ((0, 63), (0, 63)), ((0, 63), (0, 63)), ((0, 63), (0, 63)))], "both run C tile"),
    ([task((0, 2), (0, 1), ((0, 63),) * 2, ((0, 63),) * 2, ((0, 63),) * 2)], "outside the 2 x 2 grid"),
    ([task((0, 1), (0, 1), ((0, 63), (0, 62)), ((0, 63),) * 2, ((0, 63),) * 2)],
     r"A segment \(rows 0..63 x cols 0..62\) does not hold rows 0..63 x cols 0..63"),
    ([task((0, 1), (0, 1), ((0, 63),) * 2, ((1, 63), (0, 63)), ((0, 63),) * 2)], "B segment"),
    ([task((0, 1), (0, 1), ((0, 63),) * 2, ((0, 63),) * 2, ((0, 31), (0, 63)))], "C segment"),
    ([task((0, 1), (0, 1), ((0, 64), (0, 63)), ((0, 63),) * 2, ((0, 63),) * 2)], "leaves the 64 x 64 matrix"),
    ([task((1, 0), (0, 1), ((0, 63),) * 2, ((0, 63),) * 2, ((0, 63),) * 2)], "runs backwards"),
    (["not a task"], "a task has .blocks"),
])
def test_bad_tasks_are_refused_before_any_work(no_work, tasks, message):
    A, B = operands(64, np.float64)
    with pytest.raises((ValueError, TypeError), match=message):
        segmented_matmul(A, B, tasks, backend="numpy")


def test_a_segment_missing_a_blocks_rows_is_refused_for_that_task(no_work):
    tasks = tasks_2d(128)
    t = tasks[3]
    tasks[3] = Task(t.blocks, ((t.a[0][0] + 32, t.a[0][1]), t.a[1]), t.b, t.c)
    with pytest.raises(ValueError, match="task 3's A segment"):
        segmented_matmul(*operands(128, np.float32), tasks, backend="numpy")


@pytest.mark.parametrize("shapes,tile,message", [
    (((64, 32), (32, 64)), 32, "square matrices of one size"),
    (((64, 64), (64, 32)), 32, "square matrices of one size"),
    (((48, 48), (48, 48)), 32, "N = 48 is not a positive multiple of the tile 32: .* pad to 64"),
    (((64, 64), (64, 64)), 33, "tile side must be an integer from 1 to 32"),
])
def test_bad_shapes_and_tiles_are_refused_before_any_work(no_work, shapes, tile, message):
    A, B = (np.ones(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        segmented_matmul(A, B, tasks_2d(), tile=tile, backend="numpy")
    with pytest.raises(ValueError, match=message):
        whole_matmul(A, B, tile=tile, backend="numpy")


def test_bad_operands_and_arguments_are_refused_before_any_work(no_work):
    A, B = operands(64, np.float64)
    tasks = tasks_2d()
    for bad, message in ((np.nan, "A contains NaN"), (np.inf, "A contains NaN or infinity")):
        X = A.copy()
        X[5, 7] = bad
        with pytest.raises(ValueError, match=message):
            segmented_matmul(X, B, tasks, backend="numpy", check_finite=True)
        with pytest.raises(ValueError, match=message):
            translated_matmul(X, B, backend="numpy", check_finite=True)
    with pytest.raises(TypeError, match="float32 or float64"):
        segmented_matmul(A.astype(np.int64), B.astype(np.int64), tasks, backend="numpy")
    with pytest.raises(TypeError, match="share one dtype"):
        segmented_matmul(A, B.astype(np.float32), tasks, backend="numpy")
    with pytest.raises(ValueError, match="buffers must be a positive integer"):
        segmented_matmul(A, B, tasks, buffers=0, backend="numpy")
    with pytest.raises(ValueError, match="out overlaps A"):
        segmented_matmul(A, B, tasks, out=A, backend="numpy")
    with pytest.raises(ValueError, match="C-contiguous"):
        whole_matmul(np.asfortranarray(A), B, backend="numpy")


def test_a_task_too_large_for_the_device_is_refused_with_the_way_out(no_work):
    A, B = operands(256, np.float32)
    one_d = plan_segments(256, 4, False, 32, 4)
    need = device_bytes(launches(one_d.tasks, 256, 32), 2, 4)
    assert need == 2 * one_d.max_bytes == 2 * 4 * 256 * 256 * 6 // 4
    with pytest.raises(MemoryPlanError, match="needs 0.00 GiB but device_memory is .*more segments .* 2-D blocks"):
        segmented_matmul(A, B, one_d.tasks, device_memory=need - 1, backend="numpy")
    two_d = plan_segments(256, 16, True, 32, 4)
    assert device_bytes(launches(two_d.tasks, 256, 32), 2, 4) < need      # the way out fits
    with pytest.raises(ValueError, match="device_memory must be a positive number"):
        segmented_matmul(A, B, one_d.tasks, device_memory=0, backend="numpy")


# --- products: NumPy (the emulation) and CuPy (the kernel) ---------------------------------------------

def host(be, x):
    return np.array(be.to_numpy(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,tile", SIZES)
def test_whole_and_translated_kernels_give_the_product(backend, n, tile, dtype):
    A, B = operands(n, dtype, seed=n)
    dA, dB = backend.asarray(A), backend.asarray(B)
    for fn in (whole_matmul, translated_matmul):
        assert_product(host(backend, fn(dA, dB, tile=tile, backend=backend)), A, B)
        out = backend.xp.full((n, n), np.nan, dtype=dtype)
        assert fn(dA, dB, out=out, tile=tile, backend=backend) is out
        assert_product(host(backend, out), A, B)
    assert np.array_equal(host(backend, dA), A) and np.array_equal(host(backend, dB), B)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("two_d,m", PLANS)
@pytest.mark.parametrize("n,tile", SIZES)
def test_every_plan_gives_the_product_and_leaves_the_inputs(backend, n, tile, two_d, m, dtype):
    A, B = operands(n, dtype, seed=m)
    A0, B0 = A.copy(), B.copy()
    tasks = plan_segments(n, m, two_d, tile, np.dtype(dtype).itemsize).tasks
    out = np.full((n, n), np.nan, dtype=dtype)
    assert segmented_matmul(A, B, tasks, out=out, tile=tile, backend=backend) is out
    assert_product(out, A, B)
    assert np.array_equal(A, A0) and np.array_equal(B, B0)


@pytest.mark.parametrize("buffers", [1, 3])
def test_any_number_of_buffers_and_strided_inputs(backend, buffers):
    A, B = operands(128, np.float64, seed=3)
    big = np.zeros((130, 140))
    big[1:129, 5:133] = A
    view = big[1:129, 5:133]
    tasks = plan_segments(128, 9, True, 32, 8).tasks
    assert_product(segmented_matmul(view, np.asfortranarray(B), tasks, buffers=buffers, backend=backend), A, B)


def test_64_bit_indices_give_the_same_product(backend, monkeypatch):
    monkeypatch.setattr(seg_source, "INT32_ELEMENTS", 0)
    assert index_type(96) == "long long"
    A, B = operands(96, np.float32, seed=5)
    assert_product(segmented_matmul(A, B, plan_segments(96, 4, True, 16, 4).tasks, tile=16, backend=backend), A, B)
    assert_product(host(backend, translated_matmul(A, B, tile=32, backend=backend)), A, B)


def test_a_wrong_translation_is_caught_by_the_emulation(monkeypatch):
    """The tests can fail: an accessor that forgets the row origin reads outside its segment."""
    monkeypatch.setitem(ACCESSORS, "translated", Accessor("translated", "(f % N - OX) + (f // N) * U", "wrong"))
    A, B = operands(96, np.float64)
    with pytest.raises(IndexError, match="outside the segment"):
        segmented_matmul(A, B, plan_segments(96, 3, False, 32).tasks, backend="numpy")
    assert_product(translated_matmul(A, B, backend="numpy"), A, B)      # origin 0: the bug is invisible there
