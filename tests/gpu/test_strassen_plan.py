"""Strassen as a plan: :class:`gpu.strassen.Options` for the keywords, :class:`gpu.strassen.Plan` built once per
operand signature (its checks, its configuration, its workspace and graphs), executed per call with only the
per-call checks, and ``matmul`` a kept plan plus execute. On CuPy: no call waits for the device."""

import dataclasses
import time

import numpy as np
import pytest

from gpu.backend import MemoryPlanError, get_backend
from gpu.backend.plans import PlanCache, PlanMismatch
from gpu.profile import device_name, save_profile
from gpu.strassen import PLANS, Options, Plan, decide, forget, matmul
from tests.gpu.busy import busy

N = 64


@pytest.fixture(autouse=True)
def _fresh():
    forget()
    yield
    forget()


def operands(backend, n=N, seed=0):
    A, B = (backend.random((n, n), np.float64, seed=seed + i) * 2 - 1 for i in range(2))
    return A, B, backend.xp.empty((n, n))


def decisions(monkeypatch):
    """The decisions plans make, counted (one per plan built or re-decided)."""
    seen, real = [], decide.decide
    monkeypatch.setattr(decide, "decide", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
    from gpu.strassen import plan as plan_module
    monkeypatch.setattr(plan_module, "decide", decide.decide)
    return seen


# --- Options -------------------------------------------------------------------------------------------

def test_options_are_one_frozen_value_and_matmul_takes_them_or_their_keywords(backend):
    A, B, _ = operands(backend)
    o = Options(level=2, schedule=["rum", "winograd", "winograd"])
    assert o.schedule == "rum/winograd" and hash(o) == hash(Options(level=2, schedule="rum/winograd"))
    assert hash(o) == hash(o) and hash(dataclasses.replace(o, level=3)) == hash(Options(level=3, schedule=o.schedule))
    assert dataclasses.replace(o, level=3) != o and Options(level=2, schedule="rum/winograd") == o
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.level = 3
    by_keywords = backend.to_numpy(matmul(A, B, level=2, schedule="rum/winograd", backend=backend))
    for given in (o, {"level": 2, "schedule": "rum/winograd"}):
        assert np.array_equal(backend.to_numpy(matmul(A, B, options=given, backend=backend)), by_keywords)
    one = backend.to_numpy(matmul(A, B, options=o, level=1, backend=backend))        # a keyword replaces a field
    assert np.array_equal(one, backend.to_numpy(matmul(A, B, level=1, schedule="rum/winograd", backend=backend)))
    with pytest.raises(TypeError, match="no option 'levels'"):
        matmul(A, B, options={"levels": 2}, backend=backend)
    with pytest.raises(ValueError, match="fringe must be one of"):
        Plan(A, B, options=Options(fringe="nope"), backend=backend)


def test_only_a_call_that_gives_no_configuration_lets_the_profile_choose_it():
    assert Options().chooses and Options(level="auto", check_finite=True, regime="cold").chooses
    for given in ({"level": 2}, {"schedule": "rum"}, {"fused": False}, {"flat": True}, {"graph": False},
                  {"parallel": True}, {"workspace": 0}):
        assert not Options(**given).chooses, given


# --- the plan ------------------------------------------------------------------------------------------

def test_a_plan_executes_per_call_holds_its_workspace_and_frees_it(backend):
    A, B, C = operands(backend)
    expected = backend.to_numpy(matmul(A, B, level=2, schedule="winograd", backend=backend))
    with Plan(A, B, out=C, options={"level": 2, "schedule": "winograd"}, backend=backend) as plan:
        assert plan.configuration.level == 2 and plan.workspace_bytes == 0          # nothing allocated yet
        assert plan.execute(A, B, C) is C
        held = dict(plan._arena)
        assert plan.workspace_bytes == sum(x.nbytes for x in held.values()) > 0
        A2, B2, _ = operands(backend, seed=5)
        plan.execute(A2, B2, C)
        assert plan._arena.keys() == held.keys() and all(plan._arena[k] is held[k] for k in held), \
            "a repeated execution allocates no scratch"
        assert np.array_equal(backend.to_numpy(matmul(A2, B2, level=2, schedule="winograd", backend=backend)),
                              backend.to_numpy(C))
        plan.execute(A, B, C)
        assert np.array_equal(backend.to_numpy(C), expected)
        with pytest.raises(PlanMismatch, match="A's shape"):
            plan.execute(A[:32], B[:, :32].T.copy(), C)
    assert plan.workspace_bytes == 0
    with pytest.raises(ValueError, match="freed"):
        plan.execute(A, B, C)


def test_matmul_keeps_one_plan_per_signature_and_options(backend, monkeypatch):
    seen = decisions(monkeypatch)
    A, B, C = operands(backend)
    assert isinstance(PLANS, PlanCache)
    for _ in range(3):
        matmul(A, B, level=1, out=C, backend=backend)
    A2, B2, C2 = operands(backend, seed=9)                  # same signature, other arrays
    matmul(A2, B2, level=1, out=C2, backend=backend)
    assert len(seen) == 1 and len(PLANS) == 1
    matmul(A, B, level=1, backend=backend)                  # no out: another signature, kept too
    matmul(A, B, level=1, backend=backend)
    matmul(A, B, level=2, out=C, backend=backend)           # other options
    assert len(seen) == 3 and len(PLANS) == 3
    matmul(A.tolist(), B, level=1, backend=backend) if backend.name == "numpy" else None
    assert len(PLANS) == 3, "a call whose operands were converted is planned for that call only"


def test_a_kept_plan_still_checks_the_addresses_the_values_and_the_memory(backend, monkeypatch):
    X = backend.random((3 * N, N), np.float64, seed=1)
    A, B, C = X[:N], X[N:2 * N], X[2 * N:]
    for level in (0, 1):
        matmul(A, B, level=level, out=C, check_finite=True, backend=backend)
        with pytest.raises(ValueError, match="out overlaps A"):
            matmul(A, B, level=level, out=X[N // 2:N // 2 + N], check_finite=True, backend=backend)
        A[3, 5] = np.nan
        with pytest.raises(ValueError, match="A contains NaN or infinity"):
            matmul(A, B, level=level, out=C, check_finite=True, backend=backend)
        A[3, 5] = 0
    matmul(A, B, level=1, backend=backend)                  # kept: a new output per call
    monkeypatch.setattr(backend, "memory_info", lambda: (8 * N * N - 1, 2**40))
    if backend.name == "cupy":              # the pool is asked first; the check says why where it cannot give C
        monkeypatch.setattr(backend.xp, "empty", short_of_memory)
    with pytest.raises(MemoryPlanError, match=f"the {N} x {N} output"):
        matmul(A, B, level=1, backend=backend)


def short_of_memory(*args, **kwargs):
    raise MemoryError("out of memory (a stand-in for the pool's)")




@pytest.mark.parametrize("overwrite", [False, True])
def test_a_kept_plan_gives_the_same_bits_and_keeps_the_inputs_it_must(backend, overwrite):
    A, B, C = operands(backend)
    A0, B0 = backend.to_numpy(A).copy(), backend.to_numpy(B).copy()
    matmul(A, B, level=1, out=C, overwrite_a=overwrite, overwrite_b=overwrite, backend=backend)
    first = backend.to_numpy(C).copy()
    A, B = backend.asarray(A0), backend.asarray(B0)
    matmul(A, B, level=1, out=C, overwrite_a=overwrite, overwrite_b=overwrite, backend=backend)
    assert len(PLANS) == 1 and np.array_equal(backend.to_numpy(C), first)
    if not overwrite:
        assert np.array_equal(backend.to_numpy(A), A0) and np.array_equal(backend.to_numpy(B), B0)


def test_a_kept_plan_with_overwrite_rights_drops_them_for_inputs_that_share_memory(backend):
    X = backend.random((2 * N, N), np.float64, seed=4)
    C = backend.xp.empty((N, N))
    matmul(X[:N], X[N:], level=1, out=C, overwrite_a=True, overwrite_b=True, backend=backend)     # kept
    X = backend.random((2 * N, N), np.float64, seed=5)
    before = backend.to_numpy(X).copy()
    A, B = X[:N], X[N // 2:N // 2 + N]                       # same signature, B over A
    matmul(A, B, level=1, out=C, overwrite_a=True, overwrite_b=True, backend=backend)
    assert np.array_equal(backend.to_numpy(X), before)
    np.testing.assert_allclose(backend.to_numpy(C), before[:N] @ before[N // 2:N // 2 + N], rtol=1e-10, atol=1e-12)


def test_a_profile_written_since_changes_the_level_of_a_kept_plan(monkeypatch):
    be = get_backend("numpy")
    A, B, C = operands(be)
    matmul(A, B, out=C, backend=be)                          # no profile: level 0 at N = 64 on a CPU
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {"rum": [[0, 0], [32, 1]]}})
    seen, real = [], type(be).gemm
    monkeypatch.setattr(be, "gemm", lambda *a, **k: (seen.append(1), real(be, *a, **k))[1])
    matmul(A, B, out=C, backend=be)
    assert len(seen) == 7 and len(PLANS) == 1, "the kept plan decided again: level 1 (seven GEMMs)"
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)


def test_a_new_product_gets_the_workspace_that_kept_plans_hold(monkeypatch):
    """The plans matmul keeps hold their workspaces; a new product that finds the memory short has them
    handed back first, rather than failing while the cache holds what it needs."""
    be = get_backend("numpy")
    A, B, C = operands(be)
    matmul(A, B, level=2, schedule="winograd", out=C, backend=be)
    held = next(iter(PLANS._plans.values()))
    assert held.workspace_bytes > 0
    A3, B3, C3 = operands(be, n=N + 4)
    need = Plan(A3, B3, out=C3, options={"level": 2, "schedule": "winograd"}, backend=be).decision.memory[0]
    monkeypatch.setattr(be, "memory_info", lambda: (need - 1 + (0 if held.workspace_bytes else need), 2**40))
    matmul(A3, B3, level=2, schedule="winograd", out=C3, backend=be)
    assert held.workspace_bytes == 0 and len(PLANS) == 2
    np.testing.assert_allclose(C3, A3 @ B3, rtol=1e-12, atol=1e-12)


def test_threads_that_share_a_kept_plan_take_turns_with_its_workspace():
    """One signature from four threads: one kept plan and one workspace, each product still right."""
    import threading

    be, wrong = get_backend("numpy"), []

    def work(seed):
        for i in range(15):
            A, B, C = operands(be, seed=100 * seed + 2 * i)
            matmul(A, B, level=2, schedule="winograd", out=C, backend=be)
            if not np.allclose(C, A @ B, rtol=1e-12, atol=1e-12):
                wrong.append((seed, i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong and len(PLANS) == 1


# --- the default call: the profile's fastest configuration ---------------------------------------------

def configs(**points):
    """A configurations section: size -> {configuration as 'level:schedule:flags': speed-up}."""
    out = []
    for size, timed in points.items():
        entries = []
        for name, speedup in timed.items():
            level, schedule, *flags = name.split(":")
            entries.append({"config": {"level": int(level), "schedule": schedule, **dict.fromkeys(flags, True)},
                            "seconds": 1.0 / speedup, "speedup": speedup, "samples": 10})
        out.append({"size": int(size[1:]), "gemm_s": 1.0, "timed": entries})
    return {"points": out}


SECTION = configs(n128={"1:winograd:flat": 1.10, "2:rum": 1.05},
                  n256={"2:winograd:flat:graph": 1.30, "2:winograd:flat": 1.25, "1:winograd:flat": 1.20,
                        "2:rum": 1.15})


def chosen(be, n):
    A, B, _ = operands(be, n)
    plan = Plan(A, B, backend=be)
    C = plan.execute(A, B)
    c = plan.configuration
    explicit = matmul(A, B, level=c.level, schedule=c.schedule, flat=c.flat, fused=c.fused, backend=be)
    assert np.array_equal(be.to_numpy(C), be.to_numpy(explicit)), "the chosen configuration is what ran"
    return c.level, c.schedule, c.flat, c.graph


def test_the_default_call_runs_the_fastest_measured_configuration_that_fits(monkeypatch):
    be = get_backend("numpy")
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {"rum": [[0, 0]]},
                  "configurations": SECTION})
    assert chosen(be, 128) == (1, "winograd", True, False)
    assert chosen(be, 256) == (2, "winograd", True, False), "no graphs on NumPy: the measured eager twin"
    assert chosen(be, 192) == (1, "winograd", True, False), "between sizes: the lower of the two measurements"
    assert chosen(be, 64) == (0, "rum", False, False), "below the smallest measured size: the library GEMM"
    assert chosen(be, 512)[:2] == (2, "winograd"), "above the largest: the largest's measurements"
    flat = Plan(*operands(be, 256)[:2], options={"level": 2, "flat": True}, backend=be).decision.memory[0]
    forget()                                                 # the kept plans' workspaces would count as free
    monkeypatch.setattr(be, "memory_info", lambda: (int(flat / 0.9) - 1, 2**40))
    assert chosen(be, 256) == (1, "winograd", True, False), "the flat stacks of L2 no longer fit: the next best"
    forget()
    rum = Plan(*operands(be, 256)[:2], options={"level": 2}, backend=be).decision.memory[0]
    monkeypatch.setattr(be, "memory_info", lambda: (int(rum / 0.9) + 1, 2**40))
    assert chosen(be, 256) == (2, "rum", False, False), "only RUM's support quadrants fit"
    forget()
    monkeypatch.setattr(be, "memory_info", lambda: (int(8 * 256 * 256 / 0.9) + 1, 2**40))
    assert chosen(be, 256)[0] == 0, "nothing fits beside the output: the library GEMM"


def test_nothing_measured_beats_dgemm_clearly_so_the_default_call_is_the_library_gemm():
    be = get_backend("numpy")
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {"rum": [[0, 0], [32, 2]]},
                  "configurations": configs(n128={"1:rum": 1.01, "2:winograd:flat": 0.93})})
    A, B, _ = operands(be, 128)
    plan = Plan(A, B, backend=be)
    assert plan.configuration.level == 0 and "beats DGEMM" in plan.decision.reason
    assert np.array_equal(matmul(A, B, backend=be), A @ B)


# --- no wait for the device --------------------------------------------------------------------------

def host_seconds(be, call, repeats=5):
    """The least host time of ``call`` issued to an idle stream."""
    times = []
    for _ in range(repeats):
        be.synchronize()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    be.synchronize()
    return min(times)


@pytest.mark.gpu
@pytest.mark.parametrize("options", [{}, {"level": 2}, {"level": 3, "flat": True}, {"level": 2, "graph": True},
                                     {"level": 3, "flat": True, "graph": True}])
def test_a_call_returns_while_the_stream_is_busy(cupy_backend, options):
    """Behind a 200 ms kernel on the stream, a call (its plan built and its kernels compiled by earlier calls)
    returns before that kernel ends, within twice its host time on an idle stream plus 1 ms (launches behind
    pending work cost the host more: flat level 3's 346 took 11.7 against 8.0 ms on the H200): nothing in it
    waits for the device. The default
    call (level 0 at N = 1024) and a graph's replay issue one launch and return within 1 ms outright; eager
    levels issue one launch per addition pass and GEMM (169 at level 2, 346 flat at level 3), which is host
    time, not waiting. A graph's call with a new C may capture a graph for its address set (host work: 1.24 ms
    for flat level 3 on the H200), so it is allowed 5 ms beside the idle call's time."""
    be = cupy_backend
    if options.get("graph") and not be.supports_graphs:
        pytest.skip("graph=True needs nvmath-python")
    n = 1024
    A, B, C = operands(be, n)
    busy(1)
    for out in (C, None):
        call = lambda out=out: matmul(A, B, out=out, backend=be, **options)
        for _ in range(3):
            call()
        idle = host_seconds(be, call)
        busy(200)
        start = time.perf_counter()
        call()
        took = time.perf_counter() - start
        running = not be.current_stream().done
        be.synchronize()
        assert running, "the 200 ms kernel ended before the call returned: the call waited for it"
        slack = 5e-3 if options.get("graph") and out is None else 1e-3   # a new C's address set: a capture
        assert took < 2 * idle + slack, (f"behind a 200 ms kernel the call took {1e3 * took:.2f} ms, on an idle "
                                         f"stream {1e3 * idle:.2f} ms (out={out is not None})")
        if not options or (options.get("graph") and out is not None):     # a new C may be a new address set
            assert took < 1e-3, f"{1e3 * took:.2f} ms for one launch"


@pytest.mark.gpu
def test_a_capture_does_not_wait_for_the_device(cupy_backend):
    """A graph is captured without a wait: behind a 200 ms kernel, a call on a new address set (an eager pass
    and a capture) returns long before the kernel ends, and its product is right once the stream drains."""
    be = cupy_backend
    if not be.supports_graphs:
        pytest.skip("graph=True needs nvmath-python")
    A, B, C = operands(be, 512)
    matmul(A, B, out=C, level=2, graph=True, backend=be)         # compiles the kernels, makes the plan
    expected = be.to_numpy(C).copy()
    busy(1)
    be.synchronize()
    C2 = be.xp.full((512, 512), np.nan)
    busy(200)
    start = time.perf_counter()
    matmul(A, B, out=C2, level=2, graph=True, backend=be)        # a new address set: captured now
    took = time.perf_counter() - start
    be.synchronize()
    assert took < 0.1, f"the capture took {1e3 * took:.1f} ms behind a 200 ms kernel"
    assert np.array_equal(be.to_numpy(C2), expected)
