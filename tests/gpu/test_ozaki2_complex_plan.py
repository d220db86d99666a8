"""Ozaki scheme II's complex products as kept plans (``gpu.ozaki2.complex_plan``): a plan reused with new values
gives what a fresh computation gives (4M through the real scheme, the same bits as 3M), also where ``"auto"`` picks
another count and where k is blocked; ``out=`` is written and checked; bad operands are refused; on the GPU the
replayed graph gives the eager bits, and with a count given the call returns while the stream is busy."""

import functools
import time

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from gpu.backend import MemoryPlanError
from gpu.backend.plans import PlanMismatch
from gpu.ozaki2 import complex as zoz
from gpu.ozaki2 import complex_plan

host = functools.partial(zoz.matmul, backend="numpy")


def operands(m, k, n, phi=1.0, seed=1):
    A = phi_matrix(m, k, phi, seed) + 1j * phi_matrix(m, k, phi, seed + 10)
    B = phi_matrix(k, n, phi, seed + 1) + 1j * phi_matrix(k, n, phi, seed + 11)
    return A, B


def four_m(A, B, **options):
    """The same product by 4M through the real scheme's plans: 3M's bits (test_ozaki2_complex)."""
    return zoz.matmul(A, B, scheme="4m", backend="numpy", **options)


@pytest.mark.parametrize("moduli, k_block", [(13, None), ("auto", None), (11, 32), ("auto", 48)])
def test_a_kept_plan_gives_each_call_its_own_product(moduli, k_block):
    """One signature, new values each call: phi 1 and 8 make ``"auto"`` pick different counts (15 and 14); k = 100
    in blocks of 32 or 48 adds later blocks' parts into the planes."""
    zoz.PLANS.clear()
    counts = set()
    for phi, seed in ((1.0, 1), (8.0, 2), (0.1, 3), (1.0, 1)):
        A, B = operands(21, 100, 19, phi, seed)
        got = host(A, B, moduli=moduli, scheme="3m", k_block=k_block)
        assert np.array_equal(got, four_m(A, B, moduli=moduli, k_block=k_block)), (phi, seed)
        counts.add(zoz.PLANS._last[1].last_count)
    assert len(zoz.PLANS) == 1
    assert len(counts) == (2 if moduli == "auto" else 1), counts


def test_2m_reused_equals_2m_planned_afresh():
    zoz.PLANS.clear()
    first = [operands(30, 40, 32, phi, seed) for phi, seed in ((1.0, 4), (4.0, 5))]
    kept = [host(A, B) for A, B in first]
    for (A, B), got in zip(first, kept, strict=True):
        fresh = complex_plan.Plan(A, B, backend="numpy").run(A, B)
        assert np.array_equal(got, fresh)


def test_out_is_written_and_checked():
    A, B = operands(12, 20, 10)
    for scheme in zoz.SCHEMES:
        want = host(A, B, moduli=12, scheme=scheme)
        out = np.full((12, 10), np.nan + 0j)
        got = host(A, B, moduli=12, scheme=scheme, out=out)
        assert got is out and np.array_equal(out, want), scheme
    with pytest.raises(ValueError, match="out"):
        host(A, B, moduli=12, out=np.empty((12, 10)))
    with pytest.raises(ValueError, match="out"):
        host(A, B, moduli=12, out=np.empty((10, 12), dtype=np.complex128))
    square = np.ones((12, 12), dtype=np.complex128)
    with pytest.raises(ValueError, match="overlap|share"):
        host(square, square, moduli=12, out=square)


def test_real_operands_take_a_zero_imaginary_part():
    A, B = operands(9, 17, 8)
    got = host(A.real, B, moduli=14)
    assert np.array_equal(got, host(A.real + 0j, B, moduli=14))


def test_a_plan_refuses_4m_and_operands_of_another_signature():
    A, B = operands(6, 8, 5)
    with pytest.raises(ValueError, match="4M runs as real products"):
        complex_plan.Plan(A, B, scheme="4m", backend="numpy")
    with pytest.raises(ValueError, match="scheme must be one of"):
        host(A, B, scheme="5m")
    plan = complex_plan.Plan(A, B, moduli=9, scheme="3m", backend="numpy")
    assert np.array_equal(plan.execute(A, B), four_m(A, B, moduli=9))
    with pytest.raises(PlanMismatch, match="shape"):
        plan.execute(*operands(7, 8, 5))
    plan.free()
    with pytest.raises(ValueError, match="freed"):
        plan.run(A, B)


def test_an_empty_product_is_zeros():
    A, B = np.ones((4, 0), dtype=np.complex128), np.ones((0, 3), dtype=np.complex128)
    assert np.array_equal(host(A, B), np.zeros((4, 3), dtype=np.complex128))


@pytest.mark.gpu
@pytest.mark.parametrize("shape, moduli, scheme, k_block, other", [((200, 300, 130), 15, "3m", None, 8.0),
                                                                    ((256, 320, 192), "auto", "2m", None, 4.0),
                                                                    ((100, 150, 64), "auto", "3m", 64, 8.0)])
def test_gpu_replay_equals_numpy_and_follows_new_values_at_the_same_addresses(cupy_backend, shape, moduli, scheme,
                                                                            k_block, other):
    """Each call of an address set (eager, captured, then replayed) gives the NumPy bits of the values A and B hold
    then: values rewritten in place between calls (phi 1 and ``other``, which under ``"auto"`` picks another count),
    into two outputs in turn; the plan holds a graph per address set and count it replayed."""
    zoz.PLANS.clear()
    xp = cupy_backend.xp
    dA, dB = (xp.empty(s, dtype=np.complex128) for s in (shape[:2], shape[1:]))
    outs = [xp.empty((shape[0], shape[2]), dtype=np.complex128) for _ in range(2)]
    counts = set()
    for call in range(8):
        A, B = operands(*shape, other if call % 4 >= 2 else 1.0, 7 + call % 4)
        dA[...], dB[...] = cupy_backend.asarray(A), cupy_backend.asarray(B)
        want = host(A, B, moduli=moduli, scheme=scheme, k_block=k_block)
        out = outs[call % 2]
        got = zoz.matmul(dA, dB, moduli=moduli, scheme=scheme, k_block=k_block, out=out, backend=cupy_backend)
        assert got is out and np.array_equal(cupy_backend.to_numpy(got), want), call
        counts.add(zoz.PLANS._last[1].last_count)
    assert (len(counts) == 1) if moduli == 15 else (len(counts) >= 2), counts
    assert len(zoz.PLANS._last[1]._graphs.captured) >= 2


@pytest.mark.gpu
def test_gpu_a_call_with_out_allocates_nothing_eager_captured_or_replayed(cupy_backend):
    """The work runs on the plan's buffers: a graph that took a block from the pool during capture would keep its
    address after the pool handed it out again, so the pool's bytes in use must not move."""
    zoz.PLANS.clear()
    pool = cupy_backend.xp.get_default_memory_pool()
    dA, dB = (cupy_backend.asarray(X) for X in operands(160, 224, 144, 1.0, 3))
    out = cupy_backend.xp.empty((160, 144), dtype=np.complex128)
    for scheme in ("2m", "3m"):
        zoz.matmul(dA, dB, moduli=13, scheme=scheme, out=out, backend=cupy_backend)          # the plan built
        cupy_backend.synchronize()
        held = pool.used_bytes()
        for call in range(3):                                                               # eager, capture, replay
            zoz.matmul(dA, dB, moduli=13, scheme=scheme, out=out, backend=cupy_backend)
            assert pool.used_bytes() == held, (scheme, call)


@pytest.mark.gpu
def test_gpu_a_count_given_returns_while_the_stream_is_busy(cupy_backend):
    from tests.gpu.busy import busy

    zoz.PLANS.clear()
    A, B = operands(512, 512, 512)
    dA, dB = cupy_backend.asarray(A), cupy_backend.asarray(B)
    out = cupy_backend.xp.empty((512, 512), dtype=np.complex128)
    for _ in range(3):                                          # planned, seen, captured
        zoz.matmul(dA, dB, moduli=14, out=out, backend=cupy_backend)
    want = cupy_backend.to_numpy(out)
    cupy_backend.synchronize()
    busy(200)
    start = time.perf_counter()
    zoz.matmul(dA, dB, moduli=14, out=out, backend=cupy_backend)
    took = time.perf_counter() - start
    cupy_backend.synchronize()
    assert np.array_equal(cupy_backend.to_numpy(out), want)
    assert took < 1e-3, f"the replayed call took {took * 1e3:.2f} ms while the stream was busy"


def test_the_plans_buffers_are_taken_once():
    """The plan's buffers survive its calls (the GPU test above checks that no call takes memory from the pool)."""
    zoz.PLANS.clear()
    A, B = operands(16, 24, 16)
    host(A, B, moduli=10)
    plan = zoz.PLANS._last[1]
    held = [id(x) for x in (plan.SA, plan.SB, *plan.res, *plan.planes, *plan.products, plan.part)]
    host(*operands(16, 24, 16, 2.0, 9), moduli=10)
    assert zoz.PLANS._last[1] is plan
    assert held == [id(x) for x in (plan.SA, plan.SB, *plan.res, *plan.planes, *plan.products, plan.part)]


def test_buffers_the_device_cannot_give_are_a_memory_plan_error(monkeypatch):
    """The check before the buffers asks for one block; where the buffers still do not come, the refusal is a
    MemoryPlanError (which the plan caches answer by freeing their plans and asking again), not the pool's error."""
    def refuse(self):
        raise MemoryError("out of memory")
    monkeypatch.setattr(complex_plan.Plan, "_buffers", refuse)
    A, B = operands(8, 12, 6)
    with pytest.raises(MemoryPlanError, match="complex 8 x 12 x 6 product"):
        complex_plan.Plan(A, B, backend="numpy")
