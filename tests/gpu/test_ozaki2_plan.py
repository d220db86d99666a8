"""Scheme II as a plan: ``Options`` and ``Plan`` (built once per operand signature, holding the workspace), ``matmul``
as a kept plan plus its execution, fast scaling by default, NaN and infinity giving ``A @ B``'s pattern of
non-finite entries with no wait for the device, and on the GPU: a call with a count given returns while the
stream is busy, and so does a repeated ``moduli="auto"`` call (``verdict="host"``: it reads its count once)."""

import dataclasses
import time

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.backend.plans import PlanMismatch
from gpu.ozaki2 import memory
from gpu.ozaki2 import plan as plan_module
from gpu.ozaki2.options import k_block as k_block_of
from tests.gpu.test_ozaki2_memory import FragmentedBackend

host = get_backend("numpy")


def operands(m, k, n, phi=1.0, seed=1):
    return phi_matrix(m, k, phi, seed), phi_matrix(k, n, phi, seed + 1)


def test_options_are_a_frozen_dataclass_of_the_keywords():
    opts = ozaki2.Options()
    assert (opts.moduli, opts.target, opts.scaling, opts.bound, opts.check_finite) == ("auto", None, "fast",
                                                                                        "normwise", False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.moduli = 15
    for bad, match in [({"scaling": "fastest"}, "scaling must be"), ({"moduli": 21}, "moduli must be"),
                       ({"moduli": 5, "target": "dgemm"}, "either a moduli count"), ({"k_block": 0}, "k_block"),
                       ({"target": "hgemm"}, "target must be")]:
        with pytest.raises(ValueError, match=match):
            ozaki2.Options(**bad)


def test_the_default_scaling_is_fast():
    A, B = operands(20, 50, 16)
    assert ozaki2.Plan(A, B, backend=host).options.scaling == "fast"
    assert np.array_equal(ozaki2.matmul(A, B, moduli=15, backend=host),
                          ozaki2.matmul(A, B, moduli=15, scaling="fast", backend=host))


def test_a_plan_executes_as_matmul_and_checks_its_signature():
    A, B = operands(30, 70, 20)
    with ozaki2.Plan(A, B, options={"moduli": 14}, backend=host) as plan:
        assert np.array_equal(plan.execute(A, B), ozaki2.matmul(A, B, moduli=14, backend=host))
        A2, B2 = operands(30, 70, 20, seed=5)
        assert np.array_equal(plan.execute(A2, B2), ozaki2.matmul(A2, B2, moduli=14, backend=host))
        with pytest.raises(PlanMismatch, match="A's shape"):
            plan.execute(A[:20], B)
    assert plan.work is None
    auto = ozaki2.Plan(A, B, options=ozaki2.Options(target="sgemm", scaling="accurate"), backend=host)
    assert np.array_equal(auto.execute(A, B), ozaki2.matmul(A, B, target="sgemm", scaling="accurate", backend=host))


def test_matmul_keeps_one_plan_per_signature(monkeypatch):
    """A repeated call builds nothing: the plan (and its workspace block) is kept; another layout, count or
    backend gets its own."""
    A, B = operands(24, 40, 18)
    ozaki2.PLANS.clear()
    built = []
    real = plan_module.Plan.__init__
    monkeypatch.setattr(plan_module.Plan, "__init__", lambda self, *a, **k: (built.append(1), real(self, *a, **k))[1])
    first = ozaki2.matmul(A, B, backend=host)
    for _ in range(3):
        assert np.array_equal(ozaki2.matmul(A, B, backend=host), first)
    assert len(built) == 1
    ozaki2.matmul(np.asfortranarray(A), B, backend=host)
    ozaki2.matmul(A, B, moduli=14, backend=host)
    assert len(built) == 3 and len(ozaki2.PLANS) == 3
    out = np.empty((24, 18))
    assert ozaki2.matmul(A, B, out=out, backend=host) is out and np.array_equal(out, first)


def test_a_kept_plan_allocates_no_workspace_again(row_panels_at_any_size):
    """The block is taken once, when the plan is made; a repeated call allocates only its output."""
    A, B = operands(64, 300, 48)
    be = FragmentedBackend(free=2**30, largest=2**30, host_scratch=True)
    for _ in range(3):
        ozaki2.matmul(A, B, moduli=15, backend=be)
    block = memory.layouts(64, 300, 48, 15, "fast", k_block_of(None))[0].nbytes     # the default's: row panels
    assert block < ozaki2.workspace_bytes(64, 300, 48, 15, "fast") and be.xp.sizes == [block] + [8 * 64 * 48] * 3


def test_evicted_and_freed_plans_release_their_block():
    A, B = operands(8, 16, 8)
    plan = ozaki2.Plan(A, B, backend=host)
    plan.free()
    assert plan.work is None
    with pytest.raises(ValueError, match="freed"):
        plan.execute(A, B)


@pytest.mark.parametrize("options", [{}, {"moduli": 15}, {"scaling": "accurate"}, {"moduli": 12, "k_block": 32},
                                     {"bound": "componentwise"}])
def test_nonfinite_inputs_give_the_library_gemms_pattern(options):
    """NaN and infinity in rows of A and columns of B (inf times zero included): NaN and +-infinity exactly where
    A @ B has them, and every other entry as with those lines zeroed."""
    A, B = operands(12, 40, 9, seed=3)
    A[2, 5], A[7, 0], B[3, 4], B[10, 6] = np.nan, np.inf, -np.inf, np.inf
    B[0, 1] = 0.0                                         # inf * 0 in row 7, column 1
    with np.errstate(invalid="ignore"):
        R = A @ B
    C = ozaki2.matmul(A, B, backend=host, **options)
    assert np.array_equal(np.isnan(C), np.isnan(R)) and np.array_equal(np.isinf(C), np.isinf(R))
    assert np.array_equal(C[np.isinf(R)], R[np.isinf(R)])
    clean = ozaki2.matmul(np.where(np.isfinite(A).all(axis=1)[:, None], A, 0),
                          np.where(np.isfinite(B).all(axis=0)[None, :], B, 0), backend=host, **options)
    fine = np.isfinite(R)
    assert np.array_equal(C[fine], clean[fine])
    with pytest.raises(ValueError, match=r"A has NaN or infinity in 2 rows and B in 2 columns \(check_finite=True\)"):
        ozaki2.matmul(A, B, check_finite=True, backend=host, **options)


def test_a_plan_may_take_another_plans_room(row_panels_at_any_size):
    """Where the faster layout does not fit beside kept plans' blocks, the cache frees them (make_room) rather
    than fall back to the planes."""
    A, B = operands(64, 16, 64)
    freed = []
    direct = ozaki2.workspace_bytes(64, 16, 64, 15, "fast", direct=True)

    class Tight(type(host)):
        free = direct * 1.05

        def memory_info(self):
            return self.free, 2 * self.free

    be = Tight()

    def make_room():
        freed.append(1)
        be.free = 100 * direct
        return True

    plan = ozaki2.Plan(A, B, options={"moduli": 15}, backend=be, make_room=make_room)
    assert freed and plan.work.direct


# --------------------------------------------------------------------------- on the GPU

@pytest.fixture
def busy():
    from tests.gpu.busy import busy as run

    return run


def _device_operands(be, N, seed=1):
    A, B = operands(N, N, N, seed=seed)
    return be.asarray(A), be.asarray(B)


@pytest.mark.gpu
def test_gpu_fixed_count_returns_while_the_stream_is_busy(cupy_backend, busy):
    """With a count given the call only queues work (NaN handling included: it is found on the device): eagerly
    (a new output, first seen) it returns long before a 200 ms kernel that holds the stream ends, and replayed
    as a graph (``out=`` kept, from the second call) within 1 ms."""
    dA, dB = _device_operands(cupy_backend, 512)
    want = ozaki2.matmul(dA, dB, moduli=15, scaling="fast", backend=cupy_backend)      # plan and kernels made
    C = cupy_backend.xp.empty_like(want)
    for _ in range(2):                                                                 # seen, then captured
        ozaki2.matmul(dA, dB, moduli=15, scaling="fast", out=C, backend=cupy_backend)
    times = {}
    for name, call in (("eager", lambda: ozaki2.matmul(dA, dB, moduli=15, scaling="fast", backend=cupy_backend)),
                       ("replay", lambda: ozaki2.matmul(dA, dB, moduli=15, scaling="fast", out=C,
                                                        backend=cupy_backend))):
        cupy_backend.synchronize()
        busy(200)
        start = time.perf_counter()
        got = call()
        times[name] = time.perf_counter() - start
        cupy_backend.synchronize()
        assert bool((got == want).all()), name
    assert times["eager"] < 0.05, f"the eager call took {times['eager'] * 1e3:.2f} ms while the stream was busy"
    assert times["replay"] < 1e-3, f"the replayed call took {times['replay'] * 1e3:.2f} ms while the stream was busy"


@pytest.mark.gpu
@pytest.mark.parametrize("moduli, layout, k_block", [("auto", "planes", None), (14, "planes", None),
                                                     ("auto", "direct", None), (14, "direct", None),
                                                     (14, "planes", 128), ("auto", "planes", 128)])
def test_gpu_replayed_calls_give_the_eager_bits_for_new_values(cupy_backend, moduli, layout, k_block, request):
    """A kept plan replays its work as a graph per address set from the second call, in either layout (the planes
    with k in one block and in several, which add into the planes): new values at the same addresses (NaN and
    infinity included, and a count that "auto" picks anew) give the bits of the eager plan (NumPy's), and the
    graphs are kept per address set (and count, or under "auto" the window of counts)."""
    if layout == "direct":
        request.getfixturevalue("row_panels_at_any_size")
    A, B = operands(320, 300, 260, seed=8)
    dA, dB = cupy_backend.asarray(A), cupy_backend.asarray(B)
    C = cupy_backend.xp.empty((320, 260))
    options = {"moduli": moduli, "k_block": k_block}
    with ozaki2.Plan(dA, dB, out=C, options=options, backend=cupy_backend) as plan:
        assert plan.work.direct is (layout == "direct")
        for step in range(5):
            A2, B2 = operands(320, 300, 260, phi=1.0 + 2 * (step % 2), seed=20 + step)
            if step == 3:
                A2[7, 8], B2[9, 100] = np.nan, -np.inf
            dA.set(A2)
            dB.set(B2)
            got = cupy_backend.to_numpy(plan.execute(dA, dB, C))
            want = ozaki2.matmul(A2, B2, moduli=moduli, k_block=k_block, backend=host)
            assert np.array_equal(np.isnan(got), np.isnan(want)), step
            assert np.array_equal(got[~np.isnan(want)], want[~np.isnan(want)]), step
        graphs = plan.deferred.graphs if moduli == "auto" else plan._graphs.captured     # gpu.ozaki2.deferred
        assert len(graphs) >= 1


@pytest.mark.gpu
@pytest.mark.parametrize("verdict", ["device", "host"])
def test_gpu_auto_waits_for_nothing_on_a_repeated_call(cupy_backend, busy, monkeypatch, verdict):
    """``moduli="auto"`` on an address set seen before: by default (``verdict="device"``) the call reads nothing
    back and returns within 1 ms while a 200 ms kernel holds the stream (the graph of :mod:`gpu.ozaki2.deferred`
    queues the whole product, 16 ms of work at N = 8192); with ``verdict="host"`` it waits once, for its 4-byte
    count, and queues the rest (a replay of the graph the second call captured); nothing else moves data to the
    host."""
    from gpu.ozaki2 import device

    dA, dB = _device_operands(cupy_backend, 8192)
    for _ in range(3):
        ozaki2.matmul(dA, dB, verdict=verdict, backend=cupy_backend)
    cupy_backend.synchronize()
    reads, other = [], []
    real = device.read_count
    monkeypatch.setattr(device, "read_count", lambda buf: (real(buf), reads.append(time.perf_counter()))[0])
    monkeypatch.setattr(cupy_backend, "to_numpy", lambda x: other.append(1))
    import cupy

    monkeypatch.setattr(cupy, "asnumpy", lambda *a, **k: other.append(1))
    busy(200)
    start = time.perf_counter()
    ozaki2.matmul(dA, dB, verdict=verdict, backend=cupy_backend)
    end = time.perf_counter()
    cupy_backend.synchronize()
    assert not other
    if verdict == "device":
        assert not reads and end - start < 1e-3, f"the call took {1e3 * (end - start):.2f} ms behind the kernel"
        return
    assert len(reads) == 1
    assert reads[0] - start > 0.15, "the read waited for the busy kernel"
    assert end - reads[0] < 5e-3, f"the call waited {1e3 * (end - reads[0]):.2f} ms after its read"


@pytest.mark.gpu
@pytest.mark.parametrize("options", [{}, {"moduli": 15}, {"scaling": "accurate"}])
def test_gpu_nonfinite_pattern_equals_numpy(cupy_backend, options):
    A, B = operands(300, 257, 200, seed=6)
    A[4, 9], A[100, 0], B[3, 50], B[200, 7] = np.nan, np.inf, -np.inf, np.inf
    B[0, 11] = 0.0
    want = ozaki2.matmul(A, B, backend=host, **options)
    got = cupy_backend.to_numpy(ozaki2.matmul(cupy_backend.asarray(A), cupy_backend.asarray(B),
                                              backend=cupy_backend, **options))
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[~np.isnan(want)],
                                                                           want[~np.isnan(want)])


@pytest.mark.gpu
def test_gpu_plan_on_a_stream_equals_numpy(cupy_backend):
    A, B = operands(257, 301, 129, seed=2)
    stream = cupy_backend.stream()
    dA, dB = cupy_backend.asarray(A), cupy_backend.asarray(B)
    with ozaki2.Plan(dA, dB, backend=cupy_backend, stream=stream) as plan:
        got = plan.execute(dA, dB)
        stream.synchronize()
        assert np.array_equal(cupy_backend.to_numpy(got), ozaki2.matmul(A, B, backend=host))
