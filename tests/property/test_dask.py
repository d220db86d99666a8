"""The Dask product (in-process cluster of two workers, few examples): within the library GEMM's bound on odd
shapes, blocks and views, inputs kept, ``out`` honoured; a block that makes thousands of tiny tasks is
refused at once (4225 tasks of a 65 x 2 x 65 product took 24-76 s and hung in 5 of 15 runs)."""

import time

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from accuracy.reference import exact_matmul
from tests.property import bounds
from tests.property.strategies import F32, F64, as_view, operands, profiled, small_shapes

pytest.importorskip("distributed", reason="the Dask product needs distributed (the dist extra)")
from gpu.multigpu import dask_matmul, grid  # noqa: E402


@st.composite
def dask_cases(draw):
    shape = draw(small_shapes(70))
    dtype = draw(st.sampled_from([F64, F32]))
    block = draw(st.one_of(st.none(), st.integers(1, 80), st.tuples(st.integers(1, 80), st.integers(1, 80))))
    return shape, dtype, block, draw(operands(shape, dtype))


def _explicit(shape, block):
    m, k, n = shape
    return shape, F64, block, (as_view(np.ones((m, k)), "C"), as_view(np.ones((k, n)), "C"))


@profiled(0.5)
@given(case=dask_cases())
@example(case=_explicit((65, 2, 65), 1))           # 4225 block tasks of 2 multiply-adds each: refused at once
@example(case=_explicit((64, 2, 64), (4, 8)))      # 128 tasks, the most two workers take freely: they run
def test_the_dask_product_is_within_the_gemm_bound_or_refused_at_once(dask_client, case):
    (m, k, n), dtype, block, (A, B) = case
    a0, b0 = A.base.copy(), B.base.copy()
    out = np.full((m, n), np.nan, dtype=dtype)
    rows, cols = grid.block_sides(block, m, n, 2)
    tasks = -(-m // rows) * -(-n // cols)
    busy = int(np.prod(grid.process_grid(2, -(-m // rows), -(-n // cols), m, n)))
    tiny = tasks > grid.FREE_TASKS_PER_WORKER * busy and rows * cols * k < grid.MIN_TASK_WORK
    start = time.perf_counter()
    if tiny:
        with pytest.raises(ValueError, match=rf"into {tasks} block tasks .*pass a larger block"):
            dask_matmul.matmul(A.view, B.view, client=dask_client, block=block, out=out, backend="numpy")
        assert time.perf_counter() - start < 5 and np.isnan(out).all(), "refused only after work"
        return
    C = dask_matmul.matmul(A.view, B.view, client=dask_client, block=block, out=out, backend="numpy")
    assert C is out
    assert np.array_equal(A.base, a0, equal_nan=True) and np.array_equal(B.base, b0, equal_nan=True)
    exact = exact_matmul(A.view, B.view, backend="numpy")
    want, allowed = bounds.gemm(A.view, B.view, C, exact, {})
    assert ((np.abs(C.astype(np.float64) - want) <= allowed) | np.isinf(allowed)).all()
