"""CUDA-graph execution of Strassen products: the mode's rules on NumPy (where
``graph=True`` is a clear error and ``"auto"`` runs eagerly), the arena that lets a capture
allocate nothing, a plan's capture-and-replay bookkeeping per address set with a stand-in backend, and on
CuPy the graph bitwise equal to eager execution with no allocation inside a replay, sharing the plan's
workspace with its eager runs."""

import numpy as np
import pytest

from gpu.backend import get_backend
from gpu.strassen import Plan, graphs, matmul, top_support
from gpu.strassen.executor import Executor


def operands(backend, n=128, seed=1):
    rng = np.random.default_rng(seed)
    return backend.asarray(rng.uniform(-1, 1, (n, n))), backend.asarray(rng.uniform(-1, 1, (n, n)))


def test_graph_true_on_numpy_is_a_clear_error_before_any_work():
    be = get_backend("numpy")
    A, B = operands(be)
    out = np.full((128, 128), np.nan)
    with pytest.raises(ValueError, match="graph=True needs CUDA graphs.*graph='auto'"):
        matmul(A, B, level=2, graph=True, out=out, backend=be)
    assert np.isnan(out).all()
    with pytest.raises(ValueError, match="graph must be True, False or 'auto'"):
        matmul(A, B, level=2, graph="yes", backend=be)


def test_graph_auto_on_numpy_runs_eagerly_and_equals_eager():
    be = get_backend("numpy")
    A, B = operands(be)
    eager = matmul(A, B, level=3, schedule="winograd", fused=True, backend=be)
    for _ in range(3):
        assert np.array_equal(matmul(A, B, level=3, schedule="winograd", fused=True, graph="auto", backend=be), eager)


@pytest.mark.parametrize("schedule,level", [("winograd", 3), ("otsuka", 3), ("lai", 2), ("rum", 3)])
def test_an_arena_holds_an_eager_peak_and_reuses_it_bitwise(schedule, level):
    """Slots per depth and stream: a second pass allocates nothing new and computes the same bits;
    the arena holds one set of temporaries per depth (what an eager product's peak holds)."""
    be = get_backend("numpy")
    A, B = operands(be)
    C1, C2 = np.empty((128, 128)), np.empty((128, 128))
    arena: dict = {}
    run = Executor(be, arena=arena)

    def product(C):
        a, b = A.copy(), B.copy()
        run.multiply(schedule, a, b, C, level, top_support(be, schedule, level, a, b, True, True, run.buffer))

    product(C1)
    slots = dict(arena)
    product(C2)
    assert arena.keys() == slots.keys() and all(arena[k] is slots[k] for k in slots)
    assert np.array_equal(C1, C2) and np.array_equal(C1, matmul(A, B, level=level, schedule=schedule, backend=be))
    temps = {"winograd": 18, "lai": 2, "rum": 0}.get(schedule)
    if temps is not None:
        assert len(arena) == temps * level


class FakeGraphBackend:
    """Stands in for CuPy: ``capture`` runs the work once (the eager pass) and returns a graph
    whose launch runs it again; counts both."""

    supports_graphs, name = True, "fake"

    def __init__(self):
        self.captures = self.launches = 0

    def capture(self, work):
        self.captures += 1
        work()
        backend = self

        class Graph:
            def launch(self):
                backend.launches += 1
                work()
        return Graph()


def test_true_captures_an_address_set_once_replays_it_and_keeps_the_newest():
    be, ran = FakeGraphBackend(), []
    kept = graphs.Graphs(be, True, launches=1)
    kept.run("a", lambda: ran.append("a"))
    assert (be.captures, be.launches) == (1, 0) and ran == ["a"], "captured: its eager pass made the product"
    kept.run("a", lambda: ran.append("a"))
    kept.run("a", lambda: ran.append("a"))
    assert (be.captures, be.launches) == (1, 2)
    for k in range(graphs.MAX_GRAPHS):
        kept.run(("b", k), lambda: None)
    assert "a" not in kept.captured and len(kept.captured) == graphs.MAX_GRAPHS
    kept.clear()
    assert len(kept.captured) == 0


@pytest.mark.parametrize("mode,launches,captured", [("auto", graphs.MIN_LAUNCHES, True),
                                                    ("auto", graphs.MIN_LAUNCHES - 1, False),
                                                    ("repeat", 1, True)])
def test_auto_and_repeat_capture_an_address_set_on_its_second_call(mode, launches, captured):
    """``"auto"`` where the product launches many kernels, ``"repeat"`` (a configuration chosen from the
    profile) whatever it launches; an address set seen once (a new output each call) runs eagerly."""
    be, ran = FakeGraphBackend(), []
    kept = graphs.Graphs(be, mode, launches)
    kept.run("x", lambda: ran.append(1))
    assert be.captures == 0 and ran == [1]
    kept.run("x", lambda: ran.append(2))
    kept.run("x", lambda: ran.append(3))
    assert (be.captures, be.launches) == ((1, 1) if captured else (0, 0))
    assert ran == ([1, 2, 2] if captured else [1, 2, 3]), "a replay runs the captured work"


def test_the_counts_of_address_sets_are_bounded():
    be = FakeGraphBackend()
    kept = graphs.Graphs(be, "repeat", 1)
    for k in range(graphs.MAX_SEEN + 50):
        kept.run(("new arrays", k), lambda: None)
    assert len(kept.seen) == graphs.MAX_SEEN and ("new arrays", 0) not in kept.seen and be.captures == 0


def test_graphs_never_run_where_the_backend_has_none():
    be = get_backend("numpy")
    assert not graphs.Graphs(be, "auto", 10**6).mode and not graphs.Graphs(be, "repeat", 1).mode


CASES = [("rum", 3, False, False, "peel", 512), ("rum2", 2, True, True, "peel", 512),
         ("winograd", 2, False, True, "peel", 512), ("winograd2", 2, True, True, "peel", 512),
         ("lai", 2, False, False, "peel", 512),
         ("otsuka", 3, False, False, "peel", 512), ("rum", 2, False, True, "pad", 333)]


@pytest.mark.gpu
@pytest.mark.parametrize("schedule,level,parallel,fused,fringe,n", CASES)
def test_cupy_graph_is_bitwise_eager_and_replays_without_allocating(cupy_backend, schedule, level, parallel,
                                                                     fused, fringe, n):
    be = cupy_backend
    A, B = operands(be, n)
    kw = dict(level=level, schedule=schedule, parallel=parallel, fused=fused, fringe=fringe, backend=be)
    eager = be.to_numpy(matmul(A, B, **kw))
    C = be.xp.full((n, n), np.nan)
    matmul(A, B, out=C, graph=True, **kw)                       # captured (its eager pass computes C)
    assert np.array_equal(be.to_numpy(C), eager)
    C.fill(np.nan)
    with be.track_allocations() as report:
        matmul(A, B, out=C, graph=True, check_finite=False, **kw)  # replayed
        be.synchronize()
    assert report.count == 0 and report.peak_bytes == 0, "a replay allocates nothing"
    assert np.array_equal(be.to_numpy(C), eager), "graph and eager differ"
    A2, B2 = operands(be, n, seed=7)
    A[...], B[...] = A2, B2                                     # new values, same buffers: the graph sees them
    matmul(A, B, out=C, graph=True, **kw)
    assert np.array_equal(be.to_numpy(C), be.to_numpy(matmul(A2, B2, **kw)))


@pytest.mark.gpu
def test_a_plans_eager_runs_and_its_graphs_share_one_workspace(cupy_backend):
    """A graph mode of ``"auto"`` runs the first call on an address set eagerly, captures the second: the
    capture (on the backend's capture stream) takes the same arena slots as the eager run, so the workspace
    does not grow; other address sets reuse it too."""
    be = cupy_backend
    if not be.supports_graphs:
        pytest.skip("graphs need nvmath-python")
    A, B = operands(be, 512)
    C = be.xp.empty((512, 512))
    with Plan(A, B, out=C, options={"level": 3, "schedule": "winograd", "fused": True, "graph": "auto"},
              backend=be) as plan:
        plan.execute(A, B, C)
        eager = plan.workspace_bytes
        plan.execute(A, B, C)                                       # captured
        plan.execute(A, B, C)                                       # replayed
        assert plan.workspace_bytes == eager > 0 and len(plan._graphs.captured) == 1
        C2 = be.xp.empty((512, 512))
        for _ in range(3):
            plan.execute(A, B, C2)
        assert plan.workspace_bytes == eager and len(plan._graphs.captured) == 2
        assert np.array_equal(be.to_numpy(C), be.to_numpy(C2))
