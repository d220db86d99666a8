"""Split-K as a plan (``gpu.splitk.Plan``, and ``matmul`` as a kept plan): the checks, the split, the kernels
and the workspace decided once per operand signature; alpha and beta per call; no wait for the device on the
default path; NaN and infinity where the library GEMM has them."""

import threading
import time

import numpy as np
import pytest

from gpu import splitk
from gpu.backend.plans import PlanMismatch
from gpu.splitk import MIN_K, Options, Plan
from tests.gpu.busy import busy


def operands(be, m, k, n, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (be.asarray(rng.uniform(-1, 1, (m, k)).astype(dtype)),
            be.asarray(rng.uniform(-1, 1, (k, n)).astype(dtype)))


def host(be, x):
    return np.array(be.to_numpy(x))


@pytest.fixture
def decisions(monkeypatch):
    """``decisions(backend)``: a list that gets an entry each time a split-K product reads the device's limits,
    which it does once per plan it builds."""
    def count(be):
        ops = be.ops("splitk")
        seen, limits = [], type(ops).limits
        monkeypatch.setattr(type(ops), "limits", lambda self: seen.append(1) or limits(self))
        return seen
    return count


# --- built once, executed per call ----------------------------------------------------------------------------

def test_a_plan_gives_the_bits_of_matmul_call_after_call(backend):
    A, B = operands(backend, 8, 3 * MIN_K + 5, 6, seed=1)
    A2, B2 = operands(backend, 8, 3 * MIN_K + 5, 6, seed=2)
    want = host(backend, splitk.matmul(A, B, chunks=5, backend=backend))
    with Plan(A, B, options=Options(chunks=5), backend=backend) as plan:
        assert plan.split.chunks == 5 and plan.options == Options(chunks=5)
        first = host(backend, plan.execute(A, B))
        other = host(backend, plan.execute(A2, B2))
        again = host(backend, plan.execute(A, B))
    assert np.array_equal(first, want) and np.array_equal(again, want) and not np.array_equal(other, want)
    with pytest.raises(ValueError, match="freed"):
        plan.execute(A, B)


def test_repeated_calls_decide_once_per_signature(backend, decisions):
    seen = decisions(backend)
    A, B = operands(backend, 3, MIN_K + 17, 5, seed=3)
    first = host(backend, splitk.matmul(A, B, backend=backend))
    for _ in range(4):
        assert np.array_equal(host(backend, splitk.matmul(A, B, backend=backend)), first)
    assert len(seen) == 1
    splitk.matmul(A, B, deterministic=False, backend=backend)            # other options: another plan
    assert len(seen) == 2


def test_alpha_and_beta_are_per_call_and_build_no_plan(backend, decisions):
    seen = decisions(backend)
    A, B = operands(backend, 5, 2 * MIN_K + 9, 3, seed=4)
    base = host(backend, splitk.matmul(A, B, backend=backend))
    for alpha in (2.0, -0.5, 4.0, 0.25):                                 # powers of two: alpha once, exactly
        assert np.array_equal(host(backend, splitk.matmul(A, B, alpha=alpha, backend=backend)), alpha * base)
    C0 = np.random.default_rng(5).uniform(-1, 1, (5, 3))
    for beta in (1.0, -3.0):
        C = splitk.matmul(A, B, beta=beta, out=backend.asarray(C0.copy()), backend=backend)
        np.testing.assert_allclose(host(backend, C), base + beta * C0, rtol=1e-13, atol=1e-13)
    assert len(seen) == 2                                                 # one plan without out, one with
    with pytest.raises(ValueError, match="pass that C as out="):
        splitk.matmul(A, B, beta=1.0, backend=backend)


def test_a_kept_plan_allocates_no_workspace_per_call(backend):
    """The deterministic mode's partials (chunks x m x n) live in the plan: a repeated call allocates none."""
    m = n = 32
    A, B = operands(backend, m, 64 * 64, n, seed=6)
    C = backend.xp.empty((m, n))
    splitk.matmul(A, B, out=C, chunks=64, backend=backend)
    workspace = 64 * m * n * 8
    with backend.track_allocations() as report:
        splitk.matmul(A, B, out=C, chunks=64, backend=backend)
    assert report.peak_bytes < workspace // 4, report.as_dict()


def test_options_as_a_dataclass_a_dict_or_keywords(backend):
    A, B = operands(backend, 4, MIN_K + 3, 4, seed=7)
    want = host(backend, splitk.matmul(A, B, chunks=3, deterministic=True, backend=backend))
    for kw in ({"options": Options(chunks=3)}, {"options": {"chunks": 3}}, {"options": Options(chunks=9), "chunks": 3}):
        assert np.array_equal(host(backend, splitk.matmul(A, B, backend=backend, **kw)), want)
    with pytest.raises(TypeError, match="no option 'chunk'"):
        splitk.matmul(A, B, options={"chunk": 3}, backend=backend)


def test_a_plan_refuses_operands_of_another_signature(backend):
    A, B = operands(backend, 4, MIN_K, 4)
    plan = Plan(A, B, backend=backend)
    with pytest.raises(PlanMismatch, match="A's shape"):
        plan.execute(*operands(backend, 5, MIN_K, 4))
    with pytest.raises(PlanMismatch, match="out"):
        plan.execute(A, B, backend.xp.empty((4, 4)))


# --- per call: what can change between calls of one signature ------------------------------------------------

def test_out_that_overlaps_an_operand_is_refused_on_a_kept_plan(backend):
    m, k, n = 4, MIN_K, 3
    big = backend.xp.zeros((m, k))
    other, B = operands(backend, m, k, n, seed=8)
    splitk.matmul(other, B, out=big[:, :n], backend=backend)             # disjoint: the plan is kept
    before = host(backend, big)
    with pytest.raises(ValueError, match="out overlaps A"):
        splitk.matmul(big, B, out=big[:, :n], backend=backend)           # same signature, out inside A
    assert np.array_equal(host(backend, big), before)


def test_check_finite_reads_the_values_of_every_call(backend):
    A, B = operands(backend, 4, MIN_K, 4, seed=9)
    splitk.matmul(A, B, check_finite=True, backend=backend)
    A[1, 2] = np.nan
    with pytest.raises(ValueError, match="A contains NaN"):
        splitk.matmul(A, B, check_finite=True, backend=backend)
    C0 = backend.xp.full((4, 4), np.inf)
    splitk.matmul(B.T[:, :MIN_K], B, out=C0, check_finite=True, backend=backend)   # beta = 0: C not read


def test_threads_sharing_a_kept_plan_get_their_own_products(backend):
    """Calls of one signature share one plan, and its workspace: a call that finds the plan busy in another
    thread takes a workspace of its own."""
    pairs = [operands(backend, 16, 8 * MIN_K, 16, seed=s) for s in range(4)]
    want = [host(backend, splitk.matmul(A, B, chunks=32, backend=backend)) for A, B in pairs]
    wrong = []

    def work(i):
        for _ in range(25):
            A, B = pairs[i]
            if not np.array_equal(host(backend, splitk.matmul(A, B, chunks=32, backend=backend)), want[i]):
                wrong.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


# --- NaN and infinity: the library GEMM's pattern -------------------------------------------------------------

@pytest.mark.parametrize("deterministic", [True, False])
def test_nonfinite_inputs_give_the_library_gemms_pattern(backend, deterministic):
    m, k, n = 6, 3 * MIN_K + 11, 5
    rng = np.random.default_rng(10)
    A, B = rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))
    A[1, 10], A[2, 20], A[3, 30], A[3, 2 * MIN_K + 7] = np.nan, np.inf, -np.inf, np.inf
    B[50, 1], B[MIN_K + 60, 2], B[70, 3], B[9, 4] = np.inf, np.nan, -np.inf, 0.0
    A[4, 9] = np.inf                                                       # times B's 0: NaN
    dA, dB = backend.asarray(A), backend.asarray(B)
    with np.errstate(invalid="ignore"):
        want = host(backend, backend.xp.matmul(dA, dB))
    got = host(backend, splitk.matmul(dA, dB, deterministic=deterministic, backend=backend))
    assert np.isnan(want).any() and np.isinf(want).any() and np.isfinite(want).any()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isinf(got), np.isinf(want))
    assert np.array_equal(np.sign(got[np.isinf(got)]), np.sign(want[np.isinf(want)]))


# --- on the device only ---------------------------------------------------------------------------------------

CALLS = {"defaults": {}, "atomic": {"deterministic": False}, "out": {"out": True}}


@pytest.mark.gpu
@pytest.mark.parametrize("call", sorted(CALLS))
def test_the_default_call_returns_while_the_device_is_busy(cupy_backend, call):
    """No synchronisation: with the stream busy for 200 ms, a repeated call (its plan kept) returns within 1 ms,
    before the busy kernel ends, and its product is the warm-up's."""
    be = cupy_backend
    A, B = operands(be, 16, 2**20, 16, seed=11)
    kw = dict(CALLS[call])
    if kw.pop("out", False):
        kw["out"] = be.xp.empty((16, 16))
    first = host(be, splitk.matmul(A, B, **kw))
    splitk.matmul(A, B, **kw)                                              # the pool keeps a block for C
    busy(1)
    be.synchronize()
    stream = be.current_stream()
    busy(200)
    start = time.perf_counter()
    C = splitk.matmul(A, B, **kw)
    seconds = time.perf_counter() - start
    still_busy = not stream.done
    be.synchronize()
    assert still_busy, "the busy kernel ended before the call returned"
    assert seconds < 1e-3, f"the call took {seconds * 1e3:.2f} ms with the stream busy: it waited for the device"
    if call != "atomic":
        assert np.array_equal(host(be, C), first)


@pytest.mark.gpu
def test_a_kept_plan_repeats_its_bits_on_the_device(cupy_backend):
    be = cupy_backend
    A, B = operands(be, 32, 2**22 + 64, 24, seed=12)
    A2, B2 = operands(be, 32, 2**22 + 64, 24, seed=13)
    with Plan(A, B, backend=be) as plan:
        assert plan.workspace is not None and plan.workspace.shape == (plan.split.chunks, 32, 24)
        first = host(be, plan.execute(A, B))
        plan.execute(A2, B2)
        assert np.array_equal(host(be, plan.execute(A, B)), first)
    assert np.array_equal(host(be, splitk.matmul(A, B)), first)


@pytest.mark.gpu
@pytest.mark.parametrize("m,k,deterministic,wide", [(16, 2**24, True, False), (16, 2**20, False, True),
                                                    (64, 2**22, False, False)])
def test_a_plan_compiles_only_the_kernels_it_runs(cupy_backend, monkeypatch, m, k, deterministic, wide):
    """The chunk kernel (with the reduction's kernels in the deterministic mode) in one NVRTC run, and the
    wide form only for a one-wave plan that runs it, where the chunk kernel has one (the bulk-copy kernel of
    sm_90 has none); never a kernel the call does not launch."""
    from gpu.splitk import compiled, kernels

    be = cupy_backend
    runs, compile_names = [], compiled._compile

    def recording(names):
        runs.append(tuple(names))
        return compile_names(names)

    monkeypatch.setattr(compiled, "_FUNCTIONS", {})
    monkeypatch.setattr(compiled, "_CHUNK_FUNCTIONS", {})
    monkeypatch.setattr(compiled, "_compile", recording)
    A, B = operands(be, m, k, m, seed=14)
    plan = Plan(A, B, options=Options(deterministic=deterministic), backend=be)
    launched = kernels.variant(A.dtype, m, m, plan.split.wide).name
    reduction = {"splitk_reduce<double>"} if deterministic else set()
    has_wide_form = kernels.variant(A.dtype, m, m, wide=True) != kernels.variant(A.dtype, m, m)
    assert plan.split.wide == (wide and has_wide_form)
    assert set().union(*runs) == {launched, kernels.variant(A.dtype, m, m).name} | reduction
    assert len(runs) == 1 + plan.split.wide
    plan.execute(A, B)
    assert set().union(*runs) == {launched, kernels.variant(A.dtype, m, m).name} | reduction
