"""A repeated call skips only the checks its signature already passed: the level-0 shortcut of
``matmul`` (:mod:`gpu.strassen.shortcut`), the kept GEMM plans of ``Backend.gemm``
(:class:`gpu.backend.blas.GemmPlan`) and the bounded table both use (:class:`gpu.backend.memo.LRU`)."""

import numpy as np
import pytest

from gpu.backend import MemoryPlanError, get_backend
from gpu.backend.memo import LRU
from gpu.profile import device_name, save_profile
from gpu.strassen import api, matmul, shortcut

N = 64


@pytest.fixture(autouse=True)
def _fresh():
    shortcut.forget()
    yield
    shortcut.forget()


def gemm_calls(be, monkeypatch):
    """The GEMMs ``be`` runs, counted (a level-0 product is one; a level-1 product seven)."""
    seen, real = [], type(be).gemm
    monkeypatch.setattr(be, "gemm", lambda *a, **k: (seen.append(1), real(be, *a, **k))[1])
    return seen


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


# --- matmul: the level-0 shortcut ----------------------------------------------------------------------

def test_a_repeated_level0_call_is_one_gemm_with_the_same_bits(backend, monkeypatch):
    A, B, C = operands(backend)
    for level in (0, "auto"):
        shortcut.forget()
        first = matmul(A, B, level=level, out=C, backend=backend)
        expected = backend.to_numpy(first).copy()
        checks: list = []
        monkeypatch.setattr(api, "check_schedule", lambda *a, seen=checks: seen.append(a))
        calls = gemm_calls(backend, monkeypatch)
        assert matmul(A, B, level=level, out=C, backend=backend) is C
        assert calls == [1] and checks == [], "the kept signature ran one GEMM and no schedule check"
        np.testing.assert_array_equal(backend.to_numpy(C), expected)
        monkeypatch.undo()


def test_a_repeated_level0_call_without_out_is_the_librarys_product_with_no_checks(backend, monkeypatch):
    """With no out= a call that resolves to level 0 is kept too: a repeat runs the library's own product (on
    NumPy, A @ B itself) with no schedule check, and still checks its output's memory."""
    A, B, _ = operands(backend)
    first = backend.to_numpy(matmul(A, B, level=0, backend=backend))
    assert len(shortcut._KEPT) == 1
    checks, memory = [], []
    monkeypatch.setattr(api, "check_schedule", lambda *a: checks.append(a))
    monkeypatch.setattr(shortcut, "require_memory", lambda *a: memory.append(a[1]))
    again = matmul(A, B, level=0, backend=backend)
    assert checks == [] and memory == [8 * N * N] and len(shortcut._KEPT) == 1
    np.testing.assert_array_equal(backend.to_numpy(again), first)
    if backend.name == "numpy":
        np.testing.assert_array_equal(again, A @ B)


def test_the_shortcut_still_refuses_nonfinite_inputs_and_outputs_over_inputs(backend):
    X = backend.random((3 * N, N), np.float64, seed=1)
    A, B, C = X[:N], X[N:2 * N], X[2 * N:]
    matmul(A, B, level=0, out=C, backend=backend, check_finite=True)
    assert len(shortcut._KEPT) == 1
    A[3, 5] = np.nan
    with pytest.raises(ValueError, match="A contains NaN or infinity"):
        matmul(A, B, level=0, out=C, backend=backend, check_finite=True)
    A[3, 5] = 0
    with pytest.raises(ValueError, match="out overlaps A"):
        matmul(A, B, level=0, out=X[N // 2:N // 2 + N], backend=backend, check_finite=True)


def test_a_profile_written_since_changes_the_level_of_a_kept_signature(monkeypatch):
    be = get_backend("numpy")
    A, B, C = operands(be)
    matmul(A, B, out=C, backend=be)                   # no profile: the rule gives level 0 at N = 64
    assert len(shortcut._KEPT) == 1
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {"rum": [[0, 1]]}})
    calls = gemm_calls(be, monkeypatch)
    matmul(A, B, out=C, backend=be)
    assert len(calls) == 7, "the new profile's level 1 ran (seven GEMMs), not the kept level 0"
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)


def test_calls_that_cannot_take_the_shortcut_are_not_kept(backend):
    A, B, C = operands(backend)
    matmul(A, B, level=1, backend=backend)            # no out= beyond level 0
    matmul(A, B, schedule=["rum"], level=0, out=C, backend=backend)   # a list is no key
    matmul(A, B, level=1, workspace="auto", out=C, backend=backend)   # planned from the free memory
    matmul(A, A, level=1, overwrite_a=True, out=C, backend=backend)   # rights that depend on the addresses
    assert len(shortcut._KEPT) == 0
    with pytest.raises(ValueError, match="fringe must be one of"):
        matmul(A, B, level=0, out=C, backend=backend, fringe="nope")
    assert len(shortcut._KEPT) == 0


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_kept_level1_plan_gives_the_same_bits_and_keeps_what_it_must(backend, monkeypatch, overwrite):
    A, B, C = operands(backend)
    A0, B0 = backend.to_numpy(A).copy(), backend.to_numpy(B).copy()
    matmul(A, B, level=1, out=C, overwrite_a=overwrite, overwrite_b=overwrite, backend=backend)
    first = backend.to_numpy(C).copy()
    A, B = backend.asarray(A0), backend.asarray(B0)
    checks: list = []
    monkeypatch.setattr(api, "check_schedule", lambda *a, seen=checks: seen.append(a))
    matmul(A, B, level=1, out=C, overwrite_a=overwrite, overwrite_b=overwrite, backend=backend)
    assert checks == [] and len(shortcut._KEPT) == 1
    np.testing.assert_array_equal(backend.to_numpy(C), first)
    if not overwrite:
        np.testing.assert_array_equal(backend.to_numpy(A), A0)
        np.testing.assert_array_equal(backend.to_numpy(B), B0)
        monkeypatch.setattr(backend, "memory_info", lambda: (0, 1))      # the support it needs no longer fits
        with pytest.raises(MemoryPlanError, match="rum at level 1"):
            matmul(A, B, level=1, out=C, backend=backend)


def test_a_kept_plan_with_overwrite_rights_drops_them_for_inputs_that_share_memory(backend):
    X = backend.random((2 * N, N), np.float64, seed=4)
    C = backend.xp.empty((N, N))
    matmul(X[:N], X[N:], level=1, out=C, overwrite_a=True, overwrite_b=True, backend=backend)   # kept
    X = backend.random((2 * N, N), np.float64, seed=5)
    before = backend.to_numpy(X).copy()
    A, B = X[:N], X[N // 2:N // 2 + N]                 # same signature, B over A
    matmul(A, B, level=1, out=C, overwrite_a=True, overwrite_b=True, backend=backend)
    np.testing.assert_array_equal(backend.to_numpy(X), before)
    np.testing.assert_allclose(backend.to_numpy(C), before[:N] @ before[N // 2:N // 2 + N], rtol=1e-10, atol=1e-12)


def test_the_kept_signatures_are_bounded(monkeypatch):
    be = get_backend("numpy")
    monkeypatch.setattr(shortcut, "_KEPT", LRU(3))
    for n in range(8, 14):
        A, B, C = operands(be, n)
        matmul(A, B, level=0, out=C, backend=be)
    assert len(shortcut._KEPT) == 3


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
