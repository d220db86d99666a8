"""Flat Strassen levels (``matmul(flat=True)``, :mod:`gpu.strassen.flat`): which schedules can run
flat, the programs' shape read from the table, bitwise equality with the recursive product, the
memory model against the stacks the executor really makes, the argument checks, and on CuPy the
generated kernels bitwise equal to the recursive fused product, in a CUDA graph too."""

import numpy as np
import pytest

from gpu.backend import get_backend
from gpu.strassen import Executor, matmul, strassen_memory, total_launches
from gpu.strassen.flat import FAMILY, flat_blocker, flat_plan
from gpu.strassen.schedules import SCHEDULES


def operands(be, m, k, n, seed=1, order="C", dtype=np.float64):
    rng = np.random.default_rng(seed)
    A, B = (np.asarray(rng.uniform(-1, 1, s), dtype=dtype, order=order) for s in ((m, k), (k, n)))
    return be.asarray(A), be.asarray(B)


def test_only_tables_of_sums_then_products_then_outputs_run_flat():
    flat = {name for name in SCHEDULES if flat_blocker(name) is None}
    assert flat == {"winograd", "lai7"}
    assert "support" in flat_blocker("rum")
    assert "one run" in flat_blocker("winograd2")            # sums and outputs between its products
    with pytest.raises(ValueError, match="cannot run flat.*schedule='winograd'"):
        flat_plan("lai", 2)


@pytest.mark.parametrize("level,sums,loads", [(1, 4, 4), (2, 40, 16), (3, 316, 64)])
def test_programs_read_every_block_once_and_store_each_sum_once(level, sums, loads):
    plan = flat_plan("winograd", level)
    assert plan.stacked == (sums, sums, 7**level)
    for side in (plan.a, plan.b):
        assert len(side.loads) == loads == len({at for _, at in side.loads})
        assert sorted(at for _, at in side.stores) == [(k, 0) for k in range(sums)]
    assert len(plan.c.loads) == 7**level and len(plan.c.stores) == loads == len({at for _, at in plan.c.stores})
    pure = sum(kind == "in" for kind, _ in plan.left)
    assert pure == 3**level and pure + sums == 7**level      # A11, A12, A22 at each level are views of A


def test_two_flat_levels_move_177_quadrant_passes():
    plan = flat_plan("winograd", 2)
    passes = sum(len(p.loads) + len(p.stores) for p in (plan.a, plan.b, plan.c))
    assert passes == 177
    assert total_launches("winograd", 2, flat=True) == 49 + 3


class FixedOrderGemm(type(get_backend("numpy"))):
    """NumPy whose GEMM sums over k in one fixed order, one rounded product and one rounded
    addition at a time: the same bits on every processor and layout. OpenBLAS picks its kernel by
    processor and by operand layout, and the flat and recursive products hand it different
    layouts, so only a fixed GEMM lets the test see the additions' own order."""

    def gemm(self, A, B, C, alpha=1.0, beta=0.0):
        acc = np.zeros(C.shape)
        for j in range(A.shape[1]):
            acc += np.multiply.outer(A[:, j], B[j, :])
        C[...] = alpha * acc if beta == 0 else alpha * acc + beta * C


@pytest.mark.parametrize("level", [1, 2, 3])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("schedule", ["winograd", "lai7"])
def test_flat_is_bitwise_the_recursive_product_under_a_fixed_gemm(level, order, schedule):
    be = FixedOrderGemm()
    A, B = operands(be, 64, 64, 64, order=order)
    C = np.zeros((64, 64), order=order)
    Executor(be, flat=True).multiply(schedule, A, B, C, level)
    R = np.zeros((64, 64))
    Executor(be, fused=True).multiply(schedule, A, B, R, level)
    assert np.array_equal(C, R)
    np.testing.assert_allclose(C, A @ B, rtol=0, atol=1e-12)


@pytest.mark.parametrize("level", [1, 2, 3])
@pytest.mark.parametrize("schedule", ["winograd", "lai7"])
def test_flat_agrees_with_the_recursive_product_under_openblas(level, schedule):
    """With the machine's BLAS the two differ only by the products' rounding: the bound of one
    level's additions over 7^L GEMMs of the same data, well under 1e-13 at this size."""
    be = get_backend("numpy")
    A, B = operands(be, 64, 64, 64, order="F")
    C, R = np.zeros((64, 64), order="F"), np.zeros((64, 64))
    Executor(be, flat=True).multiply(schedule, A, B, C, level)
    Executor(be, fused=True).multiply(schedule, A, B, R, level)
    np.testing.assert_allclose(C, R, rtol=0, atol=1e-13)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_flat_takes_blocks_of_any_rectangular_shape(level):
    be = get_backend("numpy")
    A, B = operands(be, 64, 96, 32, order="F")
    C = np.zeros((64, 32))
    Executor(be, flat=True).multiply("lai7", A, B, C, level)
    np.testing.assert_allclose(C, A @ B, rtol=0, atol=1e-12)


def test_memory_model_is_the_stacks_the_executor_makes():
    be, n = get_backend("numpy"), 64
    A, B = operands(be, n, n, n)
    for level in (1, 2, 3):
        arena = {}
        Executor(be, flat=True, arena=arena).multiply("winograd", A, B, np.empty((n, n)), level)
        made = sum(x.nbytes for x in arena.values())
        assert strassen_memory("winograd", n, level, flat=True).temporaries == made
        assert strassen_memory("winograd", n, level, flat=True).extra == made


def test_each_product_is_one_gemm():
    be = get_backend("numpy")
    calls = []

    class Counting(type(be)):
        def gemm(self, *args, **kwargs):
            calls.append(args[2].shape)
            return super().gemm(*args, **kwargs)

    spy = Counting()
    A, B = operands(spy, 64, 64, 64)
    Executor(spy, flat=True).multiply("winograd", A, B, np.empty((64, 64)), 2)
    assert calls == [(16, 16)] * 49


def test_matmul_flat_takes_any_shape_and_defaults_to_winograd():
    be = get_backend("numpy")
    A, B = operands(be, 300, 260, 280)
    for fringe in ("peel", "pad"):
        C = matmul(A, B, level=2, flat=True, fringe=fringe, backend=be)
        np.testing.assert_allclose(C, A @ B, rtol=0, atol=1e-12)
    assert np.array_equal(matmul(A, B, level=3, flat=True, backend=be),
                          matmul(A, B, level=3, schedule="winograd", fused=True, backend=be))
    out = np.empty((300, 280))
    for _ in range(2):                                     # the second call takes the kept plan
        matmul(A, B, level=2, flat=True, out=out, backend=be)
    np.testing.assert_allclose(out, A @ B, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    (dict(schedule="rum"), "cannot run flat"),
    (dict(parallel=True), "one stream"),
    (dict(workspace=0), "workspace"),
    (dict(flat="yes"), "True or False"),
])
def test_matmul_flat_refuses_what_it_cannot_run_before_any_work(kwargs, match):
    be = get_backend("numpy")
    A, B = operands(be, 64, 64, 64)
    out = np.full((64, 64), 7.0)
    with pytest.raises(ValueError, match=match):
        matmul(A, B, level=2, out=out, backend=be, **{"flat": True, **kwargs})
    assert (out == 7.0).all()


def test_flat_memory_need_names_its_way_out(monkeypatch):
    be = get_backend("numpy")
    A, B = operands(be, 64, 64, 64)
    monkeypatch.setattr(type(be), "memory_info", lambda self: (3 * 64 * 64 * 8, 2**40))
    with pytest.raises(ValueError, match="flat=False"):
        matmul(A, B, level=2, flat=True, backend=be)


def test_the_numpy_backend_has_host_flat_passes():
    assert type(get_backend("numpy").ops(FAMILY)).__name__ == "HostFlat"


@pytest.mark.gpu
@pytest.mark.parametrize("level,order,dtype", [(2, "C", np.float64), (3, "C", np.float64), (2, "F", np.float64),
                                               (2, "C", np.float32)])
def test_cupy_flat_kernels_are_bitwise_the_recursive_fused_product(cupy_backend, level, order, dtype):
    be = cupy_backend
    A, B = operands(be, 512, 512, 512, order=order, dtype=dtype)
    C, R = be.xp.zeros((512, 512), dtype=dtype, order=order), be.xp.zeros((512, 512), dtype=dtype)
    Executor(be, flat=True).multiply("winograd", A, B, C, level)
    Executor(be, fused=True).multiply("winograd", A, B, R, level)
    assert be.xp.array_equal(C, R)
    M = be.xp.zeros((512, 256), dtype=dtype)
    Executor(be, flat=True).multiply("winograd", A, B[:, :256], M, level)   # rectangular blocks, strided B
    tol = 1e-12 if dtype == np.float64 else 2e-3
    np.testing.assert_allclose(be.to_numpy(M), be.to_numpy(A) @ be.to_numpy(B[:, :256]), rtol=0, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("level", [2, 3])
def test_cupy_flat_graph_is_bitwise_eager_and_replays_without_allocating(cupy_backend, level):
    be = cupy_backend
    A, B = operands(be, 512, 512, 512)
    kw = dict(level=level, flat=True, backend=be)
    eager = be.to_numpy(matmul(A, B, **kw))
    C = be.xp.full((512, 512), np.nan)
    matmul(A, B, out=C, graph=True, **kw)
    assert np.array_equal(be.to_numpy(C), eager)
    C.fill(np.nan)
    with be.track_allocations() as report:
        matmul(A, B, out=C, graph=True, check_finite=False, **kw)
        be.synchronize()
    assert report.count == 0 and report.peak_bytes == 0, "a replay allocates nothing"
    assert np.array_equal(be.to_numpy(C), eager)
