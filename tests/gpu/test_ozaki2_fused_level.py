"""A Winograd level in its fused form (:mod:`gpu.ozaki2.fused_level`): the CRT combines each modulus's 7 INT32
products as it reads them, so level 1 on sides that halve into whole INT8 GEMM views is bitwise level 0 (phi up to
4, both layouts, ``"auto"``, non-finite lines, spans of the top half's rows), takes its own layout and not the
level passes, counts no scratch of theirs, and on the GPU equals NumPy bit for bit, replayed as a graph too."""

import functools

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import fused_level, memory, winograd
from gpu.ozaki2.crt import reconstruct
from gpu.ozaki2.memory import beyond_bytes, layouts
from gpu.ozaki2.moduli import moduli_table
from gpu.ozaki2.ops import HostOps
from gpu.ozaki2.options import Options
from gpu.ozaki2.plan import Plan
from gpu.ozaki2.residues import symmetric
from gpu.ozaki2.scaling import unscale

host_matmul = functools.partial(ozaki2.matmul, backend="numpy")
BLOCK = 2**17 - 16


def operands(m, k, n, phi, seed, order="C"):
    return (np.asarray(phi_matrix(m, k, phi, seed), order=order),
            np.asarray(phi_matrix(k, n, phi, seed + 1), order=order))


@pytest.fixture
def taken(monkeypatch):
    """The spans the fused CRT ran ("fused") and the levels the level passes formed ("passes")."""
    seen = {"fused": [], "passes": []}
    crt, level = HostOps.crt_level, winograd._level
    monkeypatch.setattr(HostOps, "crt_level", lambda self, *a: (seen["fused"].append(a[-2]), crt(self, *a))[1])
    monkeypatch.setattr(winograd, "_level", lambda *a: (seen["passes"].append(a[-1]), level(*a))[1])
    ozaki2.PLANS.clear()
    yield seen
    ozaki2.PLANS.clear()


@pytest.mark.parametrize("shape, phi, moduli", [((128, 96, 64), 1.0, 14), ((64, 160, 192), 4.0, "auto"),
                                                ((256, 64, 128), 0.1, 20), ((96, 128, 64), 2.0, 4)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_the_fused_level_is_bitwise_level_zero(shape, phi, moduli, order, taken):
    A, B = operands(*shape, phi, 3, order)
    want = host_matmul(A, B, moduli=moduli)
    assert np.array_equal(host_matmul(A, B, moduli=moduli, level=1), want)
    assert taken["fused"] == [slice(0, shape[0] // 2)] and not taken["passes"]


def test_lines_holding_nan_or_infinity_get_the_library_values_as_at_level_zero(taken):
    A, B = operands(128, 64, 96, 1.0, 7)
    A[3, 5], B[7, 9], A[100, 0] = np.inf, np.nan, -np.inf
    want = host_matmul(A, B, moduli=15)
    got = host_matmul(A, B, moduli=15, level=1)
    assert np.array_equal(got, want, equal_nan=True) and taken["fused"]
    clean = np.ones(got.shape, dtype=bool)
    clean[[3, 100]], clean[:, 9] = False, False
    assert np.isfinite(got[clean]).all() and not np.isfinite(got[3]).any() and np.isnan(got[:, 9]).all()


def test_spans_of_the_top_half_are_bitwise_too(taken, monkeypatch):
    monkeypatch.setattr(memory, "span_rows", lambda half: [48])
    A, B = operands(160, 96, 64, 2.0, 11)
    want = host_matmul(A, B, moduli=16)
    assert np.array_equal(host_matmul(A, B, moduli=16, level=1), want)
    assert taken["fused"] == [slice(0, 48), slice(48, 80)]


@pytest.mark.parametrize("m, k, n, level, block, fuses", [
    (64, 64, 64, 1, BLOCK, True), (4096, 16384, 2048, 1, BLOCK, True), (64, 64, 64, 2, BLOCK, False),
    (64, 64, 64, 0, BLOCK, False), (112, 64, 64, 1, BLOCK, False), (64, 80, 64, 1, BLOCK, False),
    (64, 64, 32, 1, BLOCK, False), (64, 256, 64, 1, 128, False), (64, 65, 64, 1, BLOCK, False)])
def test_which_shapes_take_the_fused_form(m, k, n, level, block, fuses):
    assert fused_level.fusable(m, k, n, level, block) is fuses
    offered = layouts(m, k, n, 15, "fast", block, level=level)
    spans = len(fused_level.span_rows(m // 2)) if fuses else 0
    assert [ws.fused for ws in offered] == [True] * spans + [False] * (len(offered) - spans) and offered[-1:]


def test_the_fused_layout_holds_the_sums_and_seven_products_of_a_span():
    first, second, *_ = layouts(4096, 2048, 1024, 15, "fast", BLOCK, level=1)
    assert first.buffers["sums_a"].shape == (15, 4, 2048, 1024) and first.buffers["sums_b"].shape == (15, 4, 512, 1024)
    assert first.buffers["products"].shape == (15, 7, 2048, 512) and first.rows == 2048 and second.rows == 1024
    assert first.nbytes - second.nbytes == 15 * 7 * 1024 * 512 * 4


@pytest.mark.parametrize("half, spans", [(16384, [16384, 8192, 4096, 2048, 1024, 512]), (1000, [1000, 512]),
                                         (600, [600, 512]), (300, [300]), (2056, [2056, 1040, 528, 512])])
def test_the_spans_halve_down_to_the_least(half, spans):
    assert fused_level.span_rows(half) == spans


def test_a_fused_plan_counts_none_of_the_level_passes_scratch():
    be, (m, k, n) = get_backend("numpy"), (128, 96, 64)
    A, B = operands(m, k, n, 1.0, 2)
    fused = layouts(m, k, n, 15, "fast", BLOCK, level=1)[0]
    scratch = winograd.scratch_bytes(m, k, n, 1)
    cap = fused.nbytes + beyond_bytes(be, m, k, n, 15, "fast", True, level=1) - scratch
    assert scratch > 0
    with Plan(A, B, out=np.empty((m, n)), options=Options(moduli=15, level=1, workspace=cap), backend=be) as plan:
        assert plan.work.layout.fused and plan.work.layout.rows == m // 2
    with Plan(A, B, out=np.empty((m, n)), options=Options(moduli=15, level=1, workspace=cap - 1), backend=be) as plan:
        assert plan.work.layout.nbytes < fused.nbytes


def test_the_host_crt_of_a_level_is_the_crt_of_each_blocks_combination_of_the_seven_products():
    rng, table, half = np.random.default_rng(5), moduli_table(7), 6
    products = rng.integers(-(2**31), 2**31, (7, 7, 4, 5)).astype(np.int32)
    products[:, :, 0, 0] = [2**31 - 1, -(2**31), 2**31 - 1, -(2**31), 2**31 - 1, 2**31 - 1, 2**31 - 1]
    sa, sb = (rng.integers(-20 * 256, 20 * 256, lines).astype(np.int32) for lines in (2 * half, 10))
    C = np.full((2 * half, 10), np.nan)
    HostOps(get_backend("numpy")).crt_level(products, table, sa, sb, C, slice(1, 5), half)
    x = products.astype(np.int64).transpose(1, 0, 2, 3)
    combined = (x[0] + x[1], x[0] + x[5] + x[4] + x[2], x[0] + x[5] + x[6] - x[3], x[0] + x[5] + x[6] + x[4])
    moduli = np.array(table.moduli)[:, None, None]
    for value, (down, right) in zip(combined, ((0, 0), (0, 5), (half, 0), (half, 5)), strict=True):
        at = slice(1 + down, 5 + down)
        want = unscale(reconstruct(symmetric(value % moduli, moduli), table), sa[at], sb[right:right + 5])
        assert np.array_equal(C[at, right:right + 5], want)
    rows = [1, 2, 3, 4, 7, 8, 9, 10]
    assert np.isnan(np.delete(C, rows, axis=0)).all()


@pytest.mark.parametrize("short_k, heights", [(64, [32, 32, 32]), (32, [48, 48])])
def test_sub_products_over_a_short_k_take_their_own_panels_with_the_same_bits(monkeypatch, taken, short_k, heights):
    """Sub-products over k up to ``SHORT_K`` in panels of ``SHORT_K_PANEL`` rows, longer k in level 0's (here 32 and
    48 rows from 64 up, for a half k of 64): the GEMMs' tiles change, C's bits do not."""
    from gpu.ozaki2 import gemms

    monkeypatch.setattr(gemms, "PANEL_FROM", 64)
    monkeypatch.setattr(gemms, "PANEL", (48, 16384))
    monkeypatch.setattr(fused_level, "SHORT_K", short_k)
    monkeypatch.setattr(fused_level, "SHORT_K_PANEL", (32, 16384))
    seen, planned = [], fused_level.planned
    monkeypatch.setattr(fused_level, "planned", lambda *a: (seen.append(a[4]), planned(*a))[1])
    A, B = operands(192, 128, 64, 2.0, 9)
    assert np.array_equal(host_matmul(A, B, moduli=5, level=1), host_matmul(A, B, moduli=5))
    assert seen and all([r.stop - r.start for r, _ in tiles] == heights for tiles in seen)


def test_the_sums_go_into_the_buffers_given():
    rng, ops = np.random.default_rng(2), winograd.HostResidueOps()
    blocks = [rng.integers(-125, 126, (8, 16)).astype(np.int8) for _ in range(4)]
    for side in ("a", "b"):
        out = tuple(np.zeros((4, 8, 16), dtype=np.int8))
        assert ops.operand_sums(*blocks, 251, side, out=out) is out
        assert all(np.array_equal(o, w) for o, w in zip(out, ops.operand_sums(*blocks, 251, side), strict=True))


@pytest.mark.gpu
@pytest.mark.parametrize("shape, moduli, spans", [((512, 512, 512), 14, None), ((256, 384, 320), "auto", None),
                                                  ((384, 256, 192), 16, [64])])
def test_on_the_gpu_the_fused_level_equals_numpy_bit_for_bit(cupy_backend, monkeypatch, shape, moduli, spans):
    if spans:
        monkeypatch.setattr(memory, "span_rows", lambda half: spans)
    ozaki2.PLANS.clear()
    A, B = operands(*shape, 2.0, 4)
    want = host_matmul(A, B, moduli=moduli)
    dA, dB = cupy_backend.asarray(A), cupy_backend.asarray(np.asfortranarray(B))
    out = cupy_backend.xp.empty(want.shape)
    with Plan(dA, dB, out=out, options=Options(moduli=moduli, level=1), backend=cupy_backend) as plan:
        assert plan.work.layout.fused
        for _ in range(3):                                    # eager, captured, replayed
            out[...] = np.nan
            plan.execute(dA, dB, out)
            assert np.array_equal(cupy_backend.to_numpy(out), want)
    ozaki2.PLANS.clear()


@pytest.mark.gpu
@pytest.mark.parametrize("count, width", [(5, 8), (15, 8), (16, 7)])
def test_on_the_gpu_the_level_crt_equals_numpys_at_the_ends_of_the_int32_range(cupy_backend, count, width):
    """Two columns a thread where the products allow 8-byte loads (even widths), one elsewhere; exact tables (5
    moduli) and double-double ones."""
    from gpu.ozaki2 import crt_kernels  # CuPy's module: imported where a GPU runs

    rng, table, half, rows = np.random.default_rng(count), moduli_table(count), 9, slice(2, 7)
    held = rng.integers(-(2**31), 2**31, (count, 7, 6, width)).astype(np.int32)
    held[:, :, 0, 0], held[:, :, 0, 1] = 2**31 - 1, -(2**31)
    products = held[:, :, :5]
    sa, sb = (rng.integers(-30 * 256, 30 * 256, lines).astype(np.int32) for lines in (2 * half, 2 * width))
    want = np.full((2 * half, 2 * width), np.nan)
    HostOps(get_backend("numpy")).crt_level(products, table, sa, sb, want, rows, half)
    xp = cupy_backend.xp
    got = xp.full(want.shape, np.nan)
    dev = xp.asarray(held)[:, :, :5]
    assert crt_kernels.level_columns(dev) == (2 if width % 2 == 0 else 1)
    crt_kernels.crt_level(dev, table, xp.asarray(sa), xp.asarray(sb), got, rows, half)
    assert np.array_equal(cupy_backend.to_numpy(got), want, equal_nan=True)


@pytest.mark.gpu
def test_on_the_gpu_the_sums_go_into_the_buffers_given(cupy_backend):
    rng = np.random.default_rng(6)
    host, gpu_ops, xp = winograd.HostResidueOps(), cupy_backend.ops(winograd.FAMILY), cupy_backend.xp
    x = rng.integers(-125, 126, (64, 96)).astype(np.int8)
    dx = xp.asarray(x)
    for left in (0, 8):                                       # the 16-byte kernel, then the one-element one
        blocks = [(slice(0, 32), slice(left, left + 32)), (slice(0, 32), slice(left + 32, left + 64)),
                  (slice(32, 64), slice(left, left + 32)), (slice(32, 64), slice(left + 32, left + 64))]
        for side in ("a", "b"):
            out = xp.zeros((4, 32, 32), dtype=np.int8)
            gpu_ops.operand_sums(*(dx[q] for q in blocks), 251, side, out=tuple(out))
            for o, w in zip(out, host.operand_sums(*(x[q] for q in blocks), 251, side), strict=True):
                assert np.array_equal(cupy_backend.to_numpy(o), w), (left, side)


@pytest.mark.parametrize("share", [1, 3])
def test_a_capped_level_one_product_is_bitwise_level_zero(share, taken):
    """Under a ``workspace=`` cap the product runs whole (the fused layout where the cap holds it) or in tiles, each
    a level-1 product of its own panels: bitwise level 0 either way."""
    m, k, n = 192, 128, 256
    A, B = operands(m, k, n, 2.0, 8)
    be = get_backend("numpy")
    fused = layouts(m, k, n, 15, "fast", BLOCK, level=1)[0].nbytes + beyond_bytes(be, m, k, n, 15, "fast", False,
                                                                                     level=1)
    got = host_matmul(A, B, moduli=15, level=1, workspace=fused // share)
    assert np.array_equal(got, host_matmul(A, B, moduli=15))
    assert bool(taken["fused"]) is (share == 1) and bool(taken["passes"]) is (share != 1)


def test_under_auto_the_count_read_takes_the_spans_its_moduli_leave_room_for(taken, monkeypatch):
    """``moduli="auto"`` sizes the block for 20 moduli; the count a call reads takes the tallest spans that block
    holds at that count (the residues and sums of the moduli left out hold products instead): bitwise the same."""
    monkeypatch.setattr(memory, "span_rows", lambda half: [128, 64, 32, 16])
    (m, k, n), be = (256, 512, 256), get_backend("numpy")
    A, B = operands(m, k, n, 1.0, 5)
    offered = layouts(m, k, n, ozaki2.MAX_MODULI, "fast", BLOCK, level=1)
    sized = next(ws for ws in offered if ws.rows == 32)
    cap = (sized.nbytes + beyond_bytes(be, m, k, n, None, "fast", False, level=1)
           - winograd.scratch_bytes(m, k, n, 1) - 8 * m * n)
    with Plan(A, B, options=Options(level=1, workspace=cap), backend=be) as plan:
        got = plan.execute(A, B)
        count = plan.last_count
        assert plan.work.layout.rows == 32 and count < ozaki2.MAX_MODULI
    rows = next(ws.rows for ws in layouts(m, k, n, count, "fast", BLOCK, level=1) if ws.nbytes <= sized.nbytes)
    assert rows > 32 and taken["fused"] == [slice(r, min(r + rows, m // 2)) for r in range(0, m // 2, rows)]
    assert np.array_equal(got, host_matmul(A, B, moduli=count))
