"""The out-of-core engine as a plan (``gpu.outofcore.Plan``, and ``matmul`` as a kept plan): the checks, the rates
read from the device profile and the block and panel decision made once per operand signature; per call the
overlap of ``out``, the memory the call needs (a kept decision that no longer fits is made again), and the
finite check where asked."""

import numpy as np
import pytest

from gpu.backend import MemoryPlanError, get_backend
from gpu.backend.plans import PlanMismatch
from gpu.outofcore import Options, Plan, matmul
from gpu.outofcore import api as outofcore_api


def operands(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))


@pytest.fixture(autouse=True)
def _no_kept_plans():
    """Each test starts with no plan kept by ``matmul`` (another test's plan of the same signature would hide
    the decisions these tests count)."""
    outofcore_api.PLANS.clear()


@pytest.fixture
def decisions(monkeypatch):
    """The keyword arguments of every block and panel decision, and how often the profile was read."""
    seen = {"plans": [], "profiles": 0}
    plan, profile = outofcore_api.plan, outofcore_api.backend_profile

    def spy_plan(*args, **kwargs):
        seen["plans"].append(kwargs)
        return plan(*args, **kwargs)

    def spy_profile(*args, **kwargs):
        seen["profiles"] += 1
        return profile(*args, **kwargs)

    monkeypatch.setattr(outofcore_api, "plan", spy_plan)
    monkeypatch.setattr(outofcore_api, "backend_profile", spy_profile)
    return seen


def test_repeated_calls_decide_once_per_signature(decisions):
    A, B = operands(37, 45, 29, seed=1)
    first = matmul(A, B, block=(16, 8), panel=7, backend="numpy")
    for _ in range(3):
        assert np.array_equal(matmul(A, B, block=(16, 8), panel=7, backend="numpy"), first)
    assert len(decisions["plans"]) == 1 and decisions["profiles"] == 1
    matmul(A, B, block=(16, 8), panel=5, backend="numpy")                  # other options: another plan
    assert len(decisions["plans"]) == 2


def test_a_plan_gives_the_product_of_matmul_and_refuses_other_operands():
    A, B = operands(23, 31, 19, seed=2)
    A2, B2 = operands(23, 31, 19, seed=3)
    want = matmul(A, B, block=(8, 8), panel=4, backend="numpy")
    with Plan(A, B, options=Options(block=(8, 8), panel=4), backend="numpy") as plan:
        assert plan.schedule.block == (8, 8) and plan.schedule.panel == 4
        assert np.array_equal(plan.execute(A, B), want)
        out = np.empty((23, 19))
        with pytest.raises(PlanMismatch, match="out"):
            plan.execute(A2, B2, out)
        assert np.array_equal(plan.execute(A2, B2), matmul(A2, B2, block=(8, 8), panel=4, backend="numpy"))
    with pytest.raises(ValueError, match="freed"):
        plan.execute(A, B)


def test_options_as_a_dataclass_a_dict_or_keywords():
    A, B = operands(20, 24, 12, seed=4)
    want = matmul(A, B, block=[8, 6], panel=5, backend="numpy")
    for kw in ({"options": Options(block=(8, 6), panel=5)}, {"options": {"block": (8, 6), "panel": 5}},
               {"options": Options(block=(8, 6), panel=9), "panel": 5}):
        assert np.array_equal(matmul(A, B, backend="numpy", **kw), want)
    with pytest.raises(TypeError, match="no option 'panels'"):
        matmul(A, B, options={"panels": 5}, backend="numpy")


def test_a_stream_is_refused_with_the_reason():
    A, B = operands(4, 4, 4)
    with pytest.raises(ValueError, match="streams of its own"):
        Plan(A, B, backend="numpy", stream=get_backend("numpy").stream())


def test_a_kept_decision_that_no_longer_fits_is_made_again(monkeypatch, decisions):
    """The plan keeps the block and panel it chose (repeated calls add up in one order); where the memory has
    shrunk below what they need, the call decides again for what is free now instead of refusing."""
    host = get_backend("numpy")
    A, B = operands(300, 300, 300, seed=5)
    monkeypatch.setattr(host, "memory_info", lambda: (10**9, 10**10))
    big = Plan(A, B, backend="numpy", options=Options(staging="pinned"))
    C = matmul(A, B, backend="numpy", staging="pinned")
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)
    kept = len(decisions["plans"])
    monkeypatch.setattr(host, "memory_info", lambda: (7 * 10**6, 10**10))
    np.testing.assert_allclose(matmul(A, B, backend="numpy", staging="pinned"), A @ B, rtol=1e-12, atol=1e-12)
    assert len(decisions["plans"]) == kept + 1
    assert decisions["plans"][-1]["device_memory"] < decisions["plans"][kept - 1]["device_memory"]
    np.testing.assert_allclose(big.execute(A, B), A @ B, rtol=1e-12, atol=1e-12)
    assert big.schedule.device_bytes <= 7 * 10**6 // 2


def test_auto_staging_locks_ahead_below_stream_from_and_streams_from_it_with_the_same_bits(monkeypatch):
    """``staging="auto"`` locks the operands' pieces ahead where A and B together hold less than
    ``STREAM_FROM`` bytes, and streams A's and B's panels from there; no default staging allocates the
    pinned buffers. Every route sums the same panels in the same order, so C is the same bits."""
    A, B = operands(300, 200, 260, seed=9)
    small = Plan(A, B, backend="numpy")
    assert small.staging == "lock" and small._locks_ahead() and not small._streams()
    assert small.ops.staged(A, B, None, small._direct()) == (False, False, False)
    monkeypatch.setattr(outofcore_api, "STREAM_FROM", A.nbytes + B.nbytes)
    large = Plan(A, B, backend="numpy", options=Options(block=100, panel=100))
    assert large.staging == "stream" and large._streams() and large.schedule.grid == (3, 3)
    assert Plan(A, B, backend="numpy", options=Options(staging="pinned")).staging == "pinned"
    want = matmul(A, B, backend="numpy", staging="pinned")
    assert np.array_equal(small.execute(A, B), want)
    assert np.array_equal(large.execute(A, B), matmul(A, B, backend="numpy", block=100, panel=100, staging="pinned"))
    for staging in ("auto", "direct", "lock", "stream"):
        assert np.array_equal(matmul(A, B, backend="numpy", staging=staging), want)
    with pytest.raises(ValueError, match="staging must be one of"):
        matmul(A, B, backend="numpy", staging="paged")


def test_a_given_device_memory_that_no_longer_fits_is_refused(monkeypatch):
    host = get_backend("numpy")
    A, B = operands(300, 300, 300, seed=6)
    monkeypatch.setattr(host, "memory_info", lambda: (10**9, 10**10))
    plan = Plan(A, B, options=Options(device_memory=2 * 10**6, block=100, panel=50, staging="pinned"),
                backend="numpy")
    monkeypatch.setattr(host, "memory_info", lambda: (10**6, 10**10))
    with pytest.raises(MemoryPlanError, match="pass out=, a smaller block= or panel="):
        plan.execute(A, B)


def test_out_that_overlaps_an_operand_is_refused_on_a_kept_plan():
    m, k, n = 6, 8, 5
    big = np.zeros((m, k))
    other, B = operands(m, k, n, seed=7)
    matmul(other, B, out=big[:, :n], backend="numpy")
    before = big.copy()
    with pytest.raises(ValueError, match="out overlaps A"):
        matmul(big, B, out=big[:, :n], backend="numpy")
    assert np.array_equal(big, before)


def test_check_finite_reads_the_values_of_every_call():
    A, B = operands(7, 9, 5, seed=8)
    matmul(A, B, check_finite=True, backend="numpy")
    A[3, 4] = np.inf
    with pytest.raises(ValueError, match="A contains NaN or infinity"):
        matmul(A, B, check_finite=True, backend="numpy")
