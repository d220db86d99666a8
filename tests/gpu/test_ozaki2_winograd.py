"""Scheme II over Winograd (``ozaki2.matmul(..., level=L)``): the residue products are exact, so levels 1 and 2
are bitwise level 0 on odd shapes, both layouts, blocked k (beyond 2**17 too) and phi up to 4; each level takes
7 products of the one below; bad levels are refused; on the GPU the levels equal NumPy bit for bit."""

import functools

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from accuracy.methods import get_method, ozaki2_level, ozaki2_method_name
from experiments.ozaki2.bench import family, sort_key
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import memory, winograd
from gpu.ozaki2.memory import layouts
from gpu.ozaki2.reference import MAX_K

host_matmul = functools.partial(ozaki2.matmul, backend="numpy")


def residues(rng, rows, k, m):
    return rng.integers(-(m // 2), (m - 1) // 2 + 1, (rows, k)).astype(np.int8)


@pytest.mark.parametrize("m", [256, 255, 251, 7])
@pytest.mark.parametrize("shape", [(67, 131, 75), (128, 256, 96), (97, 65, 160), (40, 1, 40)])
def test_a_residue_product_is_the_plain_ones_at_every_level(m, shape):
    be, rng = get_backend("numpy"), np.random.default_rng(m)
    rows, k, cols = shape
    a, b = residues(rng, rows, k, m), residues(rng, cols, k, m)
    want = winograd._direct(be, a, b, m)
    assert want.dtype == np.int8 and np.array_equal(want, ((a.astype(np.int64) @ b.T.astype(np.int64) + m // 2)
                                                           % m - m // 2))
    for level in (1, 2, 3):
        assert np.array_equal(winograd.residue_product(be, a, b, m, level), want), level


def test_each_level_takes_seven_products_of_the_level_below(monkeypatch):
    be, rng = get_backend("numpy"), np.random.default_rng(1)
    a, b = residues(rng, 128, 128, 251), residues(rng, 128, 128, 251)
    calls = []
    real = type(be).gemm_ex
    monkeypatch.setattr(type(be), "gemm_ex", lambda self, A, B, C, **kw: (calls.append(C.shape), real(self, A, B, C,
                                                                                                     **kw))[1])
    for level, count, side in ((0, 1, 128), (1, 7, 64), (2, 49, 32)):
        calls.clear()
        winograd.residue_product(be, a, b, 251, level)
        assert calls == [(side, side)] * count, level


def operands(m, k, n, phi, seed):
    return phi_matrix(m, k, phi, seed), phi_matrix(k, n, phi, seed + 1)


@pytest.fixture
def levels_taken(monkeypatch):
    """The Winograd levels taken (one entry per level formed), to show that a test's shapes use them."""
    taken = []
    real = winograd._level
    monkeypatch.setattr(winograd, "_level", lambda be, a, b, m, level: (taken.append(level), real(be, a, b, m,
                                                                                                   level))[1])
    return taken


@pytest.mark.parametrize("shape, phi, moduli, k_block", [
    ((67, 131, 75), 1.0, 14, None), ((101, 257, 99), 4.0, 16, None), ((64, 160, 96), 0.1, "auto", 64),
    ((139, 300, 70), 2.0, 20, 96), ((65, 129, 131), 4.0, "auto", None)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_levels_one_and_two_are_bitwise_level_zero(shape, phi, moduli, k_block, order, levels_taken):
    m, k, n = shape
    A, B = (np.asarray(X, order=order) for X in operands(m, k, n, phi, 5))
    want = host_matmul(A, B, moduli=moduli, k_block=k_block)
    for level in (1, 2):
        assert np.array_equal(host_matmul(A, B, moduli=moduli, k_block=k_block, level=level), want), level
    assert levels_taken, "the shape takes a Winograd level"


def test_k_beyond_one_int8_block_is_bitwise_too(levels_taken):
    m, n, k = 65, 67, MAX_K + 48
    A, B = operands(m, k, n, 1.0, 9)
    want = host_matmul(A, B, moduli=6)
    assert np.array_equal(host_matmul(A, B, moduli=6, level=1), want) and levels_taken


def test_unfused_levels_take_the_planes_layout_and_count_their_scratch(row_panels_at_any_size):
    rows = memory.panel_rows(512, 512, 512, 15, "fast")
    assert [(ws.direct, ws.rows) for ws in layouts(512, 512, 512, 15, "fast", 2**17 - 16)] == \
        [(True, rows), (False, None)]
    assert [(ws.direct, ws.rows) for ws in layouts(512, 512, 512, 15, "fast", 2**17 - 16, whole=True)] == \
        [(True, 512), (True, rows), (False, None)]
    (leveled,) = layouts(512, 512, 512, 15, "fast", 2**17 - 16, level=2)
    assert layouts(520, 512, 512, 15, "fast", 2**17 - 16, level=1)[0].buffers.keys() == \
        layouts(520, 512, 512, 15, "fast", 2**17 - 16, level=2)[0].buffers.keys(), "no fused level on 520 rows"
    assert layouts(512, 512, 512, 15, "fast", 2**17 - 16, level=1)[0].fused, "the fused level where the sides halve"
    plain = layouts(512, 512, 512, 15, "fast", 2**17 - 16)[-1]
    assert not leveled.direct and "product" not in leveled.buffers and "product" in plain.buffers
    assert plain.nbytes - leveled.nbytes >= 4 * 512 * 512, "no INT32 product buffer: the levels make residues"
    assert winograd.scratch_bytes(512, 512, 512, 0) == 0 < winograd.scratch_bytes(512, 512, 512, 1)


@pytest.mark.parametrize("level", [-1, 5, 1.5, True, "1"])
def test_bad_levels_are_refused_before_any_work(level):
    A, B = operands(8, 8, 8, 1.0, 1)
    with pytest.raises(ValueError, match="level must be a whole number in 0..4"):
        host_matmul(A, B, moduli=4, level=level)
    with pytest.raises(ValueError, match="level must be"):
        ozaki2.Options(level=level)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, moduli, k_block", [((257, 301, 129), 15, None), ((512, 512, 512), 14, None),
                                                    ((300, 1000, 260), "auto", 256)])
def test_on_the_gpu_the_levels_equal_numpy_bit_for_bit(cupy_backend, shape, moduli, k_block):
    m, k, n = shape
    A, B = operands(m, k, n, 1.0, 3)
    want = host_matmul(A, B, moduli=moduli, k_block=k_block)
    dA, dB = cupy_backend.asarray(A), cupy_backend.asarray(np.asfortranarray(B))
    for level in (0, 1, 2):
        got = ozaki2.matmul(dA, dB, moduli=moduli, k_block=k_block, level=level, backend=cupy_backend)
        assert np.array_equal(cupy_backend.to_numpy(got), want), level


def test_the_audit_names_levels_and_they_run_bitwise():
    name = ozaki2_method_name("fast", 15, 2)
    assert name == "ozaki2-fast-15-w2" and ozaki2_level(name) == 2 and ozaki2_level("ozaki2-fast-15") == 0
    A, B = operands(70, 80, 90, 1.0, 2)
    be = get_backend("numpy")
    assert np.array_equal(get_method(name).run(be, A, B), get_method("ozaki2-fast-15").run(be, A, B))
    assert family(name) == ("scheme II fast", "15 w2")
    names = ["ozaki2-fast-15-w1", "ozaki2-fast-16", "ozaki2-fast-15", "ozaki2-fast-auto"]
    assert sorted(names, key=sort_key) == ["ozaki2-fast-15", "ozaki2-fast-15-w1", "ozaki2-fast-16", "ozaki2-fast-auto"]
    with pytest.raises(ValueError, match="level must be"):
        get_method("ozaki2-fast-15-w9")


def test_the_residue_operations_are_the_modular_arithmetic_at_the_ends_of_the_range():
    ops = winograd.HostResidueOps()
    for m in (256, 255, 7):
        lo, hi = -(m // 2), (m - 1) // 2
        x = np.array([lo, lo, hi, hi, 0, lo], dtype=np.int8)
        y = np.array([lo, hi, hi, lo, lo, 0], dtype=np.int8)
        for sign in (1, -1):
            want = (x.astype(np.int64) + sign * y.astype(np.int64) + m // 2) % m - m // 2
            got = ops.combine(x, y, m, sign)
            assert got.dtype == np.int8 and np.array_equal(got, want), (m, sign)
        P = np.array([2**31 - 1, -(2**31), 0, m, -m - 1], dtype=np.int32)
        assert np.array_equal(ops.reduce(P, m), (P.astype(np.int64) + m // 2) % m - m // 2)


@pytest.mark.gpu
def test_on_the_gpu_the_residue_passes_equal_numpys_in_both_kernels(cupy_backend, monkeypatch):
    """Aligned views take the 16-byte (sums) and 4-product (reductions) kernels, the others the one-element ones;
    both give NumPy's residues, at the ends of the range too."""
    from gpu.ozaki2 import winograd_kernels as kernels  # CuPy's module: imported where a GPU runs

    launched = []
    real = kernels._launch
    monkeypatch.setattr(kernels, "_launch", lambda name, *a: (launched.append(name), real(name, *a))[1])
    rng = np.random.default_rng(4)
    gpu_ops, host = cupy_backend.ops(winograd.FAMILY), winograd.HostResidueOps()
    for m in (256, 251, 7):
        lo, hi = -(m // 2), (m - 1) // 2
        x, y = (rng.integers(lo, hi + 1, (64, 48)).astype(np.int8) for _ in range(2))
        x[0, :4], y[0, :4] = [lo, lo, hi, hi], [lo, hi, lo, hi]
        P = rng.integers(-(2**31), 2**31, (64, 48)).astype(np.int32)
        P[0, :4] = [2**31 - 1, -(2**31), m, -m - 1]
        for cols, vector in ((slice(16, None), True), (slice(8, None), False), (slice(None), True),
                             (slice(0, 40), False)):
            for sign in (1, -1):
                launched.clear()
                got = gpu_ops.combine(cupy_backend.asarray(x)[:, cols], cupy_backend.asarray(y)[:, cols], m, sign)
                assert np.array_equal(cupy_backend.to_numpy(got), host.combine(x[:, cols], y[:, cols], m, sign))
                assert bool(launched) is vector, (cols, launched)
        for cols, vector in ((slice(None), True), (slice(4, None), True), (slice(1, None), False)):
            launched.clear()
            got = gpu_ops.reduce(cupy_backend.asarray(P)[:, cols], m)
            assert np.array_equal(cupy_backend.to_numpy(got), host.reduce(P[:, cols], m))
            assert bool(launched) is vector, (cols, launched)


@pytest.mark.gpu
@pytest.mark.parametrize("rows, cols, vector", [(64, 96, True), (62, 90, False)])
def test_on_the_gpu_a_levels_sums_and_combination_equal_numpys(cupy_backend, monkeypatch, rows, cols, vector):
    """One pass per operand's four sums (on its blocks, views of the operand) and one for the four output blocks
    from 7 INT32 products or 7 residues, written into views of C: NumPy's residues, bit for bit, by the vector
    kernels on aligned blocks and by the one-element ones on the others."""
    from gpu.ozaki2 import winograd_kernels as kernels  # CuPy's module: imported where a GPU runs

    launched = []
    real = kernels._launch
    monkeypatch.setattr(kernels, "_launch", lambda name, *a: (launched.append(name), real(name, *a))[1])
    rng = np.random.default_rng(12)
    gpu_ops, host, be = cupy_backend.ops(winograd.FAMILY), winograd.HostResidueOps(), cupy_backend

    def quadrants(r, c):
        h, w = r // 2, c // 2
        return ((slice(0, h), slice(0, w)), (slice(0, h), slice(w, 2 * w)), (slice(h, 2 * h), slice(0, w)),
                (slice(h, 2 * h), slice(w, 2 * w)))

    for m in (256, 251):
        lo, hi = -(m // 2), (m - 1) // 2
        x = rng.integers(lo, hi + 1, (rows, cols)).astype(np.int8)
        x[0, :4] = [lo, lo, hi, hi]
        for side in ("a", "b"):
            launched.clear()
            got = gpu_ops.operand_sums(*(be.asarray(x)[q] for q in quadrants(rows, cols)), m, side)
            for g, w in zip(got, host.operand_sums(*(x[q] for q in quadrants(rows, cols)), m, side), strict=True):
                assert np.array_equal(be.to_numpy(g), w), (m, side)
            assert bool(launched) is vector, (side, launched)
        h, w = rows // 2, (cols - 16) // 2
        for products in ([rng.integers(-(2**31), 2**31, (h, w)).astype(np.int32) for _ in range(7)],
                         [rng.integers(lo, hi + 1, (h, w)).astype(np.int8) for _ in range(7)]):
            products[0][0, :2], products[1][0, :2] = products[0].dtype.type(hi), products[0].dtype.type(lo)
            C, want = be.xp.zeros((2 * h, 2 * w), dtype=np.int8), np.zeros((2 * h, 2 * w), dtype=np.int8)
            launched.clear()
            gpu_ops.combine_products(tuple(be.asarray(p) for p in products), m,
                                     tuple(C[q] for q in quadrants(2 * h, 2 * w)))
            host.combine_products(tuple(products), m, tuple(want[q] for q in quadrants(2 * h, 2 * w)))
            assert np.array_equal(be.to_numpy(C), want), (m, products[0].dtype)
            assert bool(launched) is vector, (products[0].dtype, launched)


@pytest.mark.gpu
def test_on_the_gpu_the_packed_sums_equal_numpys_for_every_modulus_and_pair(cupy_backend, monkeypatch):
    """The 16-byte sum and operand-sums kernels work on two residues a word in 16-bit lanes: for every modulus
    2..256, every pair of residues (as x and y, and as the first two blocks of each operand's sums, the others
    drawn) gives NumPy's residues, bit for bit."""
    from gpu.ozaki2 import winograd_kernels as kernels  # CuPy's module: imported where a GPU runs

    launched = set()
    real = kernels._launch
    monkeypatch.setattr(kernels, "_launch", lambda name, *a: (launched.add(name), real(name, *a))[1])
    rng = np.random.default_rng(21)
    gpu_ops, host, be = cupy_backend.ops(winograd.FAMILY), winograd.HostResidueOps(), cupy_backend
    for m in range(2, 257):
        lo, hi = -(m // 2), (m - 1) // 2
        pairs = np.stack(np.meshgrid(np.arange(lo, hi + 1), np.arange(lo, hi + 1))).reshape(2, -1)
        cols = 64
        rows = -(-pairs.shape[1] // cols)
        blocks = rng.integers(lo, hi + 1, (4, rows, cols)).astype(np.int8)
        blocks[:2].reshape(2, -1)[:, :pairs.shape[1]] = pairs
        on = be.asarray(blocks)
        for sign in (1, -1):
            got = gpu_ops.combine(on[0], on[1], m, sign)
            assert np.array_equal(be.to_numpy(got), host.combine(blocks[0], blocks[1], m, sign)), (m, sign)
        for side in ("a", "b"):
            got = gpu_ops.operand_sums(*on, m, side)
            for g, w in zip(got, host.operand_sums(*blocks, m, side), strict=True):
                assert np.array_equal(be.to_numpy(g), w), (m, side)
    assert launched == {"ozaki2_residue_sum16", "ozaki2_winograd_sums16"}, launched
