"""Scheme II's fused second Winograd level (:mod:`gpu.ozaki2.fused_level2`): bitwise level 0, on NumPy with a
stand-in for the residue GEMMs and on the GPU with the CUTLASS kernel."""

from __future__ import annotations

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from gpu.backend import cutlass_int8 as ci
from gpu.backend import get_backend
from gpu.ozaki2 import fused_level, fused_level2, memory, winograd
from gpu.ozaki2.fused_level2 import shape_fits
from gpu.ozaki2.moduli import moduli_table
from gpu.ozaki2.ops import HostOps
from gpu.ozaki2.plan import Plan
from gpu.ozaki2.residues import symmetric
from gpu.ozaki2.workspace import layout

BLOCK = 2**17 - 16


def _residue_gemm(a, b, r, modulus):
    """A NumPy stand-in for the CUTLASS residue GEMM, batched over a leading side as the kernel is."""
    def issue():
        r[...] = symmetric((a.astype(np.int64) @ np.swapaxes(b.astype(np.int64), -1, -2)) % modulus, modulus)
    return issue


@pytest.fixture
def residue_numpy(monkeypatch):
    be = get_backend("numpy")
    monkeypatch.setattr(be, "residue_gemm", _residue_gemm)
    monkeypatch.setattr(type(be), "residue_min_k", 0)
    return be


def _level0(be, A, B, count=13, **options):
    with Plan(A, B, options={"moduli": count, **options}, backend=be) as plan:
        return plan.execute(A, B)


def test_the_fused_second_level_takes_sides_that_quarter_into_whole_views_and_k_in_one_block():
    assert shape_fits(256, 512, 192, 2, BLOCK) and shape_fits(32768, 32768, 32768, 2, BLOCK)
    assert not shape_fits(256, 512, 192, 1, BLOCK), "one level is fused_level's"
    assert not shape_fits(288, 512, 192, 2, BLOCK), "m / 4 not a multiple of 16"
    assert not shape_fits(256, 576, 192, 2, BLOCK), "k / 4 not a multiple of 32"
    assert not shape_fits(256, 512, 64, 2, BLOCK), "a quarter below MIN_SIDE"
    assert not shape_fits(256, 2 * BLOCK, 256, 2, BLOCK), "k in blocks"


def test_its_layout_is_offered_only_on_residue_gemms_over_a_quarter_of_k_and_not_to_a_kept_a(monkeypatch):
    be = get_backend("numpy")
    assert not memory.narrow_products(be, 256, 512, 192, 2, BLOCK)
    monkeypatch.setattr(be, "residue_min_k", 128)
    assert memory.narrow_products(be, 256, 512, 192, 2, BLOCK), "GEMMs 128 deep"
    assert not memory.narrow_products(be, 256, 384, 192, 2, BLOCK), "96 deep"
    fused = memory.layouts(256, 512, 192, 13, "fast", BLOCK, level=2, narrow=True)
    assert [ws.levels for ws in fused] == [2, 0] and fused[0].buffers["products"].shape == (13, 49, 64, 48)
    assert fused[0].buffers["res_b"].shape == (13, 49, 48, 128)
    assert [ws.levels for ws in memory.layouts(256, 512, 192, 13, "fast", BLOCK, level=2, narrow=True,
                                               keep_a=True)] == [0]
    assert [ws.levels for ws in memory.layouts(256, 512, 192, 13, "fast", BLOCK, level=2)] == [0]
    assert layout(256, 512, 192, 13, "fast", True, 3).levels == 1, "a direct layout deeper than 2 holds level 1's"


def test_at_n_32768_and_15_moduli_it_holds_b_whole_and_a_span_of_a_quarter_of_the_rows():
    n = 32768
    offered = memory.layouts(n, n, n, 15, "fast", BLOCK, level=2, narrow=True)
    assert [ws.rows for ws in offered[:-1]] == [2048, 1024, 512], "spans of 2048 ran faster than 4096"
    span = offered[0]
    assert span.buffers["res_b"].nbytes == 15 * 49 * 8192 * 8192
    assert span.buffers["res_a"].nbytes == span.buffers["products"].nbytes == 15 * 49 * 2048 * 8192


@pytest.mark.parametrize("m, k, n, phi, order", [(256, 512, 192, 1.0, "C"), (320, 384, 256, 4.0, "F"),
                                                 (128, 1024, 128, 0.5, "C")])
def test_a_fused_second_level_on_numpy_is_bitwise_level_0(residue_numpy, m, k, n, phi, order):
    be = residue_numpy
    A = np.asarray(phi_matrix(m, k, phi, 1), order=order)
    B = phi_matrix(k, n, phi, 2)
    want = _level0(be, A, B)
    with Plan(A, B, options={"moduli": 13, "level": 2}, backend=be) as plan:
        assert plan.work.layout.levels == 2 and plan.part(13).quarter == m // 4
        assert np.array_equal(plan.execute(A, B), want)


def test_spans_of_a_quarter_with_a_shorter_last_one_give_the_same_bits(residue_numpy, monkeypatch):
    """m = 320: quarters of 80 rows, offered in spans of 80, 48, 32 and 16 where MIN_SPAN and MAX_SPAN allow; a
    workspace that holds only the 48-row span's layout runs spans of 48 and 32 rows."""
    be = residue_numpy
    monkeypatch.setattr(fused_level, "MIN_SPAN", 16)
    monkeypatch.setattr(fused_level2, "MAX_SPAN", 80)
    m, k, n = 320, 512, 256
    A, B = phi_matrix(m, k, 1.0, 3), phi_matrix(k, n, 1.0, 4)
    offered = {ws.rows: ws for ws in memory.layouts(m, k, n, 13, "fast", BLOCK, level=2, narrow=True)[:-1]}
    assert sorted(offered) == [16, 32, 48, 80]
    monkeypatch.setattr(fused_level2, "MAX_SPAN", 40)
    assert fused_level2.span_rows(80) == [32, 16] and fused_level2.span_rows(8) == [8]
    monkeypatch.setattr(fused_level2, "MAX_SPAN", 80)
    beyond = (memory.beyond_bytes(be, m, k, n, 13, "fast", False, level=2)
              - winograd.scratch_bytes(m, k, n, 2) - 8 * m * n)
    cap = offered[48].nbytes + beyond + (offered[80].nbytes - offered[48].nbytes) // 2
    with Plan(A, B, options={"moduli": 13, "level": 2, "workspace": cap}, backend=be) as plan:
        assert [(s.start, s.stop) for s in plan.part(13).spans] == [(0, 48), (48, 80)]
        assert np.array_equal(plan.execute(A, B), _level0(be, A, B))


def test_a_backend_that_does_not_batch_gets_one_residue_gemm_a_product(residue_numpy, monkeypatch):
    """Where the residue GEMM declines views with a batch side, each span plans one GEMM per product (49 a
    modulus), and C keeps level 0's bits."""
    be = residue_numpy
    monkeypatch.setattr(be, "residue_gemm", lambda a, b, r, m: None if a.ndim == 3 else _residue_gemm(a, b, r, m))
    A, B = phi_matrix(256, 512, 1.0, 8), phi_matrix(512, 192, 1.0, 9)
    with Plan(A, B, options={"moduli": 13, "level": 2}, backend=be) as plan:
        assert [len(calls) for calls in plan.part(13).gemms] == [13 * 49]
        assert np.array_equal(plan.execute(A, B), _level0(be, A, B))


def test_non_finite_inputs_give_level_0s_pattern_and_values(residue_numpy):
    be = residue_numpy
    A, B = phi_matrix(256, 512, 1.0, 5), phi_matrix(512, 192, 1.0, 6)
    A[3, 7], A[200, 0], B[11, 100] = np.nan, np.inf, -np.inf
    want = _level0(be, A, B)
    with Plan(A, B, options={"moduli": 13, "level": 2}, backend=be) as plan:
        got = plan.execute(A, B)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[~np.isnan(got)],
                                                                            want[~np.isnan(want)])


def test_a_spans_operands_are_the_rows_of_the_whole_quarters_operands():
    """Winograd's sums are entrywise, so the operands of a span of each quarter's rows are those rows of the
    operands formed from the whole quarters (ordered (p, q): inner operand q of outer operand p)."""
    be, table = get_backend("numpy"), moduli_table(13)
    family = HostOps(be)
    for side, (rows, k) in (("a", (256, 512)), ("b", (192, 512))):
        X = phi_matrix(rows, k, 2.0, 7)
        shifts, exps = np.full(rows, 40 << 8, np.int32), np.full(rows, 40, np.int32)
        whole, span = (np.zeros((13, 49, rows // 4, k // 4), np.int8) for _ in range(2))
        family.level2_operands(X, shifts, exps, table, whole, side, 0, rows // 4, rows // 4)
        family.level2_operands(X, shifts, exps, table, span, side, 8, 16, rows // 4)
        assert np.array_equal(span[:, :, :16], whole[:, :, 8:24]) and not span[:, :, 16:].any(), side
        assert np.array_equal(whole[:, 0], family.residues(X, shifts, exps, table, rows, k)[:, :rows // 4, :k // 4])


def _gpu_kernel(be):
    cc = be.xp.cuda.Device().compute_capability
    if be._lt is None or ci.cutlass_int8(f"{cc[:-1]}.{cc[-1]}") is None:
        pytest.skip("no CUTLASS INT8 kernel built for this device (gemmlab kernels --build)")


@pytest.mark.gpu
@pytest.mark.parametrize("m, k, n, order", [(256, 32768, 1024, "C"), (320, 32768, 192, "F")])
def test_gpu_a_fused_second_level_is_bitwise_level_0_eagerly_and_replayed(cupy_backend, m, k, n, order):
    """n = 1024: quarters of 256 columns take the staged CRT; n = 192 the one-byte loads; A in both orders."""
    be, xp = cupy_backend, cupy_backend.xp
    _gpu_kernel(be)
    A = xp.asarray(np.asarray(phi_matrix(m, k, 1.0, 1), order=order))
    B = xp.asarray(phi_matrix(k, n, 1.0, 2))
    A[5, 9], B[100, 17] = xp.nan, xp.inf
    want = _level0(be, A, B, 15)
    with Plan(A, B, options={"moduli": 15, "level": 2}, backend=be) as plan:
        assert plan.work.layout.levels == 2
        got = [plan.execute(A, B) for _ in range(3)]
    for C in got:
        assert bool(((C == want) | (xp.isnan(C) & xp.isnan(want))).all())


@pytest.mark.gpu
@pytest.mark.parametrize("side, phi", [("a", 1.0), ("b", 4.0)])
def test_gpu_operands_are_the_hosts(cupy_backend, side, phi):
    """The CUDA operand pass writes the NumPy twin's bytes, at codes that keep entries narrow and at ones that
    make them wider than 2**79 (the split into a high and a low part)."""
    be, xp = cupy_backend, cupy_backend.xp
    table, rows, k = moduli_table(15), 128, 512
    X = phi_matrix(rows, k, phi, 9)
    exps = np.full(rows, 30, np.int32)
    for code in (30 << 8, 120 << 8):
        shifts = np.full(rows, code, np.int32)
        want = np.zeros((15, 49, 24, k // 4), np.int8)
        HostOps(get_backend("numpy")).level2_operands(X, shifts, exps, table, want, side, 8, 16, rows // 4)
        got = xp.zeros((15, 49, 24, k // 4), np.int8)
        be.ops("ozaki2").level2_operands(xp.asarray(X), xp.asarray(shifts), xp.asarray(exps), table, got, side, 8,
                                         16, rows // 4)
        assert bool((got == xp.asarray(want)).all()), code
