"""Scheme II's direct layout in row panels: the INT32 products of every modulus for a panel of C's rows at a time,
within the planes layout's bytes (GEMMul8's workspace), with no reduction pass: the default where the whole direct
layout is larger, which a ``workspace=`` that holds it takes instead. Its GEMMs are the whole product's tiles, its
CRT is per entry, so C is bitwise the whole direct layout's: on NumPy here, on the GPU below."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.generate import phi_matrix
from gpu import ozaki2
from gpu.backend.numpy_backend import NumpyBackend
from gpu.ozaki.plan import HEADROOM, _round_up
from gpu.ozaki2 import memory
from gpu.ozaki2.gemms import PANEL, PANEL_FROM, panels
from gpu.ozaki2.options import Options
from gpu.ozaki2.workspace import layout

pytestmark = pytest.mark.usefixtures("row_panels_at_any_size")   # the panels' mechanics, on small products

MATRIX = 8  # bytes of one float64 entry: workspaces below are in N x N float64 matrices
WHOLE = 2**50  # a workspace= that holds any layout: the whole direct one is taken


def operands(m, k, n, seed=3):
    return phi_matrix(m, k, 1.0, seed), phi_matrix(k, n, 1.0, seed + 1)


@pytest.mark.parametrize("shape", [(67, 300, 75), (200, 64, 96), (161, 40, 33)])
@pytest.mark.parametrize("moduli, scaling", [(15, "fast"), (14, "accurate"), ("auto", "fast")])
def test_row_panels_are_the_default_and_give_the_whole_direct_layouts_bits(shape, moduli, scaling):
    m, k, n = shape
    A, B = operands(m, k, n)
    A[m - 2, 3] = np.nan                                  # a row in the last panel: the IEEE repair covers all of C
    count = 20 if moduli == "auto" else moduli
    rows = memory.panel_rows(m, k, n, count, scaling)
    with ozaki2.Plan(A, B, options=Options(moduli=moduli, scaling=scaling), backend="numpy") as plan:
        assert plan.work.direct and plan.work.layout.rows == rows < m
        assert plan.work.layout.nbytes <= layout(m, k, n, count, scaling, False).nbytes, "within GEMMul8's bytes"
        got = plan.execute(A, B)
        assert len(plan.part(plan.last_count).spans) == -(-m // rows)
    with ozaki2.Plan(A, B, options=Options(moduli=moduli, scaling=scaling, workspace=WHOLE), backend="numpy") as plan:
        assert plan.work.direct and plan.work.layout.rows == m
        whole = plan.execute(A, B)
    assert np.array_equal(got, whole, equal_nan=True) and np.isnan(got[m - 2]).all()


def test_a_squeezed_device_that_holds_the_panels_but_not_the_whole_layout_takes_the_panels():
    m, k, n, count = 200, 64, 96, 15
    A, B = operands(m, k, n)
    be, rows = NumpyBackend(), memory.panel_rows(m, k, n, count, "fast")
    beyond = memory.beyond_bytes(be, m, k, n, count, "fast", False)
    free = int((layout(m, k, n, count, "fast", True, rows=rows).nbytes + beyond) / HEADROOM) + 1
    be.memory_info = lambda: (free, 2 * free)
    with ozaki2.Plan(A, B, options=Options(moduli=count, workspace=WHOLE), backend=be) as plan:
        assert plan.work.direct and plan.work.layout.rows == rows < m
        assert np.array_equal(plan.execute(A, B), ozaki2.matmul(A, B, moduli=count, backend="numpy"))


def test_at_large_sizes_the_panels_take_whole_gemm_panels_and_no_more_than_gemmul8s_workspace():
    assert memory.panel_rows(8192, 8192, 8192, 15, "fast") == 2048, "four balanced panels, not 3 x 2592 + 416"
    for n, count, rows in ((16384, 15, 3072), (32768, 15, 9216), (32768, 20, 9216), (49152, 15, 12288)):
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
def test_panel_rows_are_the_fewest_panels_that_fit_within_the_planes_balanced(m, k, n, count, scaling):
    rows = memory.panel_rows(m, k, n, count, scaling)
    budget = layout(m, k, n, count, scaling, False).nbytes
    if rows is None:
        return
    panels = -(-m // rows)
    step = PANEL[0] if m >= PANEL_FROM and rows % PANEL[0] == 0 else 16
    assert 16 <= rows < m and rows % 16 == 0 and panels >= 2
    assert layout(m, k, n, count, scaling, True, rows=rows).nbytes <= budget
    fewer = min(m, _round_up(_round_up(m, panels - 1) // (panels - 1), step))
    assert fewer == m or layout(m, k, n, count, scaling, True, rows=fewer).nbytes > budget, "no fewer panels fit"
    assert rows - _round_up(m, panels) // panels < step, "balanced: no panel more than a step above its share"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(200, 256, 160), (97, 300, 75)])
def test_on_the_gpu_row_panels_give_the_whole_layouts_bits_eager_and_replayed(cupy_backend, shape):
    m, k, n = shape
    A, B = (cupy_backend.asarray(X) for X in operands(m, k, n))
    with ozaki2.Plan(A, B, options=Options(moduli=15, workspace=WHOLE), backend=cupy_backend) as whole, \
            ozaki2.Plan(A, B, options=Options(moduli=15), backend=cupy_backend) as paneled:
        assert whole.work.layout.rows == m and paneled.work.direct and paneled.work.layout.rows < m
        want = cupy_backend.to_numpy(whole.execute(A, B))
        for _ in range(3):                                # the second and third calls replay the plan's graph
            assert np.array_equal(cupy_backend.to_numpy(paneled.execute(A, B)), want)
    host = ozaki2.matmul(cupy_backend.to_numpy(A), cupy_backend.to_numpy(B), moduli=15, backend="numpy")
    assert np.array_equal(host, want), "NumPy's bits"
