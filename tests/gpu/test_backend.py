"""gemm/geam on views, errors, streams and the allocation tracker, on every backend."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu.backend import (
    BackendUnavailable,
    backend_class,
    backend_of,
    get_backend,
    gpu_available,
    interface,
    register_ops,
)
from gpu.backend.numpy_backend import NumpyBackend
from gpu.ozaki.ops import HostOps
from gpu.strassen.fusion import HostFusion

N = 192


def quadrants(M):
    h, w = M.shape[0] // 2, M.shape[1] // 2
    return M[:h, :w], M[:h, w:], M[h:, :w], M[h:, w:]


def host(backend, x):
    """A host copy, so later writes to ``x`` cannot change a reference computed from it."""
    return np.array(backend.to_numpy(x))


def tol(dtype):
    return 1e-12 if dtype == np.float64 else 2e-5


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (1.0, 1.0), (-0.5, 2.0), (2.0, -1.0)])
def test_gemm_on_quadrants_of_one_matrix(backend, dtype, alpha, beta):
    M = backend.random((2 * N, 2 * N), dtype, seed=7)
    before = host(backend, M).copy()
    A11, A12, A21, A22 = quadrants(M)
    expect = alpha * host(backend, A11) @ host(backend, A21) + beta * host(backend, A22)
    backend.gemm(A11, A21, A22, alpha, beta)
    after = host(backend, M)
    assert np.abs(after[N:, N:] - expect).max() <= tol(dtype) * np.abs(expect).max() * N
    assert np.array_equal(after[:N], before[:N]) and np.array_equal(after[N:, :N], before[N:, :N])


@pytest.mark.parametrize("shape", [(5, 7, 3), (1, 9, 4), (6, 1, 8), (33, 17, 1), (0, 4, 5), (4, 0, 5)])
def test_gemm_rectangular_and_degenerate(backend, shape):
    m, k, n = shape
    A, B = backend.random((m, k), seed=1), backend.random((k, n), seed=2)
    C = backend.asarray(np.full((m, n), 3.0))
    backend.gemm(A, B, C, 2.0, 0.5)
    expect = 2.0 * host(backend, A) @ host(backend, B) + 1.5
    np.testing.assert_allclose(host(backend, C), expect, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("order_a", "CF")
@pytest.mark.parametrize("order_b", "CF")
@pytest.mark.parametrize("order_c", "CF")
def test_gemm_mixed_memory_orders(backend, order_a, order_b, order_c):
    xp = backend.xp
    A = xp.asarray(backend.random((40, 30), seed=3), order=order_a)
    B = xp.asarray(backend.random((30, 20), seed=4), order=order_b)
    C = xp.zeros((40, 20), order=order_c)
    backend.gemm(A, B, C)
    np.testing.assert_allclose(host(backend, C), host(backend, A) @ host(backend, B), rtol=1e-13)


def test_gemm_on_transposed_views(backend):
    M = backend.random((2 * N, 2 * N), seed=5)
    A11, A12, A21, A22 = quadrants(M)
    Out = backend.xp.zeros((N, N))
    backend.gemm(A11.T, A12.T, Out)
    np.testing.assert_allclose(host(backend, Out), host(backend, A11).T @ host(backend, A12).T, rtol=1e-12)


@pytest.mark.parametrize("alpha,beta", [(1, 1), (1, -1), (-1, 1), (2.5, 0), (0, -3), (0.5, -0.25), (-2, 3)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_geam_on_quadrants(backend, alpha, beta, dtype):
    M = backend.random((2 * N, 2 * N), dtype, seed=11)
    A11, A12, A21, A22 = quadrants(M)
    expect = alpha * host(backend, A11) + beta * host(backend, A21)
    backend.geam(alpha, A11, beta, A21, A12)
    np.testing.assert_allclose(host(backend, A12), expect, rtol=tol(dtype), atol=tol(dtype))


@pytest.mark.parametrize("into", ["A", "B"])
@pytest.mark.parametrize("alpha,beta", [(1, 1), (1, -1), (-1, 1), (0.5, -0.25)])
def test_geam_in_place(backend, into, alpha, beta):
    M = backend.random((2 * N, 2 * N), seed=13)
    A11, A12, A21, A22 = quadrants(M)
    expect = alpha * host(backend, A11) + beta * host(backend, A12)
    target = A11 if into == "A" else A12
    backend.geam(alpha, A11, beta, A12, target)
    np.testing.assert_allclose(host(backend, target), expect, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("alpha,beta", [(1, 1), (0.5, -0.25), (2, 3)])
def test_geam_with_one_view_as_a_b_and_c(backend, alpha, beta):
    X = backend.random((2 * N, 2 * N), seed=17)[N:, :N]
    expect = (alpha + beta) * host(backend, X)
    backend.geam(alpha, X, beta, X, X)
    np.testing.assert_allclose(host(backend, X), expect, rtol=1e-15)


def test_geam_contiguous_and_transposed_operands(backend):
    A, B = backend.random((64, 48), seed=1), backend.random((48, 64), seed=2)
    C = backend.xp.zeros((64, 48))
    backend.geam(1.5, A, -2.0, B.T, C)
    np.testing.assert_allclose(host(backend, C), 1.5 * host(backend, A) - 2 * host(backend, B).T, rtol=1e-14)


def test_geam_beta_zero_ignores_b(backend):
    A = backend.random((16, 16), seed=1)
    B = backend.asarray(np.full((16, 16), np.nan))
    C = backend.xp.zeros((16, 16))
    backend.geam(2.0, A, 0.0, B, C)
    np.testing.assert_array_equal(host(backend, C), 2 * host(backend, A))


def test_errors_name_the_problem(backend):
    xp = backend.xp
    A, B = backend.random((8, 6), seed=1), backend.random((5, 4), seed=2)
    with pytest.raises(ValueError, match="A is 8 x 6, B is 5 x 4"):
        backend.gemm(A, B, xp.zeros((8, 4)))
    with pytest.raises(TypeError, match="one dtype"):
        backend.gemm(A, backend.random((6, 4), np.float32), xp.zeros((8, 4)))
    with pytest.raises(TypeError, match="not supported"):
        backend.gemm(A.astype(xp.float16), A.T.astype(xp.float16), xp.zeros((8, 8), xp.float16))
    with pytest.raises(ValueError, match="2-D"):
        backend.gemm(xp.zeros(8), xp.zeros((8, 1)), xp.zeros((1, 1)))
    with pytest.raises(ValueError, match="unit stride"):
        backend.gemm(backend.random((8, 8))[::2, ::2], xp.zeros((4, 4)), xp.zeros((4, 4)))
    with pytest.raises(TypeError, match="ndarray"):
        backend.gemm([[1.0]], [[1.0]], xp.zeros((1, 1)))
    with pytest.raises(ValueError, match="geam shapes"):
        backend.geam(1.0, A, 1.0, B, xp.zeros((8, 6)))
    with pytest.raises(TypeError, match="alpha must be a real number"):
        backend.gemm(A, A.T, xp.zeros((8, 8)), alpha=1j)
    with pytest.raises(TypeError, match="beta must be a real number"):
        backend.geam(1.0, A, "2", A, xp.zeros((8, 6)))


def test_numpy_refuses_read_only_outputs_and_foreign_byte_order():
    be = get_backend("numpy")
    A = be.random((4, 4), seed=1)
    C = np.zeros((4, 4))
    C.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        be.gemm(A, A, C)
    with pytest.raises(ValueError, match="read-only"):
        be.gemm(A[:1], A, np.broadcast_to(np.zeros(4), (1, 4)))
    assert not C.any()
    swapped = A.astype(A.dtype.newbyteorder())
    with pytest.raises(TypeError, match="byte order"):
        be.gemm(swapped, swapped, np.zeros((4, 4), swapped.dtype))


def test_overlapping_output_is_refused(backend):
    M = backend.random((2 * N, 2 * N), seed=3)
    A11, A12, A21, A22 = quadrants(M)
    shifted = M[N // 2:N // 2 + N, N // 2:N // 2 + N]
    with pytest.raises(ValueError, match="C overlaps A"):
        backend.gemm(A11, A21, shifted)
    with pytest.raises(ValueError, match="partly overlaps"):
        backend.geam(1.0, A11, 1.0, A21, shifted)
    with pytest.raises(ValueError, match="C overlaps B"):
        backend.gemm(A11, A22, A22)


@pytest.mark.parametrize("policy", ["pooled", "raw"])
def test_gemm_and_geam_on_quadrant_views_make_zero_allocations(backend, policy):
    """On CuPy this is exact: the cuBLAS calls on views neither copy nor allocate."""
    with backend.allocation_policy(policy):
        M = backend.random((2 * 1024, 2 * 1024), seed=1)
        A11, A12, A21, A22 = quadrants(M)
        backend.gemm(A11, A21, A22)
        backend.synchronize()
        with backend.track_allocations() as report:
            backend.gemm(A11, A21, A22, 1.0, 1.0)
            backend.geam(1.0, A11, -1.0, A21, A12)
            backend.geam(0.5, A12, 2.0, A22, A22)
    assert report.peak_bytes == 0 and report.count == 0
    assert report.exact == (backend.name == "cupy")
    assert report.device_total > 0


def test_tracker_catches_a_deliberate_temporary(backend):
    M = backend.random((2 * 256, 2 * 256), seed=1)
    A11, A12, A21, A22 = quadrants(M)
    with backend.track_allocations() as report:
        A22[...] = A11 + A21
    assert report.peak_bytes >= 256 * 256 * 8
    assert report.count is None or report.count >= 1


def test_streams_and_events_order_work(backend):
    s1, s2 = backend.stream(), backend.stream()
    A, B = backend.random((128, 128), seed=1), backend.random((128, 128), seed=2)
    C, D = backend.xp.zeros((128, 128)), backend.xp.zeros((128, 128))
    start = backend.current_stream().record()
    s1.wait_event(start)
    with s1:
        backend.gemm(A, B, C)
    done = s1.record()
    s2.wait_event(done)
    with s2:
        backend.geam(1.0, C, 1.0, A, D)
    backend.current_stream().wait_event(s2.record())
    backend.synchronize()
    np.testing.assert_allclose(host(backend, D), host(backend, A) @ host(backend, B) + host(backend, A), rtol=1e-12)


def test_timer_measures_positive_seconds(backend):
    A = backend.random((256, 256), seed=1)
    C = backend.xp.zeros((256, 256))
    with backend.timer() as t:
        backend.gemm(A, A.T, C)
    assert 0 < t.seconds < 10


def test_allocation_policy_names(backend):
    with backend.allocation_policy("raw"), backend.allocation_policy("pooled"):
        pass
    with pytest.raises(ValueError, match="pooled"), backend.allocation_policy("arena"):
        pass


def test_memory_and_cache_queries(backend):
    free, total = backend.memory_info()
    assert 0 < free <= total
    assert backend.cache_bytes() >= 2**20
    backend.flush_cache()
    info = backend.device_info()
    assert info["backend"] == backend.name and info["device"]


def test_unknown_backend_name():
    with pytest.raises(ValueError, match="unknown backend"):
        get_backend("opencl")


def test_auto_backend_matches_availability():
    assert get_backend("auto").name == ("cupy" if gpu_available() else "numpy")


def test_cupy_without_gpu_is_a_clear_error():
    if gpu_available():
        pytest.skip("a GPU is usable here")
    with pytest.raises(BackendUnavailable, match="--backend numpy"):
        get_backend("cupy")


# --- operations objects, backend_of, asynchronous ---------------------------------------------------

def test_ops_of_an_unregistered_family_is_not_implemented(backend):
    with pytest.raises(NotImplementedError, match=f"'no-such-family' has no operations for the {backend.name}"):
        backend.ops("no-such-family")


def test_ops_are_made_once_per_backend(monkeypatch):
    """A family's operations object is built on first use, with the backend, and reused by that
    backend only; a "module:Class" target is imported then."""
    made = []

    class Ops:
        def __init__(self, be):
            made.append(be)

    monkeypatch.setattr(interface, "_OPS", dict(interface._OPS))
    register_ops("test-family", "numpy", Ops)
    register_ops("test-lazy", "numpy", "gpu.ozaki.ops:HostOps")
    first, second = NumpyBackend(), NumpyBackend()
    ops = first.ops("test-family")
    assert isinstance(ops, Ops) and first.ops("test-family") is ops and made == [first]
    assert second.ops("test-family") is not ops and made == [first, second]
    lazy = first.ops("test-lazy")
    assert type(lazy) is HostOps and first.ops("test-lazy") is lazy

    class Other(NumpyBackend):
        name = "other"

    with pytest.raises(NotImplementedError, match="'test-family' has no operations for the other backend"):
        Other().ops("test-family")


def test_the_library_families_are_registered_for_numpy():
    be = get_backend("numpy")
    assert type(be.ops("ozaki")) is HostOps and be.ops("ozaki") is be.ops("ozaki")
    fusion = be.ops("strassen-fusion")
    assert type(fusion) is HostFusion and fusion.backend is be and not fusion.fuses


def test_backend_of_an_array():
    assert backend_of(np.zeros(2)).name == "numpy"
    assert backend_of(np.zeros(2)) is get_backend("numpy")
    assert backend_of([1.0, 2.0]).name == "numpy" and backend_of(3.0).name == "numpy"


def test_backend_classes_are_known_without_a_gpu():
    """What a stored environment's backend was (asynchronous or not) is known with no device."""
    assert backend_class("numpy") is NumpyBackend and backend_class("numpy").asynchronous is False
    cupy = backend_class("cupy")
    assert cupy.name == "cupy" and cupy.asynchronous is True
    with pytest.raises(ValueError, match="unknown backend 'auto'"):
        backend_class("auto")


def test_numpy_is_synchronous_and_has_nothing_to_release():
    be = get_backend("numpy")
    assert be.asynchronous is False
    assert be.release_memory() is None


@pytest.mark.gpu
def test_cupy_is_asynchronous_and_releases_its_pool(cupy_backend):
    be = cupy_backend
    assert be.asynchronous is True
    assert backend_of(be.xp.zeros(2)) is be
    pool = be.xp.get_default_memory_pool()
    be.release_memory()
    # blocks free inside chunks that arrays of earlier tests still use stay in the pool (156 MiB seen)
    base = pool.free_bytes()
    with be.allocation_policy("pooled"):
        x = be.xp.empty(2**26)
        del x
    assert pool.free_bytes() >= base + 8 * 2**26
    be.release_memory()
    assert pool.free_bytes() <= base


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["pooled", "raw"])
def test_cupy_tracker_counts_exactly(cupy_backend, policy):
    be = cupy_backend
    with be.allocation_policy(policy), be.track_allocations() as report:
        a = be.xp.empty((1000, 1000))
        b = be.xp.empty((500, 500))
        del a
        c = be.xp.empty((10, 10))
        del b, c
    assert report.exact and report.count == 3
    assert report.sizes == [8_000_000, 2_000_000, 800]
    assert report.peak_bytes == 10_000_000


@pytest.mark.gpu
def test_cupys_own_matmul_copies_views_which_is_why_backend_calls_cublas(cupy_backend):
    be = cupy_backend
    M = be.random((1024, 1024), seed=2)
    A11, A12, A21, A22 = quadrants(M)
    with be.track_allocations() as report:
        be.xp.matmul(A11, A21, out=A22)
    assert report.count >= 1, "CuPy's own matmul copies non-contiguous views (shared/notes)"


@st.composite
def gemm_case(draw):
    """Operands that are random blocks (maybe transposed) of larger C- or F-order parents."""
    m, k, n = (draw(st.integers(1, 12)) for _ in range(3))

    def block(rows, cols):
        transpose = draw(st.booleans())
        shape = (cols, rows) if transpose else (rows, cols)
        pr, pc = shape[0] + draw(st.integers(0, 3)), shape[1] + draw(st.integers(0, 3))
        r0, c0 = draw(st.integers(0, pr - shape[0])), draw(st.integers(0, pc - shape[1]))
        return draw(st.sampled_from("CF")), (pr, pc), (r0, c0), shape, transpose

    return (m, k, n), block(m, k), block(k, n), block(m, n), draw(st.sampled_from([0.0, 1.0, -0.5]))


def realise(backend, spec, seed):
    order, parent_shape, (r0, c0), shape, transpose = spec
    parent = backend.xp.asarray(backend.random(parent_shape, seed=seed), order=order)
    v = parent[r0:r0 + shape[0], c0:c0 + shape[1]]
    return v.T if transpose else v


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=gemm_case())
def test_gemm_and_geam_match_numpy_on_random_views(backend, case):
    (m, k, n), sa, sb, sc, beta = case
    A, B, C = realise(backend, sa, 1), realise(backend, sb, 2), realise(backend, sc, 3)
    a, b, c = host(backend, A), host(backend, B), host(backend, C)
    backend.gemm(A, B, C, 1.5, beta)
    np.testing.assert_allclose(host(backend, C), 1.5 * a @ b + beta * c, rtol=1e-13, atol=1e-13)
    D = realise(backend, sc, 4)
    backend.geam(2.0, C, beta, D, D)
    np.testing.assert_allclose(host(backend, D), 2.0 * host(backend, C) + beta * host(backend, realise(backend, sc, 4)),
                               rtol=1e-14, atol=1e-14)
