"""Scheme II's direct layout in row panels: the INT32 products of every modulus for a panel of C's rows at a time,
within the planes layout's bytes (GEMMul8's workspace), with no reduction pass. Its GEMMs are the whole product's
tiles, its CRT is per entry, so C is bitwise the whole direct layout's: on NumPy here, on the GPU below."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.generate import phi_matrix
from gpu import ozaki2
from gpu.backend.numpy_backend import NumpyBackend
from gpu.ozaki.plan import HEADROOM
from gpu.ozaki2 import memory
from gpu.ozaki2.gemms import PANEL, PANEL_FROM, panels
from gpu.ozaki2.options import Options
from gpu.ozaki2.workspace import layout

MATRIX = 8  # bytes of one float64 entry: workspaces below are in N x N float64 matrices


def operands(m, k, n, seed=3):
    return phi_matrix(m, k, 1.0, seed), phi_matrix(k, n, 1.0, seed + 1)


def squeezed(m, k, n, count, scaling):
    """A NumPy backend whose free memory holds the row panels' layout but not the whole direct one."""
    be = NumpyBackend()
    rows = memory.panel_rows(m, k, n, count, scaling)
    beyond = memory.beyond_bytes(be, m, k, n, count, scaling, False)
    free = int((layout(m, k, n, count, scaling, True, rows=rows).nbytes + beyond) / HEADROOM) + 1
    be.memory_info = lambda: (free, 2 * free)
    return be, rows


@pytest.mark.parametrize("shape", [(67, 300, 75), (200, 64, 96), (161, 40, 33)])
@pytest.mark.parametrize("moduli, scaling", [(15, "fast"), (14, "accurate"), ("auto", "fast")])
def test_row_panels_give_the_whole_direct_layouts_bits(shape, moduli, scaling):
    m, k, n = shape
    A, B = operands(m, k, n)
    A[m - 2, 3] = np.nan                                  # a row in the last panel: the IEEE repair covers all of C
    count = 20 if moduli == "auto" else moduli
    be, rows = squeezed(m, k, n, count, scaling)
    with ozaki2.Plan(A, B, options=Options(moduli=moduli, scaling=scaling), backend=be) as plan:
        assert plan.work.direct and plan.work.layout.rows == rows < m
        got = plan.execute(A, B)
        assert len(plan.part(plan.last_count).spans) == -(-m // rows)
    whole = ozaki2.matmul(A, B, moduli=moduli, scaling=scaling, backend="numpy")
    assert np.array_equal(got, whole, equal_nan=True) and np.isnan(got[m - 2]).all()


def test_at_large_sizes_the_panels_take_whole_gemm_panels_and_no_more_than_gemmul8s_workspace():
    for n, count, rows in ((16384, 15, 3072), (32768, 15, 9216), (32768, 20, 9216), (49152, 15, 15360)):
        assert memory.panel_rows(n, n, n, count, "fast") == rows and rows % PANEL[0] == 0
        words = layout(n, n, n, count, "fast", True, rows=rows).nbytes / (MATRIX * n * n)
        assert words <= layout(n, n, n, count, "fast", False).nbytes / (MATRIX * n * n)
        assert count != 15 or words <= 6.125, "at most GEMMul8's 6.1 matrices at 15 moduli"
    whole = {(r.start, r.stop, c.start, c.stop) for r, c in panels(16384, 16384)}
    mine = {(r.start + lo, r.stop + lo, c.start, c.stop) for lo in range(0, 16384, 3072)
            for r, c in panels(min(3072, 16384 - lo), 16384, 16384)}
    assert mine == whole, "a row panel runs its rows' share of the whole product's GEMM tiles"


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 9000), k=st.integers(1, 4000), n=st.integers(1, 5000), count=st.integers(2, 20),
       scaling=st.sampled_from(ozaki2.SCALINGS))
def test_panel_rows_are_the_most_that_fit_within_the_planes(m, k, n, count, scaling):
    rows = memory.panel_rows(m, k, n, count, scaling)
    budget = layout(m, k, n, count, scaling, False).nbytes
    if rows is None:
        return
    step = PANEL[0] if m >= PANEL_FROM and rows % PANEL[0] == 0 else 16
    assert 16 <= rows < m and rows % 16 == 0
    assert layout(m, k, n, count, scaling, True, rows=rows).nbytes <= budget
    assert rows + step >= m or layout(m, k, n, count, scaling, True, rows=rows + step).nbytes > budget


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(200, 256, 160), (97, 300, 75)])
def test_on_the_gpu_row_panels_give_the_whole_layouts_bits_eager_and_replayed(cupy_backend, shape):
    m, k, n = shape
    A, B = (cupy_backend.asarray(X) for X in operands(m, k, n))
    cap = layout(m, k, n, 15, "fast", True).nbytes - 1
    with ozaki2.Plan(A, B, options=Options(moduli=15), backend=cupy_backend) as whole, \
            ozaki2.Plan(A, B, options=Options(moduli=15, workspace=cap), backend=cupy_backend) as paneled:
        assert whole.work.layout.rows == m and paneled.work.direct and paneled.work.layout.rows < m
        want = cupy_backend.to_numpy(whole.execute(A, B))
        for _ in range(3):                                # the second and third calls replay the plan's graph
            assert np.array_equal(cupy_backend.to_numpy(paneled.execute(A, B)), want)
    host = ozaki2.matmul(cupy_backend.to_numpy(A), cupy_backend.to_numpy(B), moduli=15, backend="numpy")
    assert np.array_equal(host, want), "NumPy's bits"
