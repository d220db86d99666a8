"""``gpu.strassen.matmul``: every schedule, level, stream mode and fringe mode against a
float64 host product; inputs kept safe; fused, parallel and sequential runs bitwise equal.
Runs on NumPy, and on CuPy where a GPU is usable (the ``backend`` fixture). Allocations and
errors: ``test_strassen_memory.py``; ``level="auto"``: ``test_strassen_auto.py``."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu.strassen import SCHEDULES, matmul
from gpu.strassen.api import MIN_BOTTOM, deepest_level

N = 64
LOW = ("otsuka-low", "otsuka2-low")   # cannot recurse: levels 0 and 1 only


def cases():
    for name in SCHEDULES:
        for level in range(2 if name in LOW else 5):
            for parallel in (False, True):
                yield name, level, parallel


@pytest.mark.parametrize("name,level,parallel", list(cases()))
def test_every_schedule_level_and_stream_mode(backend, name, level, parallel, operand, host, check):
    n = max(N, MIN_BOTTOM * 2**level)
    A, B = operand(backend, (n, n), 1), operand(backend, (n, n), 2)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level=level, schedule=name, parallel=parallel, backend=backend)
    check(backend, C, a0, b0, level)
    assert np.array_equal(host(backend, A), a0), "A was changed"
    assert np.array_equal(host(backend, B), b0), "B was changed"


def test_the_bound_is_tight_enough_to_catch_a_wrong_product(backend, operand, host, check):
    """The accuracy check fails on a product with one element off by 1e-6, so it is not vacuous."""
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level=2, schedule="rum", backend=backend)
    C[3, 5] += 1e-6
    with pytest.raises(AssertionError, match="bound"):
        check(backend, C, a0, b0, 2)


@pytest.mark.parametrize("name", ["rum", "rum2", "lai", "otsuka", "winograd"])
def test_fused_is_bitwise_equal_to_unfused(backend, name, operand, host, check):
    A, B = operand(backend, (N, N), 3), operand(backend, (N, N), 4)
    a0, b0 = host(backend, A), host(backend, B)
    plain = host(backend, matmul(A, B, level=2, schedule=name, backend=backend))
    fused = matmul(A, B, level=2, schedule=name, fused=True, backend=backend)
    assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0), "inputs changed"
    assert np.array_equal(host(backend, fused), plain)
    check(backend, fused, a0, b0, 2)


@pytest.mark.parametrize("name", ["rum", "rum2"])
def test_fused_with_overwrite_uses_the_aliases(backend, name, operand, host, check):
    A, B = operand(backend, (N, N), 3), operand(backend, (N, N), 4)
    a0, b0 = host(backend, A), host(backend, B)
    plain = host(backend, matmul(A, B, level=2, schedule=name, backend=backend))
    fused = matmul(A, B, level=2, schedule=name, fused=True, overwrite_a=True, overwrite_b=True,
                   backend=backend)
    assert np.array_equal(host(backend, fused), plain)
    check(backend, fused, a0, b0, 2)


@pytest.mark.parametrize("overwrite_a,overwrite_b", [(True, False), (False, True)])
@pytest.mark.parametrize("parallel", [False, True])
def test_fused_with_one_input_overwritten_keeps_the_other(backend, overwrite_a, overwrite_b, parallel, operand, host):
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


@pytest.mark.parametrize("sequential,parallel,level,fused", [("rum", "rum2", 3, False), ("lai7", "lai7", 2, False),
                                                              ("otsuka", "otsuka2", 2, False),
                                                              ("winograd", "winograd2", 2, False),
                                                              ("winograd", "winograd2", 3, True)])
def test_parallel_is_bitwise_equal_to_sequential(backend, sequential, parallel, level, fused, operand, host, check):
    n = 128
    A, B = operand(backend, (n, n), 5), operand(backend, (n, n), 6)
    a0, b0 = host(backend, A), host(backend, B)
    want = host(backend, matmul(A, B, level=level, schedule=sequential, fused=fused, backend=backend))
    check(backend, want, a0, b0, level)
    for _ in range(3):
        got = matmul(A, B, level=level, schedule=parallel, parallel=True, fused=fused, backend=backend)
        assert np.array_equal(host(backend, got), want)
        assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0)


@pytest.mark.parametrize("name", ["rum2", "otsuka2"])
def test_parallel_with_overwrite_is_bitwise_equal(backend, name, operand, host):
    n = 128
    A, B = operand(backend, (n, n), 5), operand(backend, (n, n), 6)
    a0, b0 = host(backend, A), host(backend, B)
    want = host(backend, matmul(A, B, level=2, schedule=name, backend=backend))
    for _ in range(3):
        A2, B2 = backend.asarray(a0.copy()), backend.asarray(b0.copy())
        got = matmul(A2, B2, level=2, schedule=name, parallel=True, overwrite_a=True, overwrite_b=True,
                     backend=backend)
        assert np.array_equal(host(backend, got), want)


SHAPES = [(137, 153, 129), (65, 65, 65), (100, 64, 70), (1, 5, 3), (128, 17, 128), (64, 64, 64), (17, 128, 40),
          (37, 53, 29)]


def product_or_refusal(backend, A, B, level, check, host, **kw):
    """``matmul`` at ``level`` where the shape allows it (checked against the host product), else the
    refusal, raised before any work (inputs unchanged)."""
    (m, k), n = A.shape, B.shape[1]
    a0, b0 = host(backend, A), host(backend, B)
    if level <= deepest_level(m, k, n, kw.get("fringe", "peel")):
        check(backend, matmul(A, B, level=level, backend=backend, **kw), a0, b0, level)
    else:
        with pytest.raises(ValueError, match=f"bottom products of at least {MIN_BOTTOM}"):
            matmul(A, B, level=level, backend=backend, **kw)
    assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0)


@pytest.mark.parametrize("fringe", ["peel", "pad"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["rum", "lai", "otsuka"])
def test_odd_and_rectangular_shapes(backend, shape, fringe, name, operand, host, check):
    m, k, n = shape
    A, B = operand(backend, (m, k), 7), operand(backend, (k, n), 8)
    product_or_refusal(backend, A, B, 2, check, host, schedule=name, fringe=fringe)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 160), k=st.integers(1, 160), n=st.integers(1, 160), level=st.integers(0, 3),
       name=st.sampled_from(["rum", "lai", "otsuka"]), fringe=st.sampled_from(["peel", "pad"]),
       seed=st.integers(0, 2**16))
def test_any_shape_property(backend, m, k, n, level, name, fringe, seed, operand, host, check):
    A, B = operand(backend, (m, k), seed), operand(backend, (k, n), seed + 1)
    product_or_refusal(backend, A, B, level, check, host, schedule=name, fringe=fringe)


# --- out, dtypes, foreign inputs ----------------------------------------------------

@pytest.mark.parametrize("name", ["rum", "lai", "otsuka"])
def test_out_is_filled_and_returned(backend, name, operand, host, check):
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    out = backend.xp.full((N, N), np.nan)
    C = matmul(A, B, level=2, schedule=name, out=out, backend=backend)
    assert C is out
    check(backend, out, host(backend, A), host(backend, B), 2)


def test_out_view_of_a_larger_matrix(backend, operand, host, check):
    A, B = operand(backend, (80, 72), 1), operand(backend, (72, 68), 2)
    big = backend.xp.zeros((90, 90))
    C = matmul(A, B, level=2, out=big[5:85, 7:75], backend=backend)
    check(backend, C, host(backend, A), host(backend, B), 2)
    rest = host(backend, big)
    rest[5:85, 7:75] = 0
    assert not rest.any(), "wrote outside out"


@pytest.mark.parametrize("name", ["rum", "rum2", "lai", "otsuka", "winograd"])
@pytest.mark.parametrize("level", [1, 3])
def test_float32(backend, name, level, operand, host, check):
    n = max(N, MIN_BOTTOM * 2**level)
    A, B = operand(backend, (n, n), 1, np.float32), operand(backend, (n, n), 2, np.float32)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level=level, schedule=name, parallel=True, backend=backend)
    assert C.dtype == np.float32
    check(backend, C, a0, b0, level)
    assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0)



def test_host_inputs_are_converted_and_kept(backend, check):
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
def test_overwrite_gives_the_same_product(backend, name, operand, host, check):
    A, B = operand(backend, (2 * N, 2 * N), 1), operand(backend, (2 * N, 2 * N), 2)
    a0, b0 = host(backend, A), host(backend, B)
    want = host(backend, matmul(A, B, level=3, schedule=name, backend=backend))
    got = matmul(A, B, level=3, schedule=name, overwrite_a=True, overwrite_b=True, backend=backend)
    assert np.array_equal(host(backend, got), want)
    check(backend, got, a0, b0, 3)


def test_levels_with_tiny_bottom_products_are_refused_not_ignored(backend, operand, host, check):
    """level=7 at N = 256 once recursed for a minute and levels 9 and 10 silently ran a
    plain GEMM. Every level whose bottom products fall below MIN_BOTTOM is now refused at once."""
    A, B = operand(backend, (3, 5), 1), operand(backend, (5, 2), 2)
    check(backend, matmul(A, B, level=0, backend=backend), host(backend, A), host(backend, B), 0)
    for level in (1, 4):
        with pytest.raises(ValueError, match="use level=0"):
            matmul(A, B, level=level, backend=backend)
    A, B = operand(backend, (256, 256), 1), operand(backend, (256, 256), 2)
    assert deepest_level(256, 256, 256) == 4
    for level in (5, 7, 8, 9, 10):
        with pytest.raises(ValueError, match=r"level .* 256 x 256 x 256 .* use level <= 4"):
            matmul(A, B, level=level, backend=backend)
    check(backend, matmul(A, B, level=4, backend=backend), host(backend, A), host(backend, B), 4)


@pytest.mark.parametrize("fringe", ["peel", "pad"])
@pytest.mark.parametrize("shape", [(4, 0, 4), (8, 0, 8), (0, 4, 4), (4, 4, 0)])
def test_empty_dimensions(backend, shape, fringe, host):
    m, k, n = shape
    A, B = backend.xp.ones((m, k)), backend.xp.ones((k, n))
    out = backend.xp.full((m, n), np.nan)
    C = matmul(A, B, level=1, fringe=fringe, out=out, backend=backend)
    assert C is out and C.shape == (m, n)
    assert np.array_equal(host(backend, C), np.zeros((m, n)))


def test_square_of_one_matrix_with_overwrite_stays_correct(backend, operand, host, check):
    A = operand(backend, (64, 64), 21)
    a0 = host(backend, A)
    C = matmul(A, A, level=2, schedule="rum", overwrite_a=True, overwrite_b=True, backend=backend)
    check(backend, C, a0, a0, 2)
    assert np.array_equal(host(backend, A), a0), "A is also B: neither may be used as scratch"


def test_non_blas_strides_are_refused_before_any_work(backend, operand):
    A = operand(backend, (64, 64), 22)
    with pytest.raises(ValueError, match="unit stride"):
        matmul(A[::2, ::2], A[:32, :32], level=1, backend=backend)
