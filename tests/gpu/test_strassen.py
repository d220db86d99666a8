"""``gpu.strassen.matmul``: every schedule, level, stream mode and fringe mode against a
float64 host product; inputs kept safe; fused, parallel and sequential runs bitwise equal;
the allocations the memory model predicts; clear errors. Runs on NumPy, and on CuPy where
a GPU is usable (the ``backend`` fixture)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu.schedules import SCHEDULES
from gpu.strassen import matmul
from modeling import auto
from modeling.memory import strassen_memory

N = 64
LOW = ("otsuka-low", "otsuka2-low")   # cannot recurse: levels 0 and 1 only
EPS = {np.dtype(np.float64): 2.0**-52, np.dtype(np.float32): 2.0**-23}


def operand(backend, shape, seed, dtype=np.float64):
    """Uniform values in [-1, 1) on the backend's device."""
    return backend.random(shape, dtype, seed=seed) * 2 - 1


def host(backend, x):
    return np.array(backend.to_numpy(x))


def bound(A, B, side, level):
    """Error bound of an L-level Strassen-Winograd product of size ``side``:

        max|C - AB| <= eps * side * 12**L * max|A| * max|B| * 4,

    eps the machine epsilon of the dtype (2**-52 for float64, 2**-23 for float32). The
    classical product's error grows like eps * n * max|A| * max|B|; each Strassen level
    multiplies the constant by about 12 (Higham, Accuracy and Stability of Numerical
    Algorithms, ch. 23, gives 12 per level for Strassen's form and up to 18 for Winograd's
    as a worst case); 4 is slack. On these random operands the largest error seen is about
    1.6% of the bound; a wrong quadrant, a missed wait or a clobbered operand gives errors
    of order 1.
    """
    return EPS[A.dtype] * side * 12**level * np.abs(A).max() * np.abs(B).max() * 4


def check(backend, C, A, B, level, side=None):
    """``C`` (device) is A @ B (host copies) within :func:`bound`."""
    side = side or max(*A.shape, B.shape[1])
    side = -(-side // 2**level) * 2**level
    got = host(backend, C)
    assert got.shape == (A.shape[0], B.shape[1]) and got.dtype == A.dtype
    expect = A.astype(np.float64) @ B.astype(np.float64)
    err = np.abs(got.astype(np.float64) - expect).max() if got.size else 0.0
    assert err <= bound(A, B, side, level), f"error {err:.3e} > bound {bound(A, B, side, level):.3e}"
    return got


def cases():
    for name in SCHEDULES:
        for level in range(2 if name in LOW else 5):
            for parallel in (False, True):
                yield name, level, parallel


@pytest.mark.parametrize("name,level,parallel", list(cases()))
def test_every_schedule_level_and_stream_mode(backend, name, level, parallel):
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level=level, schedule=name, parallel=parallel, backend=backend)
    check(backend, C, a0, b0, level)
    assert np.array_equal(host(backend, A), a0), "A was changed"
    assert np.array_equal(host(backend, B), b0), "B was changed"


def test_the_bound_is_tight_enough_to_catch_a_wrong_product(backend):
    """The accuracy check fails on a product with one element off by 1e-6, so it is not vacuous."""
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level=2, schedule="rum", backend=backend)
    C[3, 5] += 1e-6
    with pytest.raises(AssertionError, match="bound"):
        check(backend, C, a0, b0, 2)


@pytest.mark.parametrize("name", ["rum", "rum2", "lai", "otsuka", "winograd"])
def test_fused_is_bitwise_equal_to_unfused(backend, name):
    A, B = operand(backend, (N, N), 3), operand(backend, (N, N), 4)
    a0, b0 = host(backend, A), host(backend, B)
    plain = host(backend, matmul(A, B, level=2, schedule=name, backend=backend))
    fused = matmul(A, B, level=2, schedule=name, fused=True, backend=backend)
    assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0), "inputs changed"
    assert np.array_equal(host(backend, fused), plain)
    check(backend, fused, a0, b0, 2)


@pytest.mark.parametrize("name", ["rum", "rum2"])
def test_fused_with_overwrite_uses_the_aliases(backend, name):
    A, B = operand(backend, (N, N), 3), operand(backend, (N, N), 4)
    a0, b0 = host(backend, A), host(backend, B)
    plain = host(backend, matmul(A, B, level=2, schedule=name, backend=backend))
    fused = matmul(A, B, level=2, schedule=name, fused=True, overwrite_a=True, overwrite_b=True,
                   backend=backend)
    assert np.array_equal(host(backend, fused), plain)
    check(backend, fused, a0, b0, 2)


@pytest.mark.parametrize("overwrite_a,overwrite_b", [(True, False), (False, True)])
@pytest.mark.parametrize("parallel", [False, True])
def test_fused_with_one_input_overwritten_keeps_the_other(backend, overwrite_a, overwrite_b, parallel):
    """Half the support quadrants alias an input, half are fresh buffers: the kept input must
    stay intact and the product match the plain run bitwise."""
    A, B = operand(backend, (N, N), 3), operand(backend, (N, N), 4)
    a0, b0 = host(backend, A), host(backend, B)
    plain = host(backend, matmul(A, B, level=2, schedule="rum2", backend=backend))
    got = matmul(A, B, level=2, schedule="rum2", fused=True, parallel=parallel, overwrite_a=overwrite_a,
                 overwrite_b=overwrite_b, backend=backend)
    assert np.array_equal(host(backend, got), plain)
    if not overwrite_a:
        assert np.array_equal(host(backend, A), a0), "A was changed"
    if not overwrite_b:
        assert np.array_equal(host(backend, B), b0), "B was changed"


@pytest.mark.parametrize("sequential,parallel,level", [("rum", "rum2", 3), ("lai7", "lai7", 2),
                                                        ("otsuka", "otsuka2", 2)])
def test_parallel_is_bitwise_equal_to_sequential(backend, sequential, parallel, level):
    n = 128
    A, B = operand(backend, (n, n), 5), operand(backend, (n, n), 6)
    a0, b0 = host(backend, A), host(backend, B)
    want = host(backend, matmul(A, B, level=level, schedule=sequential, backend=backend))
    check(backend, want, a0, b0, level)
    for _ in range(3):
        got = matmul(A, B, level=level, schedule=parallel, parallel=True, backend=backend)
        assert np.array_equal(host(backend, got), want)
        assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0)


@pytest.mark.parametrize("name", ["rum2", "otsuka2"])
def test_parallel_with_overwrite_is_bitwise_equal(backend, name):
    n = 128
    A, B = operand(backend, (n, n), 5), operand(backend, (n, n), 6)
    a0, b0 = host(backend, A), host(backend, B)
    want = host(backend, matmul(A, B, level=2, schedule=name, backend=backend))
    for _ in range(3):
        A2, B2 = backend.asarray(a0.copy()), backend.asarray(b0.copy())
        got = matmul(A2, B2, level=2, schedule=name, parallel=True, overwrite_a=True, overwrite_b=True,
                     backend=backend)
        assert np.array_equal(host(backend, got), want)


SHAPES = [(37, 53, 29), (65, 65, 65), (100, 64, 70), (1, 5, 3), (128, 17, 128), (64, 64, 64), (17, 128, 40)]


@pytest.mark.parametrize("fringe", ["peel", "pad"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["rum", "lai", "otsuka"])
def test_odd_and_rectangular_shapes(backend, shape, fringe, name):
    m, k, n = shape
    A, B = operand(backend, (m, k), 7), operand(backend, (k, n), 8)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level=2, schedule=name, fringe=fringe, backend=backend)
    check(backend, C, a0, b0, 2)
    assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 80), k=st.integers(1, 80), n=st.integers(1, 80), level=st.integers(0, 3),
       name=st.sampled_from(["rum", "lai", "otsuka"]), fringe=st.sampled_from(["peel", "pad"]),
       seed=st.integers(0, 2**16))
def test_any_shape_property(backend, m, k, n, level, name, fringe, seed):
    A, B = operand(backend, (m, k), seed), operand(backend, (k, n), seed + 1)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level=level, schedule=name, fringe=fringe, backend=backend)
    check(backend, C, a0, b0, level)
    assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0)


# --- memory ------------------------------------------------------------------------------------

QUAD_256 = 128 * 128 * 8   # one quadrant of a 256 x 256 float64 matrix: 128 KiB


def test_numpy_rum_with_overwrite_allocates_nothing():
    from gpu.backend import get_backend

    be = get_backend("numpy")
    n = 256
    A, B = operand(be, (n, n), 9), operand(be, (n, n), 10)
    a0, b0 = A.copy(), B.copy()
    out = np.empty((n, n))
    matmul(A.copy(), B.copy(), level=2, schedule="rum", out=out.copy(), backend=be)  # warm caches
    with be.track_allocations() as keep:
        matmul(A, B, level=2, schedule="rum", out=out, overwrite_a=True, overwrite_b=True, backend=be)
    assert keep.peak_bytes == 0, keep.peak_bytes
    check(be, out, a0, b0, 2)
    A, B = a0.copy(), b0.copy()
    with be.track_allocations() as safe:
        matmul(A, B, level=2, schedule="rum", out=out, backend=be)
    assert safe.peak_bytes >= 4 * QUAD_256, safe.peak_bytes
    assert np.array_equal(A, a0) and np.array_equal(B, b0)
    check(be, out, a0, b0, 2)


@pytest.mark.parametrize("name,overwrite", [("rum", False), ("rum", True), ("lai", False), ("otsuka", False),
                                            ("otsuka", True), ("winograd", False)])
@pytest.mark.parametrize("level", [1, 2, 3])
def test_numpy_peak_matches_the_memory_model(name, overwrite, level):
    """tracemalloc sees the buffers the model counts, plus interpreter noise (a few KiB)."""
    from gpu.backend import get_backend

    be = get_backend("numpy")
    n = 256
    A, B = operand(be, (n, n), 11), operand(be, (n, n), 12)
    out = np.empty((n, n))
    model = strassen_memory(name, n, level, 8, overwrite_a=overwrite, overwrite_b=overwrite).extra
    matmul(A.copy(), B.copy(), level=level, schedule=name, out=out.copy(), backend=be)  # warm caches
    with be.track_allocations() as report:
        matmul(A, B, level=level, schedule=name, out=out, overwrite_a=overwrite, overwrite_b=overwrite,
               backend=be)
    assert model <= report.peak_bytes <= model + 64 * 1024, (report.peak_bytes, model)


@pytest.mark.gpu
def test_cupy_rum_with_overwrite_makes_no_allocation(cupy_backend):
    be = cupy_backend
    n = 256
    A, B = operand(be, (n, n), 9), operand(be, (n, n), 10)
    a0, b0 = host(be, A), host(be, B)
    out = be.xp.empty((n, n))
    with be.allocation_policy("raw"), be.track_allocations() as report:
        C = matmul(A, B, level=2, schedule="rum", out=out, overwrite_a=True, overwrite_b=True, backend=be)
    assert report.exact and report.count == 0 and report.peak_bytes == 0
    assert C is out
    check(be, out, a0, b0, 2)


@pytest.mark.gpu
@pytest.mark.parametrize("name,overwrite", [("rum", False), ("rum", True), ("lai", False), ("otsuka", False),
                                            ("otsuka", True)])
@pytest.mark.parametrize("level", [1, 2, 3])
def test_cupy_peak_is_exactly_the_memory_model(cupy_backend, name, overwrite, level):
    be = cupy_backend
    n = 256
    A, B = operand(be, (n, n), 11), operand(be, (n, n), 12)
    a0, b0 = host(be, A), host(be, B)
    out = be.xp.empty((n, n))
    model = strassen_memory(name, n, level, 8, overwrite_a=overwrite, overwrite_b=overwrite)
    with be.allocation_policy("raw"), be.track_allocations() as report:
        matmul(A, B, level=level, schedule=name, out=out, overwrite_a=overwrite, overwrite_b=overwrite,
               backend=be)
    assert report.exact
    assert report.peak_bytes == model.extra, (report.peak_bytes, model)
    check(be, out, a0, b0, level)


# --- errors ---------------------------------------------------------------------------------------

def test_dtype_mismatch(backend):
    A, B = operand(backend, (8, 8), 1), operand(backend, (8, 8), 2, np.float32)
    with pytest.raises(TypeError, match="share one dtype"):
        matmul(A, B, level=1, backend=backend)


def test_unsupported_dtype(backend):
    A = backend.asarray(np.ones((8, 8), dtype=np.int64))
    with pytest.raises(TypeError, match="not supported"):
        matmul(A, A, level=1, backend=backend)


def test_not_two_dimensional(backend):
    A, B = operand(backend, (8,), 1), operand(backend, (8, 8), 2)
    with pytest.raises(ValueError, match="A must be 2-D"):
        matmul(A, B, level=1, backend=backend)
    with pytest.raises(ValueError, match="B must be 2-D"):
        matmul(B, operand(backend, (2, 2, 2), 3), level=1, backend=backend)


def test_inner_dimension_mismatch(backend):
    A, B = operand(backend, (8, 6), 1), operand(backend, (7, 8), 2)
    with pytest.raises(ValueError, match="A's columns must equal B's rows"):
        matmul(A, B, level=1, backend=backend)


@pytest.mark.parametrize("level", ["x", -1, 11, 1.5, None])
def test_bad_level(backend, level):
    A = operand(backend, (8, 8), 1)
    with pytest.raises(ValueError, match="level must be an integer from 0 to 10 or 'auto'"):
        matmul(A, A, level=level, backend=backend)


@pytest.mark.parametrize("name", LOW)
def test_low_level_cannot_recurse(backend, name):
    A, B = operand(backend, (16, 16), 1), operand(backend, (16, 16), 2)
    a0 = host(backend, A)
    with pytest.raises(ValueError, match=rf"'{name}' cannot recurse \(step \d+: .+\)"):
        matmul(A, B, level=2, schedule=name, backend=backend)
    assert np.array_equal(host(backend, A), a0)


def test_unknown_schedule(backend):
    A = operand(backend, (8, 8), 1)
    with pytest.raises(ValueError, match="unknown schedule 'strassen'; known: .*rum"):
        matmul(A, A, level=1, schedule="strassen", backend=backend)


def test_bad_fringe(backend):
    A = operand(backend, (8, 8), 1)
    with pytest.raises(ValueError, match=r"fringe must be one of \('peel', 'pad'\), got 'bad'"):
        matmul(A, A, level=1, fringe="bad", backend=backend)


@pytest.mark.parametrize("shape,dtype", [((8, 7), np.float64), ((7, 8), np.float64), ((8, 8), np.float32)])
def test_bad_out(backend, shape, dtype):
    A, B = operand(backend, (8, 6), 1), operand(backend, (6, 8), 2)
    out = backend.xp.zeros(shape, dtype=dtype)
    with pytest.raises(ValueError, match=r"out must be a \w+ array of shape \(8, 8\)"):
        matmul(A, B, level=1, out=out, backend=backend)
    assert not host(backend, out).any()


def test_out_on_the_other_backend_is_refused(backend):
    A = operand(backend, (8, 8), 1)
    foreign = [[0.0] * 8] * 8
    with pytest.raises(ValueError, match="out must be a"):
        matmul(A, A, level=1, out=foreign, backend=backend)


def test_out_overlapping_an_input(backend):
    M = operand(backend, (16, 32), 1)
    A, B = M[:, :16], operand(backend, (16, 16), 2)
    a0 = host(backend, A)
    with pytest.raises(ValueError, match="out overlaps A"):
        matmul(A, B, level=1, out=M[:, 8:24], backend=backend)
    with pytest.raises(ValueError, match="out overlaps A"):
        matmul(A, B, level=1, out=A, backend=backend)
    with pytest.raises(ValueError, match="out overlaps B"):
        matmul(operand(backend, (16, 16), 3), B, level=1, out=B, backend=backend)
    assert np.array_equal(host(backend, A), a0)
    # disjoint blocks of one buffer are fine
    C = matmul(A, B, level=1, out=M[:, 16:], backend=backend)
    check(backend, C, a0, host(backend, B), 1)


# --- out, dtypes, auto level, foreign inputs ----------------------------------------------------

@pytest.mark.parametrize("name", ["rum", "lai", "otsuka"])
def test_out_is_filled_and_returned(backend, name):
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    out = backend.xp.full((N, N), np.nan)
    C = matmul(A, B, level=2, schedule=name, out=out, backend=backend)
    assert C is out
    check(backend, out, host(backend, A), host(backend, B), 2)


def test_out_view_of_a_larger_matrix(backend):
    A, B = operand(backend, (40, 24), 1), operand(backend, (24, 36), 2)
    big = backend.xp.zeros((50, 50))
    C = matmul(A, B, level=2, out=big[5:45, 7:43], backend=backend)
    check(backend, C, host(backend, A), host(backend, B), 2)
    rest = host(backend, big)
    rest[5:45, 7:43] = 0
    assert not rest.any(), "wrote outside out"


@pytest.mark.parametrize("name", ["rum", "rum2", "lai", "otsuka", "winograd"])
@pytest.mark.parametrize("level", [1, 3])
def test_float32(backend, name, level):
    A, B = operand(backend, (N, N), 1, np.float32), operand(backend, (N, N), 2, np.float32)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level=level, schedule=name, parallel=True, backend=backend)
    assert C.dtype == np.float32
    check(backend, C, a0, b0, level)
    assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0)


def test_auto_level(backend):
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    C = matmul(A, B, backend=backend)
    check(backend, C, host(backend, A), host(backend, B), auto.auto_level(N, backend))


def test_auto_level_recurses_above_the_crossover(backend, monkeypatch):
    monkeypatch.setitem(auto.RULE_CROSSOVER, backend.name, 16)
    assert auto.auto_level(N, backend) == 2
    assert auto.auto_level(N - 1, backend) == 1
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level="auto", schedule="otsuka", backend=backend)
    check(backend, C, a0, b0, 2)
    assert np.array_equal(host(backend, A), a0)


def test_host_inputs_are_converted_and_kept(backend):
    """Nested lists (and, on CuPy, NumPy arrays) are copied to the backend; the private copies
    may serve as scratch, the caller's data is untouched."""
    a0 = np.random.default_rng(3).uniform(-1, 1, (N, N))
    b0 = np.random.default_rng(4).uniform(-1, 1, (N, N))
    A, B = a0.tolist(), b0 if backend.name == "cupy" else b0.tolist()
    C = matmul(A, B, level=2, schedule="rum", backend=backend)
    assert isinstance(C, backend.xp.ndarray)
    check(backend, C, a0, b0, 2)
    assert np.array_equal(np.array(A), a0) and np.array_equal(np.asarray(B), b0)


@pytest.mark.parametrize("name", ["rum", "otsuka"])
def test_overwrite_gives_the_same_product(backend, name):
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    a0, b0 = host(backend, A), host(backend, B)
    want = host(backend, matmul(A, B, level=3, schedule=name, backend=backend))
    got = matmul(A, B, level=3, schedule=name, overwrite_a=True, overwrite_b=True, backend=backend)
    assert np.array_equal(host(backend, got), want)
    check(backend, got, a0, b0, 3)


def test_zero_level_and_tiny_core_fall_back_to_gemm(backend):
    A, B = operand(backend, (3, 5), 1), operand(backend, (5, 2), 2)
    for level in (0, 1, 4):
        check(backend, matmul(A, B, level=level, backend=backend), host(backend, A), host(backend, B), level)


@pytest.mark.parametrize("fringe", ["peel", "pad"])
@pytest.mark.parametrize("shape", [(4, 0, 4), (8, 0, 8), (0, 4, 4), (4, 4, 0)])
def test_empty_dimensions(backend, shape, fringe):
    m, k, n = shape
    A, B = backend.xp.ones((m, k)), backend.xp.ones((k, n))
    out = backend.xp.full((m, n), np.nan)
    C = matmul(A, B, level=1, fringe=fringe, out=out, backend=backend)
    assert C is out and C.shape == (m, n)
    assert np.array_equal(host(backend, C), np.zeros((m, n)))


def test_a_product_that_does_not_fit_is_refused_before_any_work(backend, monkeypatch):
    """RUM without overwrite needs four support quadrants; with overwrite it needs nothing."""
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    a0, b0 = host(backend, A), host(backend, B)
    out = backend.xp.full((N, N), np.nan)
    monkeypatch.setattr(backend, "memory_info", lambda: (1000, 10**12))
    with pytest.raises(ValueError, match=r"rum at level 2 on a 64 x 64 core needs .* GiB beyond A, B and C"):
        matmul(A, B, level=2, schedule="rum", out=out, backend=backend)
    assert np.isnan(host(backend, out)).all(), "work started before the refusal"
    with pytest.raises(ValueError, match="needs"):
        matmul(A, B, level=2, schedule="lai", backend=backend)
    monkeypatch.setattr(backend, "memory_info", lambda: (0, 10**12))
    C = matmul(A, B, level=2, schedule="rum", out=out, overwrite_a=True, overwrite_b=True, backend=backend)
    check(backend, C, a0, b0, 2)


def test_square_of_one_matrix_with_overwrite_stays_correct(backend):
    A = operand(backend, (64, 64), 21)
    a0 = host(backend, A)
    C = matmul(A, A, level=2, schedule="rum", overwrite_a=True, overwrite_b=True, backend=backend)
    check(backend, C, a0, a0, 2)
    assert np.array_equal(host(backend, A), a0), "A is also B: neither may be used as scratch"


def test_non_blas_strides_are_refused_before_any_work(backend):
    A = operand(backend, (64, 64), 22)
    with pytest.raises(ValueError, match="unit stride"):
        matmul(A[::2, ::2], A[:32, :32], level=1, backend=backend)
