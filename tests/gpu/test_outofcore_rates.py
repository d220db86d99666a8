"""The out-of-core engine's rates (``gpu.outofcore.rates``): measured through the engine's operations, kept in the
device profile beside the level tables, and sizing ``matmul``'s plan unless the caller passes rates."""

import numpy as np
import pytest

from gpu.backend import get_backend
from gpu.outofcore import api as outofcore_api
from gpu.outofcore import matmul, plan


def operands(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))


def test_rates_are_measured_kept_in_the_profile_and_size_the_plan(tmp_path, monkeypatch):
    from gpu import profile as profiles
    from gpu.outofcore import rates

    monkeypatch.setenv(profiles.ENV_VAR, str(tmp_path))
    be = get_backend("numpy")
    measured = rates.measure(be, nbytes=2**20, side=64, reps=2)
    assert all(measured[k] > 0 for k in (*rates.RATES, "h2d_bytes_per_s", "d2h_bytes_per_s"))
    assert rates.from_profile(profiles.backend_profile(be)) == {}
    path = rates.save(be, {"link_bytes_per_s": 1e9, "gemm_flops_per_s": 1e11, "hbm_bytes_per_s": 1e10})
    kept = {"levels": {}, "env_key": "e", "written_at": "now", "backend": "numpy", "device": "cpu"}
    assert profiles.with_regime(profiles.load_profile(path), kept, "sustained")["transfer"]["link_bytes_per_s"] == 1e9
    model = rates.from_profile(profiles.backend_profile(be))
    assert model == {"link_bytes_per_s": 1e9, "gemm_flops_per_s": 1e11, "hbm_bytes_per_s": 1e10}
    A, B = operands(300, 700, 260, seed=8)
    outofcore_api.PLANS.clear()                      # a plan kept from another test would read no profile
    seen = []
    monkeypatch.setattr(outofcore_api, "plan", lambda *a, **kw: seen.append(kw) or plan(*a, **kw))
    assert np.allclose(matmul(A, B, device_memory=2**23, backend="numpy"), A @ B)
    assert {k: seen[-1][k] for k in model} == model, "matmul did not size its plan by the profile's rates"
    matmul(A, B, device_memory=2**23, backend="numpy", link_bytes_per_s=5e9, gemm_flops_per_s=1e12)
    assert seen[-1]["link_bytes_per_s"] == 5e9 and seen[-1]["hbm_bytes_per_s"] is None


@pytest.mark.gpu
def test_the_gpu_rates_are_plausible(cupy_backend):
    from gpu.outofcore import rates

    measured = rates.measure(cupy_backend, nbytes=2**28, side=2048, reps=3)
    assert 1e9 < measured["link_bytes_per_s"] <= min(measured["h2d_bytes_per_s"], measured["d2h_bytes_per_s"])
    assert measured["hbm_bytes_per_s"] > measured["link_bytes_per_s"] and measured["gemm_flops_per_s"] > 1e12


def test_the_link_rate_adds_the_costs_of_staging_and_dma():
    """Staging and DMA share the host's memory bandwidth: their costs add, and the slower direction counts."""
    from gpu.outofcore import rates

    measured = {"h2d_bytes_per_s": 54.2e9, "d2h_bytes_per_s": 60e9, "staging_bytes_per_s": 34.4e9}
    assert rates.link_rate(measured) == pytest.approx(1 / (1 / 34.4e9 + 1 / 54.2e9))
    assert rates.link_rate(measured | {"d2h_bytes_per_s": 40e9}) == pytest.approx(1 / (1 / 34.4e9 + 1 / 40e9))
    assert rates.link_rate(measured) < min(measured.values())
