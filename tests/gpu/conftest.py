"""Helpers of the Strassen tests, as fixtures: test modules are imported in importlib mode, so
they share helpers through fixtures rather than imports."""

import threading
from collections import Counter

import numpy as np
import pytest

EPS = {np.dtype(np.float64): 2.0**-52, np.dtype(np.float32): 2.0**-23}


def _operand(backend, shape, seed, dtype=np.float64):
    """Uniform values in [-1, 1) on the backend's device."""
    return backend.random(shape, dtype, seed=seed) * 2 - 1


def _host(backend, x):
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


def _check(backend, C, A, B, level, side=None):
    """``C`` (device) is A @ B (host copies) within :func:`bound`."""
    side = side or max(*A.shape, B.shape[1])
    side = -(-side // 2**level) * 2**level
    got = _host(backend, C)
    assert got.shape == (A.shape[0], B.shape[1]) and got.dtype == A.dtype
    expect = A.astype(np.float64) @ B.astype(np.float64)
    err = np.abs(got.astype(np.float64) - expect).max() if got.size else 0.0
    assert err <= bound(A, B, side, level), f"error {err:.3e} > bound {bound(A, B, side, level):.3e}"
    return got


@pytest.fixture(autouse=True)
def _no_kept_strassen_plans():
    """Each test starts with no Strassen plan kept by ``matmul`` (a kept plan holds its workspace, so a test
    that counts allocations or memory checks would see another test's plan)."""
    from gpu.strassen import forget

    forget()
    yield
    forget()


@pytest.fixture
def operand():
    """``operand(backend, shape, seed, dtype=float64)``: uniform values in [-1, 1) on the device."""
    return _operand


@pytest.fixture
def host():
    """``host(backend, x)``: a NumPy copy of ``x``, safe from later writes to ``x``."""
    return _host


@pytest.fixture
def check():
    """``check(backend, C, A, B, level)``: C is A @ B within the Strassen error bound (see :func:`bound`)."""
    return _check


@pytest.fixture(scope="module")
def client():
    """A Dask client of two single-thread workers in this process (the Dask front-end's CPU tests): they
    share its modules, so the tests can look into the workers' mappings and locked ranges."""
    pytest.importorskip("distributed", reason="the Dask front-end needs distributed (pip install -e '.[dist]')")
    cluster, dask_client = _cluster_of(2)
    with cluster, dask_client:
        yield dask_client


# --- the Dask front-end's tests (test_multigpu_*.py) ---------------------------------------------------------

DASK_TOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}


def _cluster_of(n_workers):
    """A cluster of ``n_workers`` single-thread workers in this process, without Dask's active memory manager: every
    2 s it drops replicas it finds redundant, so on a slow machine a panel fetched for one block could be dropped and
    fetched again for the next (one CI run of 2026-12-03 saw a panel fetched twice), and the placement tests count
    the front-end's fetches, not Dask's memory policy."""
    import dask
    import distributed
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}):
        cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=False,
                                           dashboard_address=":0")
    return cluster, distributed.Client(cluster)


def _dask_operands(m, k, n, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)


def _assert_product(C, A, B):
    """max |C - A B| <= tol |A| |B| (norms: largest absolute entry times k)."""
    A, B = np.asarray(A), np.asarray(B)
    expect = A.astype(np.float64) @ B.astype(np.float64)
    assert C.shape == expect.shape and C.dtype == A.dtype and type(C) is np.ndarray
    scale = max(1.0, A.shape[1] * np.abs(A).max() * np.abs(B).max()) if A.size and B.size else 1.0
    assert np.abs(C - expect).max(initial=0.0) <= DASK_TOL[C.dtype] * scale


def _fetched(client) -> dict[str, Counter]:
    """Per worker, how many times each key came in from another worker."""
    logs = client.run(lambda dask_worker: [key for entry in dask_worker.transfer_incoming_log for key in entry["keys"]])
    return {worker: Counter(keys) for worker, keys in logs.items()}


def _npy(path, x, mode="r"):
    """``x`` saved as a .npy file and mapped back in ``mode``."""
    np.save(path, x)
    return np.load(path, mmap_mode=mode)


@pytest.fixture
def cluster_of():
    """``cluster_of(n)``: (cluster, client) of n single-thread workers in this process; close both."""
    return _cluster_of


@pytest.fixture
def operands():
    """``operands(m, k, n, dtype=float64, seed=0)``: NumPy A and B, uniform in [-1, 1)."""
    return _dask_operands


@pytest.fixture
def assert_product():
    """``assert_product(C, A, B)``: C is a NumPy array equal to A @ B within k times the dtype's tolerance."""
    return _assert_product


@pytest.fixture
def fetched():
    """``fetched(client)``: per worker, how many times each key came in from another worker."""
    return _fetched


@pytest.fixture
def npy():
    """``npy(path, x, mode="r")``: x saved as a .npy file and mapped back."""
    return _npy


@pytest.fixture
def mapped_files(tmp_path, client):
    """``mapped_files(m, k, n, seed)``: A0 and B0 drawn, their mapped .npy files A and B, and a writeable mapped
    ``out`` (m x n), after the workers' kept mappings are let go (their pages unlocked)."""
    from gpu.multigpu import mapped

    def make(m, k, n, seed):
        client.run(mapped.release)
        A0, B0 = _dask_operands(m, k, n, seed=seed)
        out = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(m, n))
        return A0, B0, _npy(tmp_path / "a.npy", A0), _npy(tmp_path / "b.npy", B0), out
    return make


# --- the NaN checks beside the products (test_outofcore_gate.py, test_multigpu_mapped.py) ------------------

@pytest.fixture
def held_checks(monkeypatch):
    """``held_checks(module)``: every NaN check that ``module`` makes (its ``require_finite``) first waits, at
    most 10 s, until the NumPy engine has multiplied once. Returns the list that gets, per check, its thread
    and whether a product had run: an engine that checked before its products would time out there."""
    from gpu.backend import get_backend
    from gpu.outofcore.ops import FAMILY

    def hold(module):
        ops = get_backend("numpy").ops(FAMILY)
        multiplied, seen = threading.Event(), []
        check, multiply = module.require_finite, type(ops).multiply

        def held(*args):
            seen.append((threading.current_thread(), multiplied.wait(10)))
            return check(*args)

        def noted(self, *args):
            multiplied.set()
            return multiply(self, *args)

        monkeypatch.setattr(module, "require_finite", held)
        monkeypatch.setattr(type(ops), "multiply", noted)
        return seen

    return hold
