"""Host-to-device copies of the CuPy backend: large NumPy arrays go straight from pageable memory (no pinned
copy of their size for CuPy's pinned pool to keep)."""

import numpy as np
import pytest


@pytest.mark.gpu
def test_large_numpy_arrays_go_to_the_device_by_a_direct_copy(cupy_backend, monkeypatch):
    from gpu.backend import cupy_backend as module

    monkeypatch.setattr(module, "DIRECT_COPY_BYTES", 1)
    pool = cupy_backend.xp.get_default_pinned_memory_pool()
    pool.free_all_blocks()
    x = np.random.default_rng(0).random((37, 53))
    for host in (x, np.asfortranarray(x), x[::2, 3:], x.astype(np.float32)):
        got = cupy_backend.asarray(host)
        assert got.shape == host.shape and got.dtype == host.dtype
        assert np.array_equal(cupy_backend.to_numpy(got), host)
    assert cupy_backend.asarray(x, dtype=np.float32).dtype == np.float32
    assert pool.n_free_blocks() == 0, "a staging copy went through pinned memory"
