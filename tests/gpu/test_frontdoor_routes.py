"""The front door's routes for products not in one device's memory: host operands larger than ``memory`` (or than
the device) through the out-of-core engine, and a Dask client (or ``dask.array`` operands) through the Dask
front-end; both keep the library GEMM's bound and refuse a tighter one before any work."""

import numpy as np
import pytest

import gpu
from gpu.backend import get_backend
from gpu.frontdoor import PLANS
from gpu.frontdoor.routes import host_route, is_dask

M, K, N = 600, 512, 520


def operands(seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (M, K)), rng.uniform(-1, 1, (K, N))


@pytest.fixture(autouse=True)
def no_kept_plans():
    PLANS.clear()
    yield
    PLANS.clear()


def test_host_operands_larger_than_memory_stream_through_the_out_of_core_engine():
    A, B = operands()
    need = A.nbytes + B.nbytes + M * N * 8
    be = get_backend("numpy")
    assert host_route(be, A, B, None, need - 1) and not host_route(be, A, B, None, need)
    assert not host_route(be, A, B, None, None), "NumPy operands on the NumPy backend are in its memory"
    p = gpu.plan(A, B, memory=need // 2, backend="numpy")
    assert p.chosen.family == "outofcore" and "need more than the device memory given" in p.explain()
    assert p._inner._inner.schedule.device_bytes <= need // 2 and p._inner._inner.schedule.grid != (1, 1)
    C = p.execute(A, B)
    assert type(C) is np.ndarray and np.allclose(C, A @ B, rtol=0, atol=1e-13 * K)
    out = np.empty((M, N))
    assert gpu.matmul(A, B, out=out, memory=need // 2, backend="numpy") is out and np.array_equal(out, C)
    assert gpu.matmul(A, B, memory=need // 2, backend="numpy") is not out and len(PLANS) == 2
    assert gpu.plan(A, B, memory=need, backend="numpy").chosen.family == "gemm"     # fits: ranked as usual


@pytest.mark.gpu
def test_on_a_gpu_host_operands_beyond_memory_come_back_in_host_memory(cupy_backend):
    """NumPy operands on the CuPy backend: within ``memory`` they go through the out-of-core engine (C in host
    memory); otherwise they are converted and ranked like device operands (C on the device)."""
    A, B = operands(4)
    need = A.nbytes + B.nbytes + M * N * 8
    C = gpu.matmul(A, B, memory=need // 2, backend=cupy_backend)
    assert type(C) is np.ndarray and np.allclose(C, A @ B, rtol=0, atol=1e-13 * K)
    D = gpu.matmul(A, B, backend=cupy_backend)
    assert isinstance(D, cupy_backend.xp.ndarray) and np.allclose(cupy_backend.to_numpy(D), C, rtol=0,
                                                                  atol=1e-13 * K)


def test_a_bound_tighter_than_the_library_gemms_is_refused_on_the_routes_before_any_work():
    A, B = operands(1)
    with pytest.raises(ValueError, match="the out-of-core engine .* does not keep accuracy 1e-17"):
        gpu.matmul(A, B, accuracy=1e-17, memory=1024, backend="numpy")
    with pytest.raises(ValueError, match="memory must be"):
        gpu.matmul(A, B, memory=-1, backend="numpy")


def test_a_client_runs_the_product_on_its_workers(client):
    A, B = operands(2)
    C = gpu.matmul(A, B, client=client, backend="numpy")
    assert type(C) is np.ndarray and np.allclose(C, A @ B, rtol=0, atol=1e-13 * K)
    with pytest.raises(ValueError, match="the Dask product .* does not keep accuracy 1e-17"):
        gpu.matmul(A, B, client=client, accuracy=1e-17, backend="numpy")


def test_dask_arrays_run_on_the_current_client(client):
    da = pytest.importorskip("dask.array")
    A, B = operands(3)
    dA, dB = da.from_array(A, chunks=(300, 256)), da.from_array(B, chunks=(256, 260))
    assert is_dask(dA) and not is_dask(A)
    C = gpu.matmul(dA, dB, backend="numpy")
    assert type(C) is np.ndarray and np.allclose(C, A @ B, rtol=0, atol=1e-13 * K)
