"""A repeated call skips only the checks its signature already passed: the kept GEMM plans of ``Backend.gemm``
(:class:`gpu.backend.blas.GemmPlan`) and the bounded table they use (:class:`gpu.backend.memo.LRU`). Strassen's
kept plans are tested in ``test_strassen_plan.py``."""

import numpy as np
import pytest

from gpu.backend import get_backend
from gpu.backend.memo import LRU

N = 64


def operands(backend, n=N, seed=0):
    A, B = (backend.random((n, n), np.float64, seed=seed + i) * 2 - 1 for i in range(2))
    return A, B, backend.xp.empty((n, n))


# --- the bounded table ------------------------------------------------------------------------------

def test_lru_drops_the_least_recently_used_entry_first():
    t = LRU(2)
    t["a"], t["b"] = 1, 2
    assert t.get("a") == 1          # "a" is now the most recent
    t["c"] = 3
    assert "b" not in t and t.get("a") == 1 and t.get("c") == 3 and len(t) == 2
    assert t.get("missing", "default") == "default"
    t.clear()
    assert len(t) == 0
    with pytest.raises(ValueError, match="at least one entry"):
        LRU(0)


# --- Backend.gemm: kept plans -------------------------------------------------------------------------

def test_gemm_plan_is_kept_and_gives_the_same_bits(backend):
    A, B, C = operands(backend)
    backend.gemm(A, B, C)
    first = backend.to_numpy(C).copy()
    kept = len(backend._gemm_plans)
    A2, B2, C2 = operands(backend)                    # same signature, new addresses
    backend.gemm(A2, B2, C2)
    assert len(backend._gemm_plans) == kept
    np.testing.assert_array_equal(backend.to_numpy(C2), first)
    backend.gemm(A.T, B, C, 2.0, 0.0)                 # another signature: planned on its own
    np.testing.assert_allclose(backend.to_numpy(C), 2 * backend.to_numpy(A).T @ backend.to_numpy(B), rtol=1e-12)


def test_a_kept_gemm_plan_still_refuses_an_output_over_an_input(backend):
    X = backend.random((2 * N, N), np.float64, seed=3)
    backend.gemm(X[:N], X[N:], backend.xp.empty((N, N)))
    C = backend.xp.empty((N, N))
    backend.gemm(X[:N], X[N:], C)                     # kept: same signature
    with pytest.raises(ValueError, match="C overlaps A"):
        backend.gemm(X[:N], X[N:], X[N // 2:N // 2 + N])      # same signature, C over A and B
    with pytest.raises(ValueError, match="C overlaps B"):
        backend.gemm(X[:N], X[N:], X[N:])


def test_a_kept_gemm_plan_still_checks_scalars_and_read_only_outputs():
    be = get_backend("numpy")
    A, B, C = operands(be)
    be.gemm(A, B, C)
    with pytest.raises(TypeError, match="alpha must be a real number"):
        be.gemm(A, B, C, "2")
    C.flags.writeable = False
    with pytest.raises(ValueError, match="C is read-only"):
        be.gemm(A, B, C)
    with pytest.raises(TypeError, match="needs numpy.ndarray"):
        be.gemm(A.tolist(), B, np.empty((N, N)))


# --- the table across threads --------------------------------------------------------------------------

def test_the_table_is_safe_to_share_between_threads():
    """The Dask front-end's workers call Backend.gemm from several threads: one table, no lost or broken
    entries while they read and write past its size (without the lock, an entry another thread dropped
    between a read and its move to the end raised KeyError in about one run of five)."""
    import sys
    from concurrent.futures import ThreadPoolExecutor
    t = LRU(8)

    def churn(seed):
        for i in range(5000):
            t[i % 13] = i
            t.get((i * 7 + seed) % 13)
        return True

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(4) as pool:
            assert all(pool.map(churn, range(4)))
    finally:
        sys.setswitchinterval(interval)
    assert len(t) == 8
