"""The Ozaki scheme's exactness: slice formats and plans, every slice-pair product exact (blocked k,
the accumulator bound, output tiles), the fold bitwise equal to an independent emulation, and the
paper's rounded-tail form. Accuracy, special inputs, auto and errors: ``test_ozaki_accuracy.py``.

GPU tests (``-m gpu``) check that the device computes what the NumPy path
computes, bit for bit: every slice-pair product the scheme treats as exact
must be exact on the hardware, including at the accumulator bound.
"""

from dataclasses import replace
from fractions import Fraction
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from accuracy.generate import phi_matrix
from accuracy.metrics import error_report
from accuracy.reference import exact_matmul
from gpu import ozaki
from gpu.backend import get_backend
from gpu.backend.blas import gemm_recipe
from gpu.backend.numpy_backend import decode_operand
from gpu.ozaki.api import _lines, _split, _tiles
from gpu.ozaki.plan import HELD_BYTES, MAX_FOLD
from tests.gpu.ozaki_digits import digit_sums

FORMATS = tuple(ozaki.FORMATS)
NP = get_backend("numpy")


def emulated(A, B, slices, fmt="fp32", k_block=None):
    """The scheme's result computed independently: exact int64 digit products, then the same compensated
    fold (TwoSum of each diagonal, written out here)."""
    sums, alpha, e, f = digit_sums(A, B, slices, fmt, k_block)
    hi, lo = np.zeros((A.shape[0], B.shape[1])), np.zeros((A.shape[0], B.shape[1]))
    for d, D in zip(range(slices + 1, 1, -1), sums):
        t = D.astype(np.float64) * 2.0 ** (-alpha * d)
        s = hi + t
        v = s - hi
        lo = lo + ((hi - (s - v)) + (t - v))
        hi = s
    return np.ldexp(hi + lo, e[:, None] + f[None, :])


def phi_pair(m, k, n, phi=1.0, seed=1):
    return phi_matrix(m, k, phi, (seed, 0)), phi_matrix(k, n, phi, (seed, 1))


def chunk_products(be, A, B, p):
    """(device buffer, exact int64 product) for every GEMM call of plan p."""
    rows = _lines(be, be.asarray(A), 1)
    cols = _lines(be, be.asarray(B), 0)
    a_cat = _split(be, be.asarray(A), rows.exps, p, p.m, reverse=False, overwrite=False)
    b_cat = _split(be, be.asarray(B).T, cols.exps, p, p.n_pad, reverse=True, overwrite=False)
    recipe = gemm_recipe(p.format.recipe)
    ia = decode_operand(recipe, be.to_numpy(a_cat)).astype(np.int64)
    ib = decode_operand(recipe, be.to_numpy(b_cat)).astype(np.int64)
    out = []
    for c in p.chunks:
        buf = be.xp.empty((p.m, p.n_pad), dtype=p.format.accumulator)
        be.gemm_ex(a_cat[:, c.a_start:c.a_start + c.length], b_cat[:, c.b_start:c.b_start + c.length].T, buf,
                   recipe=p.format.recipe)
        exact = ia[:, c.a_start:c.a_start + c.length] @ ib[:, c.b_start:c.b_start + c.length].T
        out.append((be.to_numpy(buf), exact))
    return out


# --------------------------------------------------------------------------- formats and plans

def test_format_table_bounds():
    fp32, int8 = ozaki.FORMATS["fp32"], ozaki.FORMATS["int8"]
    assert int8.terms(7) == 133144 and 133144 * 127**2 < 2**31 <= 133145 * 127**2
    assert fp32.terms(7) == 1040 and fp32.alpha_for(1024) == 7 and fp32.alpha_for(4096) == 6
    for fmt in ozaki.FORMATS.values():
        for a in range(1, fmt.bits + 1):
            assert fmt.terms(a) * (2**a - 1) ** 2 <= fmt.limit < (fmt.terms(a) + 1) * (2**a - 1) ** 2
            assert fmt.alpha_for(fmt.terms(a)) >= a
        top = np.array([1.0 - 2.0**fmt.bits, 2.0**fmt.bits - 1])
        stored = ozaki.encode(np, top, fmt.storage)
        assert stored.dtype == fmt.storage
        np.testing.assert_array_equal(decode_operand(gemm_recipe(fmt.recipe), stored), top)


@pytest.mark.parametrize("fmt,k,alpha,k_block", [
    ("fp32", 1024, 7, 1040), ("fp32", 4096, 7, 1040), ("fp32", 100, 8, 256),
    ("int8", 16384, 7, 133136), ("int8", 300000, 7, 133136), ("fp16", 5000, 5, 4352), ("bf16", 100, 7, 256),
    ("bf16", 48, 8, 64),
])
def test_alpha_and_block_choice(fmt, k, alpha, k_block):
    assert ozaki.choose_alpha(ozaki.FORMATS[fmt], k) == (alpha, k_block)


@pytest.mark.parametrize("slices,k,block", [(1, 16, 1040), (3, 1000, 1040), (5, 3000, 1040), (4, 40, 64)])
def test_chunks_cover_every_pair_of_each_diagonal_once(slices, k, block):
    p = ozaki.plan(8, k, 8, slices, "fp32", k_block=block)
    assert p.pairs == slices * (slices + 1) // 2
    seen = {}
    for c in p.chunks:
        assert c.length <= p.k_block and c.length % 16 == 0 and c.a_start % 16 == 0 and c.b_start % 16 == 0
        for x in range(c.length):
            s, t = (c.a_start + x) // p.ldk + 1, slices - (c.b_start + x) // p.ldk
            assert s + t == c.diagonal and (c.a_start + x) % p.ldk == (c.b_start + x) % p.ldk
            seen[(s, t)] = seen.get((s, t), 0) + 1
    assert seen == {(s, t): p.ldk for s in range(1, slices + 1) for t in range(1, slices + 2 - s)}
    diagonals = [c.diagonal for c in p.chunks]
    assert diagonals == sorted(diagonals, reverse=True)
    assert [c.closes for c in p.chunks] == [i == len(diagonals) - 1 or diagonals[i + 1] != d
                                           for i, d in enumerate(diagonals)]


def test_bounded_memory_holds_at_most_max_held_buffers():
    unbounded = ozaki.plan(16384, 16384, 16384, 10, "fp32")
    assert len(unbounded.chunks) > ozaki.MAX_HELD and unbounded.held == len(unbounded.chunks)
    bounded = ozaki.plan(16384, 16384, 16384, 10, "fp32", memory=2**50)
    assert bounded.held == ozaki.MAX_HELD
    assert len(bounded.batches) == -(-len(bounded.chunks) // ozaki.MAX_HELD)


def test_bounded_memory_holds_small_buffers_up_to_held_bytes():
    """Small products hold as many buffers as HELD_BYTES (at most MAX_FOLD): fewer fold launches, each of which
    reads and writes the accumulators; where memory is short, fewer."""
    p = ozaki.plan(2048, 2048, 2048, 11, "fp32", memory=2**50)
    buffer = p.workspace()["buffers"] // p.held
    assert p.held == min(len(p.chunks), MAX_FOLD, HELD_BYTES // buffer) > 8
    assert len(p.batches) == -(-len(p.chunks) // p.held)
    tight = ozaki.plan(2048, 2048, 2048, 11, "fp32", memory=p.workspace_bytes // 2)
    assert 1 <= tight.held < p.held and tight.workspace_bytes <= 0.9 * (p.workspace_bytes // 2)

def test_plan_reports_workspace_and_fits_memory():
    p = ozaki.plan(16384, 16384, 16384, 9, "int8")
    assert (p.alpha, p.pairs, p.gemm_calls, p.held) == (7, 45, 10, 10)
    ws = p.workspace()
    assert ws["slices_a"] == ws["slices_b"] == 9 * 16384**2 and ws["buffers"] == 10 * 4 * 16384**2
    assert "alpha = 7" in p.report() and "workspace" in p.report() and p.as_dict()["fold_launches"] == 1
    small = ozaki.plan(4096, 4096, 4096, 4, "fp32", memory=5 * 2**28)
    assert 1 <= small.held < small.gemm_calls and small.workspace_bytes <= 0.9 * 5 * 2**28
    assert small.workspace()["compensation"] == 8 * 4096**2 and p.workspace()["compensation"] == 0
    with pytest.raises(ozaki.WorkspaceError, match="workspace beyond"):
        ozaki.plan(4096, 4096, 4096, 4, "fp32", memory=2**30)


# --------------------------------------------------------------------------- exactness

def worst_case(m, k, n):
    """Entries just below 1: every digit is 2**alpha - 1, so sums reach the accumulator bound."""
    return np.full((m, k), 1 - 2.0**-53), np.full((k, n), -(1 - 2.0**-53))


@pytest.mark.parametrize("fmt", FORMATS)
def test_slice_pair_products_are_exact_across_blocked_k(fmt):
    """Every GEMM call (a chunk of a diagonal) equals the exact integer product of its digits,
    where k needs several calls per pair and where sums reach the accumulator's bound."""
    f = ozaki.FORMATS[fmt]
    k = 2 * f.terms(f.min_alpha) + 37 if f.limit < 2**31 else 1000
    block = None if f.limit < 2**31 else 208          # INT8 blocks only past 133,136 terms: force it
    A, B = phi_pair(5, k, 7, 1.0)
    p = ozaki.plan(5, k, 7, 3, fmt, k_block=block)
    assert any(c.length < (c.diagonal - 1) * p.ldk for c in p.chunks), "k must need blocking"
    for buf, exact in chunk_products(NP, A, B, p):
        np.testing.assert_array_equal(buf.astype(np.int64), exact)
    Aw, Bw = worst_case(3, p.k_block, 5)
    pw = ozaki.plan(3, p.k_block, 5, min(3, 53 // p.alpha), fmt, k_block=block)
    for buf, exact in chunk_products(NP, Aw, Bw, pw):
        np.testing.assert_array_equal(buf.astype(np.int64), exact)
    assert max(abs(int(e.min())) for _, e in chunk_products(NP, Aw, Bw, pw)) > f.limit // 2


@pytest.mark.parametrize("backend", ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def test_output_tiles_give_the_same_bits(backend, monkeypatch):
    """int8 GEMMs are issued as output tiles (faster on cuBLAS); tiles of 16 on a 40 x 37 product
    (ragged edges) must change nothing."""
    A, B = phi_pair(40, 50, 37, phi=1.0, seed=5)
    whole = ozaki.matmul(A, B, slices=4, slice_format="int8", backend=backend)
    monkeypatch.setitem(ozaki.FORMATS, "int8", replace(ozaki.FORMATS["int8"], tile=16))
    ozaki.PLANS.clear()                                   # kept plans hold the format they were built with
    be, shapes = get_backend(backend), []
    real = be.gemm_ex
    monkeypatch.setattr(be, "gemm_ex", lambda A, B, C, **kw: (shapes.append(C.shape), real(A, B, C, **kw)))
    tiled = ozaki.matmul(A, B, slices=4, slice_format="int8", backend=be)
    assert max(shapes) <= (16, 16) and len(shapes) == 9 * len(ozaki.plan(40, 50, 37, 4, "int8").chunks)
    assert _tiles(40, 48, 16)[-1] == (slice(32, 40), slice(32, 48))
    np.testing.assert_array_equal(get_backend(backend).to_numpy(tiled), get_backend(backend).to_numpy(whole))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(9, 33, 13), (1, 5, 1), (20, 70, 3)])
def test_matmul_equals_independent_emulation_bitwise(fmt, shape):
    A, B = phi_pair(*shape, phi=2.0, seed=3)
    A[2 % shape[0]] = 0.0                                                   # a zero row
    for slices in (1, 3, 6):
        C = ozaki.matmul(A, B, slices=slices, slice_format=fmt, backend="numpy")
        np.testing.assert_array_equal(C, emulated(A, B, slices, fmt))
    assert not np.signbit(C[A.sum(axis=1) == 0]).any()


def test_batched_fold_with_open_diagonal_gives_the_same_bits(monkeypatch):
    A, B = phi_pair(40, 2100, 30)
    whole = ozaki.matmul(A, B, slices=4, backend="numpy")
    p = ozaki.plan(40, 2100, 30, 4, "fp32")
    free = p.workspace_bytes - p.workspace()["buffers"] + 2 * 8 * 40 * 30 + 3 * 40 * 32 * 4
    monkeypatch.setattr(NP, "memory_info", lambda: (int(free / ozaki.HEADROOM) + 1, 2**40))
    tight = ozaki.configure(A, B, slices=4, backend="numpy")
    assert tight.held < tight.gemm_calls and tight.needs_open and len(tight.batches) > 2
    np.testing.assert_array_equal(ozaki.matmul(A, B, slices=4, backend="numpy"), whole)
    monkeypatch.setattr(NP, "memory_info", lambda: (2**16, 2**40))
    with pytest.raises(ozaki.WorkspaceError, match="workspace"):
        ozaki.matmul(A, B, slices=4, backend="numpy")


# --------------------------------------------------------------------------- the paper's form (rounded tails)

@pytest.mark.parametrize("slices", [1, 2, 4])
def test_rounded_tail_plan_has_the_triangle_with_one_inexact_diagonal(slices):
    p = ozaki.plan(8, 40, 8, slices, "fp32", remainder=True, k_block=32)
    assert p.pairs == slices * (slices + 1) // 2 and p.b_positions == 2 * slices - 1
    exact = [c for c in p.chunks if c.exact]
    assert {c.diagonal for c in exact} == set(range(2, slices + 1))
    assert {c.diagonal for c in p.chunks if not c.exact} == {slices + 1}
    assert sum(c.length for c in p.chunks) == p.pairs * p.ldk
    with pytest.raises(ValueError, match="needs a float format"):
        ozaki.plan(8, 40, 8, slices, "int8", remainder=True)


@pytest.mark.parametrize("variant", ["fp32r", "tf32r", "fp16r", "bf16r"])
def test_rounded_tails_hold_the_rest_of_each_row(variant):
    fmt, remainder = ozaki.parse_variant(variant)
    _, B = phi_pair(6, 50, 9, phi=2.0, seed=8)
    p = ozaki.plan(6, 50, 9, 4, fmt, remainder=remainder)
    cols = _lines(NP, B, 0)
    b_cat = decode_operand(gemm_recipe(fmt.recipe), _split(NP, B.T, cols.exps, p, p.n_pad, True, False))
    digits = ozaki.split_values(np, B.T, cols.exps, p.alpha, 4)
    for j in range(1, 5):
        pos = 2 * 4 - 1 - j
        tail = np.ldexp(b_cat[:9, pos * p.ldk:pos * p.ldk + 50], (cols.exps - p.alpha * j)[:, None])
        rest = B.T - sum(np.ldexp(digits[t], (cols.exps - p.alpha * (t + 1))[:, None]) for t in range(j - 1))
        scale = np.ldexp(1.0, cols.exps - p.alpha * (j - 1))[:, None]
        assert (np.abs(tail - rest) <= 2.0**-fmt.bits * np.abs(rest) + fmt.tiny * scale).all()
    assert ozaki.parse_variant("int8") == (ozaki.FORMATS["int8"], False)
    with pytest.raises(ValueError, match="unknown slice format 'int8r'"):
        ozaki.parse_variant("int8r")


def test_paper_form_gains_alpha_bits_per_split_over_sgemm():
    A, B = phi_pair(128, 128, 128, phi=0.1, seed=1)
    ref = exact_matmul(A, B, backend="numpy")
    sgemm = error_report(A.astype(np.float32) @ B.astype(np.float32), ref).max_rel
    errors = [error_report(ozaki.matmul(A, B, slices=s, remainder=True, backend="numpy"), ref).max_rel
              for s in range(1, 7)]
    assert errors[0] < 4 * sgemm                          # one slice: SGEMM on the scaled inputs
    assert all(b < a / 30 for a, b in pairwise(errors[1:]))
    assert errors[1] < sgemm / 10 and errors[5] < sgemm * 1e-9   # the paper: 0-2 and 7-9 digits gained
    exact_only = error_report(ozaki.matmul(A, B, slices=3, backend="numpy"), ref).max_rel
    assert errors[2] < exact_only / 1e4
    with pytest.raises(ValueError, match="exact digits only"):
        ozaki.matmul(A, B, remainder=True, backend="numpy")
    p = ozaki.plan(128, 128, 128, 3, "fp32", remainder=True)
    for (buf, exact), c in zip(chunk_products(NP, A, B, p), p.chunks):
        if c.exact:
            np.testing.assert_array_equal(buf.astype(np.int64), exact)


# --------------------------------------------------------------------------- properties

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=60, deadline=None)
@given(X=hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 6)), elements=finite),
       alpha=st.integers(1, 12), slices=st.integers(1, 10))
def test_split_is_exact_bounded_and_sign_symmetric(X, alpha, slices):
    e = np.frexp(np.abs(X).max(axis=1))[1].astype(np.int32)
    digits = ozaki.split_values(np, X, e, alpha, slices)
    assert all((np.abs(d) <= 2**alpha - 1).all() and (d == np.trunc(d)).all() for d in digits)
    for d, neg in zip(digits, ozaki.split_values(np, -X, e, alpha, slices)):
        np.testing.assert_array_equal(neg, -d)
    for (i, j), x in np.ndenumerate(X):
        part = sum(Fraction(int(d[i, j])) * Fraction(2) ** (int(e[i]) - alpha * (t + 1))
                   for t, d in enumerate(digits))
        rest = Fraction(x) - part
        assert abs(rest) < Fraction(2) ** (int(e[i]) - alpha * slices)
        assert rest == 0 or (rest > 0) == (x > 0), "truncation keeps the remainder's sign"


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 7), k=st.integers(1, 40), n=st.integers(1, 7), slices=st.integers(1, 7),
       fmt=st.sampled_from(FORMATS), phi=st.sampled_from([0.0, 1.0, 3.0]), seed=st.integers(0, 2**16))
def test_matmul_matches_emulation_on_random_shapes(m, k, n, slices, fmt, phi, seed):
    A, B = phi_pair(m, k, n, phi, seed)
    np.testing.assert_array_equal(ozaki.matmul(A, B, slices=slices, slice_format=fmt, backend="numpy"),
                                  emulated(A, B, slices, fmt))


# --------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
def test_gpu_slice_pair_products_are_exact_at_the_bound(fmt, cupy_backend):
    f = ozaki.FORMATS[fmt]
    Aw, Bw = worst_case(35, f.terms(f.min_alpha) // 16 * 16, 21)
    p = ozaki.plan(35, Aw.shape[1], 21, min(4, 53 // f.min_alpha), fmt)
    for buf, exact in chunk_products(cupy_backend, Aw, Bw, p):
        np.testing.assert_array_equal(buf[:, :21].astype(np.int64), exact[:, :21])
    k = 2 * f.terms(f.min_alpha) + 37 if f.limit < 2**31 else 3000
    A, B = phi_pair(37, k, 29, 2.0)
    p = ozaki.plan(37, k, 29, 3, fmt, k_block=None if f.limit < 2**31 else 1024)
    for buf, exact in chunk_products(cupy_backend, A, B, p):
        np.testing.assert_array_equal(buf.astype(np.int64), exact)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(33, 70, 45), (1, 5000, 3), (130, 257, 67)])
def test_gpu_matmul_equals_numpy_bitwise(fmt, shape, cupy_backend):
    A, B = phi_pair(*shape, phi=2.0, seed=9)
    A[0] = 0.0
    B[:, -1] *= 2.0**-900
    for slices in (2, 7):
        want = ozaki.matmul(A, B, slices=slices, slice_format=fmt, backend="numpy")
        got = ozaki.matmul(cupy_backend.asarray(A), cupy_backend.asarray(B), slices=slices, slice_format=fmt,
                           backend=cupy_backend)
        np.testing.assert_array_equal(cupy_backend.to_numpy(got), want)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [*FORMATS, "fp32r", "tf32r", "fp16r", "bf16r"])
def test_gpu_slicing_kernel_writes_the_numpy_slices_bitwise(variant, cupy_backend):
    fmt, remainder = ozaki.parse_variant(variant)
    A, B = phi_pair(45, 70, 37, phi=2.0, seed=11)
    A[3] *= 2.0**-1000
    B[:, 5] = 0.0
    p = ozaki.plan(45, 70, 37, 5, fmt, remainder=remainder)
    for X, rows_pad, reverse in ((A, p.m, False), (B.T, p.n_pad, True)):
        lines = _lines(NP, X, 1)
        want = _split(NP, X, lines.exps, p, rows_pad, reverse, False)
        big = cupy_backend.xp.zeros((2 * X.shape[0], X.shape[1] + 3))
        big[::2, 3:] = cupy_backend.asarray(X)
        got = _split(cupy_backend, big[::2, 3:], cupy_backend.asarray(lines.exps), p, rows_pad, reverse, False)
        np.testing.assert_array_equal(cupy_backend.to_numpy(got), want)
    got = ozaki.matmul(cupy_backend.asarray(A), cupy_backend.asarray(B), slices=5, slice_format=fmt.name,
                       remainder=remainder, backend=cupy_backend)
    want = ozaki.matmul(A, B, slices=5, slice_format=fmt.name, remainder=remainder, backend="numpy")
    if remainder:     # the last diagonal is a rounded float GEMM: compare errors, not bits
        ref = exact_matmul(A, B, backend="numpy")
        assert error_report(cupy_backend.to_numpy(got), ref).nrm <= 4 * error_report(want, ref).nrm + 1e-300
    else:
        np.testing.assert_array_equal(cupy_backend.to_numpy(got), want)
