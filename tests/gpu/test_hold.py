"""The stream hold (``gpu.backend.hold``): timings that leave the host's launch overhead out."""

import numpy as np
import pytest

from gpu.backend import hold


def host(backend, x):
    return np.array(backend.to_numpy(x))


def test_a_timer_that_hides_the_launch_still_times_the_work(backend):
    A = backend.random((256, 256), seed=1)
    C = backend.xp.zeros((256, 256))
    backend.gemm(A, A.T, C)                  # warm-up: a first launch may load a module, which waits for the device
    backend.synchronize()
    with backend.timer(hide_launch=True) as t:
        backend.gemm(A, A.T, C)
    assert 0 < t.seconds < 10
    np.testing.assert_allclose(host(backend, C), host(backend, A) @ host(backend, A).T, rtol=1e-12)


@pytest.mark.gpu
def test_a_stream_hold_refuses_work_that_waits_for_the_device(cupy_backend, monkeypatch):
    monkeypatch.setattr(hold, "TIMEOUT_S", 0.05)
    be = cupy_backend
    with pytest.raises(RuntimeError, match="hold timed out"), be.timer(hide_launch=True):
        be.synchronize()
    x = be.xp.arange(10.0)
    x.sum()                                  # compiled before the hold: a first call takes longer to issue
    with be.timer(hide_launch=True) as t:
        total = x.sum()
    assert 0 < t.seconds < 0.05 and float(total) == 45.0, "the next hold is released by the host, not the timeout"
