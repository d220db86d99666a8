"""``gpu.strassen.matmul``: the allocations the memory model (:mod:`gpu.strassen.costs`) predicts,
the refusal of a product that does not fit before any work, and clear errors for bad arguments."""

import numpy as np
import pytest

from gpu.backend import MemoryPlanError, get_backend
from gpu.strassen import forget, matmul, strassen_memory

N = 64
LOW = ("otsuka-low", "otsuka2-low")   # cannot recurse: levels 0 and 1 only


# --- memory ------------------------------------------------------------------------------------

QUAD_256 = 128 * 128 * 8   # one quadrant of a 256 x 256 float64 matrix: 128 KiB


def test_numpy_rum_with_overwrite_allocates_nothing(operand, check):
    be = get_backend("numpy")
    n = 256
    A, B = operand(be, (n, n), 9), operand(be, (n, n), 10)
    a0, b0 = A.copy(), B.copy()
    out = np.empty((n, n))
    matmul(A, B, level=2, schedule="rum", out=out, overwrite_a=True, overwrite_b=True, backend=be)  # warm caches
    A[...], B[...] = a0, b0                   # the same call on the same arrays: a first call's objects are not counted
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
def test_numpy_peak_matches_the_memory_model(name, overwrite, level, operand):
    """tracemalloc sees the buffers the model counts, plus interpreter noise (a few KiB)."""
    be = get_backend("numpy")
    n = 256
    A, B = operand(be, (n, n), 11), operand(be, (n, n), 12)
    out = np.empty((n, n))
    model = strassen_memory(name, n, level, 8, overwrite_a=overwrite, overwrite_b=overwrite).extra
    matmul(A.copy(), B.copy(), level=level, schedule=name, out=out.copy(), backend=be)  # warm caches
    forget()                                  # a new plan: its first execution makes its workspace
    with be.track_allocations() as report:
        matmul(A, B, level=level, schedule=name, out=out, overwrite_a=overwrite, overwrite_b=overwrite,
               backend=be)
    assert model <= report.peak_bytes <= model + 64 * 1024, (report.peak_bytes, model)


@pytest.mark.gpu
def test_cupy_rum_with_overwrite_makes_no_allocation(cupy_backend, operand, host, check):
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
def test_cupy_peak_is_exactly_the_memory_model(cupy_backend, name, overwrite, level, operand, host, check):
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

def test_dtype_mismatch(backend, operand):
    A, B = operand(backend, (8, 8), 1), operand(backend, (8, 8), 2, np.float32)
    with pytest.raises(TypeError, match="share one dtype"):
        matmul(A, B, level=1, backend=backend)


def test_unsupported_dtype(backend):
    A = backend.asarray(np.ones((8, 8), dtype=np.int64))
    with pytest.raises(TypeError, match="not supported"):
        matmul(A, A, level=1, backend=backend)


def test_not_two_dimensional(backend, operand):
    A, B = operand(backend, (8,), 1), operand(backend, (8, 8), 2)
    with pytest.raises(ValueError, match="A must be 2-D"):
        matmul(A, B, level=1, backend=backend)
    with pytest.raises(ValueError, match="B must be 2-D"):
        matmul(B, operand(backend, (2, 2, 2), 3), level=1, backend=backend)


def test_inner_dimension_mismatch(backend, operand):
    A, B = operand(backend, (8, 6), 1), operand(backend, (7, 8), 2)
    with pytest.raises(ValueError, match="A's columns must equal B's rows"):
        matmul(A, B, level=1, backend=backend)


@pytest.mark.parametrize("level", ["x", -1, 11, 1.5, True])
def test_bad_level(backend, level, operand):
    A = operand(backend, (8, 8), 1)
    with pytest.raises(ValueError, match="level must be an integer from 0 to 10 or 'auto'"):
        matmul(A, A, level=level, backend=backend)


@pytest.mark.parametrize("name", LOW)
def test_low_level_cannot_recurse(backend, name, operand, host):
    A, B = operand(backend, (16, 16), 1), operand(backend, (16, 16), 2)
    a0 = host(backend, A)
    with pytest.raises(ValueError, match=rf"'{name}' cannot recurse \(step \d+: .+\)"):
        matmul(A, B, level=2, schedule=name, backend=backend)
    assert np.array_equal(host(backend, A), a0)


def test_unknown_schedule(backend, operand):
    A = operand(backend, (8, 8), 1)
    with pytest.raises(ValueError, match="unknown schedule 'strassen'; known: .*rum"):
        matmul(A, A, level=1, schedule="strassen", backend=backend)
    out = backend.xp.empty((8, 8))
    for level in (0, "auto"):                  # the level-0 path that goes straight to the GEMM checks it too
        with pytest.raises(ValueError, match="unknown schedule 'strassen'"):
            matmul(A, A, level=level, schedule="strassen", out=out, backend=backend)


def test_bad_fringe(backend, operand):
    A = operand(backend, (8, 8), 1)
    with pytest.raises(ValueError, match=r"fringe must be one of \('peel', 'pad'\), got 'bad'"):
        matmul(A, A, level=1, fringe="bad", backend=backend)


@pytest.mark.parametrize("shape,dtype", [((8, 7), np.float64), ((7, 8), np.float64), ((8, 8), np.float32)])
def test_bad_out(backend, shape, dtype, operand, host):
    A, B = operand(backend, (8, 6), 1), operand(backend, (6, 8), 2)
    out = backend.xp.zeros(shape, dtype=dtype)
    with pytest.raises(ValueError, match=r"out has shape .*; pass a \w+\.ndarray of shape \(8, 8\)"):
        matmul(A, B, level=1, out=out, backend=backend)
    assert not host(backend, out).any()


def test_out_on_the_other_backend_is_refused(backend, operand):
    A = operand(backend, (8, 8), 1)
    foreign = [[0.0] * 8] * 8
    with pytest.raises(TypeError, match=r"out is a builtins\.list; pass a \w+\.ndarray of shape \(8, 8\)"):
        matmul(A, A, level=1, out=foreign, backend=backend)


def test_out_overlapping_an_input(backend, operand, host, check):
    M = operand(backend, (32, 64), 1)
    A, B = M[:, :32], operand(backend, (32, 32), 2)
    a0 = host(backend, A)
    with pytest.raises(ValueError, match="out overlaps A"):
        matmul(A, B, level=1, out=M[:, 16:48], backend=backend)
    with pytest.raises(ValueError, match="out overlaps A"):
        matmul(A, B, level=1, out=A, backend=backend)
    with pytest.raises(ValueError, match="out overlaps B"):
        matmul(operand(backend, (32, 32), 3), B, level=1, out=B, backend=backend)
    assert np.array_equal(host(backend, A), a0)
    # disjoint blocks of one buffer are fine
    C = matmul(A, B, level=1, out=M[:, 32:], backend=backend)
    check(backend, C, a0, host(backend, B), 1)



def test_a_product_that_does_not_fit_is_refused_before_any_work(backend, monkeypatch, operand, host, check):
    """RUM without overwrite needs four support quadrants; with overwrite it needs nothing."""
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    a0, b0 = host(backend, A), host(backend, B)
    out = backend.xp.full((N, N), np.nan)
    monkeypatch.setattr(backend, "memory_info", lambda: (1000, 10**12))
    with pytest.raises(MemoryPlanError, match=r"rum at level 2 on 64 x 64 x 64 \(output 0\.00 GiB, support .*\) "
                                              r"needs .* GiB but .* GiB are free"):
        matmul(A, B, level=2, schedule="rum", out=out, backend=backend)
    assert np.isnan(host(backend, out)).all(), "work started before the refusal"
    with pytest.raises(ValueError, match="needs"):
        matmul(A, B, level=2, schedule="lai", backend=backend)
    monkeypatch.setattr(backend, "memory_info", lambda: (0, 10**12))
    C = matmul(A, B, level=2, schedule="rum", out=out, overwrite_a=True, overwrite_b=True, backend=backend)
    check(backend, C, a0, b0, 2)
