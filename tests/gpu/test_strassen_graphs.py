"""CUDA-graph execution of Strassen products: the mode's rules on NumPy (where
``graph=True`` is a clear error and ``"auto"`` runs eagerly), the arena that lets a capture
allocate nothing, the capture-and-replay bookkeeping with a stand-in backend, and on CuPy the
graph bitwise equal to eager execution with no allocation inside a replay."""

import numpy as np
import pytest

from gpu.backend import get_backend
from gpu.strassen import graphs, matmul, top_support
from gpu.strassen.executor import Executor


@pytest.fixture(autouse=True)
def _no_kept_graphs():
    graphs.forget()
    yield
    graphs.forget()


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


def test_auto_counts_are_bounded():
    """graph='auto' counts calls per signature; ever new signatures keep at most MAX_SEEN counts."""
    be = FakeGraphBackend()
    graphs.forget()
    for k in range(graphs.MAX_SEEN + 50):
        graphs.run(be, "auto", ("new arrays", k), 1000, lambda arena: arena, lambda arena: None)
    assert len(graphs._SEEN) == graphs.MAX_SEEN and ("new arrays", 0) not in graphs._SEEN
    graphs.forget()


def test_run_captures_once_per_signature_replays_after_and_keeps_the_newest():
    be = FakeGraphBackend()
    ran = []

    def go(key, mode=True, launches=1000):
        graphs.run(be, mode, key, launches, lambda arena: arena, lambda arena: ran.append(arena))

    go("a")
    assert (be.captures, be.launches) == (1, 0) and ran[-1] == {}, "captured with an arena"
    go("a")
    go("a")
    assert (be.captures, be.launches) == (1, 2)
    for k in range(graphs.MAX_GRAPHS):
        go(("b", k))
    assert "a" not in graphs._GRAPHS and len(graphs._GRAPHS) == graphs.MAX_GRAPHS
    go("auto-key", "auto")
    assert ran[-1] is None and be.captures == 1 + graphs.MAX_GRAPHS, "auto: the first call runs eagerly"
    go("auto-key", "auto")
    assert be.captures == 2 + graphs.MAX_GRAPHS, "auto: the second call captures"
    go("small", "auto", launches=graphs.MIN_LAUNCHES - 1)
    go("small", "auto", launches=graphs.MIN_LAUNCHES - 1)
    assert ran[-1] is None and ran[-2] is None, "auto: few launches never capture"


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
