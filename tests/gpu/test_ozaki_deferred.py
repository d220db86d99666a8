"""The device verdict of ``target=`` calls (:mod:`gpu.ozaki.deferred`): the schedule holds every count's work
in the host-verdict order, the result is bitwise the host verdict's, counts beyond the schedule give the IEEE
product, and on the GPU the call waits for nothing."""

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accuracy.generate import phi_matrix
from gpu import ozaki
from gpu.ozaki import deferred
from gpu.ozaki.ops import FINALIZE, LOAD_ACC, LOAD_OPEN, STORE_OPEN, HostOps, encode_verdict
from gpu.ozaki.plan import WorkspaceError, plan


def phi_pair(m, k, n, phi=1.0, seed=1):
    return phi_matrix(m, k, phi, (seed, 0)), phi_matrix(k, n, phi, (seed, 1))


@pytest.mark.parametrize("fmt,k,slices,held", [("fp32", 2000, 7, 3), ("int8", 300, 12, 8), ("bf16", 5000, 5, 1)])
def test_the_schedule_is_the_plans_chunks_in_batches_of_the_held_buffers_cut_by_diagonal(fmt, k, slices, held):
    """The pieces, in order, are the plan's chunks; the batches are runs of ``held`` chunks across diagonals, each
    folded once, in the piece that holds its last chunk (its lowest diagonal); the last batch finalizes."""
    p = plan(64, k, 64, slices, fmt)
    p = type(p)(**{**p.__dict__, "held": held})
    steps = deferred.schedule(p).steps
    assert [d for d, _ in steps] == list(range(slices + 1, 1, -1))
    pieces = [piece for _, run in steps for piece in run]
    assert [c for piece in pieces for c in piece.chunks] == list(p.chunks)
    assert all({c.diagonal for c in piece.chunks} == {d} for d, run in steps for piece in run)
    folds = [piece.fold for piece in pieces if piece.fold is not None]
    runs = [tuple(p.chunks[i:i + held]) for i in range(0, len(p.chunks), held)]
    assert [b.chunks for b in folds] == runs
    slot = 0
    for piece in pieces:
        assert piece.first == slot
        slot = 0 if piece.fold is not None else slot + len(piece.chunks)
    for i, b in enumerate(folds):
        assert b.flags & LOAD_ACC
        assert bool(b.flags & LOAD_OPEN) == (i > 0 and not runs[i - 1][-1].closes)
        assert bool(b.flags & STORE_OPEN) == (not b.chunks[-1].closes)
        assert bool(b.flags & FINALIZE) == (i == len(folds) - 1)
    assert deferred.schedule(p).final == folds[-1] and folds[-1].chunks[-1].diagonal == 2


def test_a_count_folds_about_once_per_held_buffers_not_once_per_diagonal():
    """INT8 slices make one GEMM call per diagonal here: with 8 buffers held, a count of 11 (diagonals 12..2) runs
    the folds of the two batches that hold those diagonals (a fold runs when its lowest diagonal does)."""
    p = plan(64, 300, 64, 32, "int8")
    p = type(p)(**{**p.__dict__, "held": 8})
    steps = deferred.schedule(p).steps
    assert all(len(run) == 1 and len(run[0].chunks) == 1 for _, run in steps)
    running = [piece.fold for d, run in steps if d <= 12 for piece in run if piece.fold is not None]
    assert len(running) == 2


def test_most_slices_shrinks_to_the_memory_and_refuses_where_none_fits():
    fmt = ozaki.FORMATS["fp32"]
    assert deferred.most_slices(64, 64, 64, ozaki.FORMATS["int8"], None, 2**40).slices == deferred.MOST_DEFAULT
    assert deferred.most_slices(64, 64, 64, ozaki.FORMATS["int8"], None, 2**40, cap=64).slices == 64
    assert deferred.most_slices(64, 64, 64, fmt, None, 2**40, cap=9).slices == 9
    small = deferred.most_slices(512, 512, 512, fmt, None, 60 * 2**20)
    assert 1 <= small.slices < deferred.MOST_DEFAULT and small.workspace_bytes <= 30 * 2**20
    with pytest.raises(WorkspaceError, match="not even one slice"):
        deferred.most_slices(512, 512, 512, fmt, None, 2**20)


@pytest.mark.parametrize("fmt", ["fp32", "int8", "bf16"])
@pytest.mark.parametrize("k", [64, 1000, 4096, 16384])
def test_gemm_calls_counts_the_plans_calls_without_making_them(fmt, k):
    for slices in (1, 7, 30):
        p = plan(8, k, 8, slices, fmt)
        assert deferred.gemm_calls(slices, p.ldk, p.k_block) == len(p.chunks)


def test_the_graph_holds_at_most_its_gemm_calls():
    p = deferred.most_slices(256, 8192, 256, ozaki.FORMATS["fp32"], None, 2**40)
    assert len(p.chunks) <= deferred.MAX_GEMM_CALLS < len(plan(256, 8192, 256, p.slices + 1, "fp32").chunks)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), shape=st.tuples(st.integers(1, 40), st.integers(1, 90), st.integers(1, 40)),
       phi=st.sampled_from([0.5, 2.0, 6.0]), fmt=st.sampled_from(["fp32", "int8", "bf16"]),
       target=st.sampled_from(["dgemm", "sgemm", 1e-12]), cap=st.sampled_from([None, 3, 9]))
def test_the_device_verdict_gives_the_host_verdicts_bits_or_the_ieee_product(seed, shape, phi, fmt, target, cap):
    m, k, n = shape
    A, B = phi_pair(m, k, n, phi, seed)
    options = {"slice_format": fmt, "target": target, "max_slices": cap}
    device = ozaki.Plan(A, B, options=options, backend="numpy", hold=False)
    C = device.execute(A, B)
    verdict = device.last_verdict()
    if verdict["ieee"]:
        np.testing.assert_array_equal(C, A @ B)
        assert verdict["slices"] == 0 or verdict["slices"] > device.max_slices
        return
    host = ozaki.Plan(A, B, options={**options, "verdict": "host"}, backend="numpy")
    np.testing.assert_array_equal(C, host.execute(A, B))
    assert host.last_verdict() == {**verdict, "ieee": False} and host.max_slices is None


def test_a_count_above_the_schedule_gives_the_ieee_product_and_says_so():
    A, B = phi_pair(30, 50, 20, 1.0)
    out = np.full((30, 20), 7.0)
    plan_ = ozaki.Plan(A, B, out=out, options={"max_slices": 2}, backend="numpy")
    assert plan_.last_verdict() is None and plan_.max_slices == 2
    assert plan_.execute(A, B, out) is out
    np.testing.assert_array_equal(out, A @ B)
    assert plan_.last_verdict()["ieee"] and plan_.last_verdict()["slices"] > 2


def test_nan_and_infinity_keep_the_library_pattern_under_the_device_verdict():
    A, B = phi_pair(12, 9, 7, 2.0)
    A[3, 1], B[2, 5] = np.nan, np.inf
    C = ozaki.matmul(A, B, backend="numpy")
    with np.errstate(invalid="ignore"):
        R = A @ B
    np.testing.assert_array_equal(np.isnan(C), np.isnan(R))
    np.testing.assert_array_equal(np.isinf(C), np.isinf(R))
    host = ozaki.matmul(A, B, verdict="host", backend="numpy")
    np.testing.assert_array_equal(C, host)


def test_the_split_writes_only_the_words_count_of_digits():
    A = phi_matrix(8, 16, 1.0, (3, 0))
    p = plan(8, 16, 8, 6, "fp32")
    from gpu.ozaki.slicing import slice_layout

    exps = np.frexp(np.abs(A).max(axis=1))[1].astype(np.int32)
    full, part = (np.full((8, 6 * p.ldk), -1.0, np.float32) for _ in range(2))
    HostOps(None).split(A, exps, p, 8, slice_layout(p, False), False, full)
    HostOps(None).split(A, exps, p, 8, slice_layout(p, False), False, part,
                        limit=np.array([encode_verdict(4, False, 1.0)], np.int32))
    np.testing.assert_array_equal(part[:, :4 * p.ldk], full[:, :4 * p.ldk])
    assert (part[:, 4 * p.ldk:] == 0).all()                 # the rest is never read; NumPy zero-fills it


@pytest.mark.parametrize("bad", [{"verdict": "later"}, {"max_slices": 0}, {"max_slices": 65}])
def test_bad_verdict_options_are_refused(bad):
    A, B = phi_pair(4, 4, 4)
    with pytest.raises(ValueError, match="verdict|max_slices"):
        ozaki.matmul(A, B, backend="numpy", **bad)


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["fp32", "int8", "bf16"])
def test_gpu_device_verdict_gives_numpys_bits_at_every_count(fmt, cupy_backend):
    """phi 0.5 to 6 take different counts; a workspace's graph serves every count."""
    cp = cupy_backend.xp
    plan_ = None
    for phi in (0.5, 2.0, 6.0):
        A, B = phi_pair(150, 700, 90, phi, 5)
        a, b = cp.asarray(A), cp.asarray(B)
        plan_ = plan_ or ozaki.Plan(a, b, options={"slice_format": fmt}, backend=cupy_backend)
        C = cp.asnumpy(plan_.execute(a, b))
        want = ozaki.Plan(A, B, options={"slice_format": fmt}, backend="numpy")
        np.testing.assert_array_equal(C, want.execute(A, B))
        assert plan_.last_verdict() == want.last_verdict() and not plan_.last_verdict()["ieee"]
    assert len(plan_._deferred.graphs) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["fp32", "int8"])
def test_gpu_the_steps_before_the_products_replay_as_a_graph_with_the_data_of_each_call(fmt, cupy_backend):
    """From an address set's second call the exponents, bound, verdict and slicing replay as one graph on the
    plan's buffers: new data in the same arrays (counts from 0.5 to 6) still give NumPy's bits and verdict."""
    cp = cupy_backend.xp
    A, B = phi_pair(150, 700, 90, 1.0, 5)
    a, b = cp.asarray(A), cp.asarray(B)
    plan_ = ozaki.Plan(a, b, options={"slice_format": fmt}, backend=cupy_backend)
    for phi in (1.0, 0.5, 6.0, 2.0):
        A, B = phi_pair(150, 700, 90, phi, 6)
        a[...], b[...] = cp.asarray(A), cp.asarray(B)
        want = ozaki.Plan(A, B, options={"slice_format": fmt}, backend="numpy")
        expected = want.execute(A, B)
        for _ in range(2):
            np.testing.assert_array_equal(cp.asnumpy(plan_.execute(a, b)), expected)
            assert plan_.last_verdict() == want.last_verdict()
    assert len(plan_._deferred.before.captured) == 1


@pytest.mark.gpu
def test_gpu_counts_beyond_the_schedule_give_the_ieee_product(cupy_backend):
    cp = cupy_backend.xp
    A, B = phi_pair(100, 300, 80, 1.0, 7)
    a, b = cp.asarray(A), cp.asarray(B)
    plan_ = ozaki.Plan(a, b, options={"max_slices": 3}, backend=cupy_backend)
    C = cp.asnumpy(plan_.execute(a, b))
    assert plan_.last_verdict()["ieee"]
    np.testing.assert_allclose(C, A @ B, rtol=300 * 2.0**-53, atol=1e-300)
    far = cp.asarray(np.array([[1.0, 2.0**-700]])), cp.asarray(np.array([[2.0**-700], [2.0**700]]))
    assert cp.asnumpy(ozaki.matmul(*far, backend=cupy_backend))[0, 0] == 1.0


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["fp32", "int8"])
def test_gpu_a_device_verdict_call_returns_while_the_stream_is_busy(fmt, cupy_backend):
    """A plan that holds its workspace captures its graph when built: behind a 200 ms kernel its first call and
    a repeat return at once, and so does ``matmul``'s repeat."""
    from tests.gpu.busy import busy

    cp = cupy_backend.xp
    A, B = (cp.asarray(x) for x in phi_pair(512, 512, 512, 1.0, 2))
    plan_ = ozaki.Plan(A, B, options={"slice_format": fmt}, backend=cupy_backend)
    ozaki.matmul(A, B, slice_format=fmt, backend=cupy_backend)
    busy(1)
    cp.cuda.get_current_stream().synchronize()
    for call in (lambda: plan_.execute(A, B), lambda: plan_.execute(A, B),
                 lambda: ozaki.matmul(A, B, slice_format=fmt, backend=cupy_backend)):
        busy(200)
        start = time.perf_counter()
        call()
        took = time.perf_counter() - start
        assert not cp.cuda.get_current_stream().done and took < 0.02, f"the call took {took * 1e3:.1f} ms"
        cp.cuda.get_current_stream().synchronize()


def test_threads_sharing_a_plan_that_holds_its_workspace_take_turns():
    """A held plan (``matmul`` keeps such device-verdict plans on the GPU) is one workspace: calls from several
    threads issue one at a time, so each gets its own operands' product."""
    from concurrent.futures import ThreadPoolExecutor

    pairs = [phi_pair(64, 300, 48, 1.0 + i % 3, seed=10 + i) for i in range(12)]
    want = [ozaki.matmul(A, B, backend="numpy") for A, B in pairs]
    shared = ozaki.Plan(*pairs[0], backend="numpy")
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda ab: shared.execute(*ab), pairs))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("tile", [None, 16])
def test_fp32_batches_issued_on_addresses_equal_the_views_calls(tile):
    """FP32 slices' GEMM calls go out on addresses computed from the workspace's strides (one checked call per
    chunk length and tile): the same SGEMM on the same bytes as a call on the chunk's views."""
    from gpu.backend import get_backend
    from gpu.ozaki.common import _tiles
    from gpu.ozaki.execution import Layout

    be = get_backend("numpy")
    p = plan(40, 2000, 27, 5, "fp32")
    p = type(p)(**{**p.__dict__, "held": 4})
    lay = Layout(p)
    lay.calls.tiles = _tiles(p.m, p.n_pad, tile)
    rng = np.random.default_rng(3)
    block = np.zeros(lay.nbytes, np.uint8)
    work = lay.carve(block)
    work["a"][...] = rng.integers(-127, 128, work["a"].shape)
    work["b"][...] = rng.integers(-127, 128, work["b"].shape)
    for chunks, *_ in lay.batches:
        lay.calls.issue(be, work, chunks)
        for slot, c in enumerate(chunks):
            a, b = work["a"][:, c.a_start:c.a_start + c.length], work["b"][:, c.b_start:c.b_start + c.length]
            want = np.empty((p.m, p.n_pad), np.float32)
            be.gemm_ex(a, b.T, want, recipe="fp32")
            np.testing.assert_array_equal(work["buffers"][slot], want)
    shapes = {(r.stop - r.start, c.stop - c.start) for r, c in lay.calls.tiles}
    assert lay.calls.fast and len(lay.calls.calls) == len({c.length for c in p.chunks}) * len(shapes)
