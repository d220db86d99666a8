"""``moduli="auto"`` with the count decided on the device (:mod:`gpu.ozaki2.deferred`): the IF nodes' masks, the
option, and on the GPU: a repeated call replays one graph whose branches give the read path's bits at every count
of the window, the most moduli's bits above it (and the window grows), and the library GEMM's where no count
meets the target, with no read back."""

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2.deferred import ALL_COUNTS, masks
from gpu.ozaki2.moduli import MAX_MODULI

host = get_backend("numpy")


def bits(*counts):
    return sum(1 << c for c in counts)


def test_each_window_count_serves_the_counts_down_to_the_one_below_and_the_most_moduli_those_above():
    assert masks((15,)) == [(bits(*range(1, 16)), 15), (bits(*range(16, 21)), MAX_MODULI)]
    assert masks((14, 16)) == [(bits(*range(1, 15)), 14), (bits(15, 16), 16), (bits(*range(17, 21)), 20)]
    assert masks((20,)) == [(ALL_COUNTS, 20)]
    assert masks(()) == [(ALL_COUNTS, 20)]
    assert not ALL_COUNTS & 1, "count 0 (none meets the target) is the library GEMM's branch, not a product's"


def test_the_verdict_is_an_option_checked_when_made():
    assert ozaki2.Options().verdict == "device" and ozaki2.Options(verdict="host").verdict == "host"
    with pytest.raises(ValueError, match="verdict must be one of"):
        ozaki2.Options(verdict="later")


def operands(shape, phi, seed=3):
    m, k, n = shape
    return phi_matrix(m, k, phi, seed), phi_matrix(k, n, phi, seed + 1)


def _calls(plan, dA, dB, C, be, A, B, times=1):
    dA.set(A)
    dB.set(B)
    for _ in range(times):
        plan.execute(dA, dB, C)
    return be.to_numpy(C)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, level", [((320, 300, 260), 0), ((256, 256, 256), 1)])
def test_gpu_replays_give_the_read_paths_bits_and_the_window_grows(cupy_backend, monkeypatch, shape, level):
    """phi = 8 operands take 14 moduli and phi = 1 ones 15. After one call reads 14, the replays run with no
    read: a call that needs 15 gets the most moduli's bits (more accurate, never less) and marks the window, the
    next call reads 15, and from then on the graph holds both counts: each call gets its count's bits."""
    from gpu.ozaki2 import device

    be = cupy_backend
    (A8, B8), (A1, B1) = operands(shape, 8.0), operands(shape, 1.0)
    want = {c: ozaki2.matmul(A, B, moduli=c, level=level, backend=host)
            for c, (A, B) in ((14, (A8, B8)), (15, (A1, B1)), (20, (A1, B1)))}
    dA, dB = be.asarray(A8), be.asarray(B8)
    C = be.xp.empty((shape[0], shape[2]))
    reads = []
    real = device.read_count
    monkeypatch.setattr(device, "read_count", lambda buf: (reads.append(1), real(buf))[1])
    with ozaki2.Plan(dA, dB, out=C, options={"level": level}, backend=be) as plan:
        assert plan.deferred is not None
        assert np.array_equal(_calls(plan, dA, dB, C, be, A8, B8, 3), want[14]) and plan.last_count == 14
        assert len(reads) == 1 and plan.deferred.window == (14,)
        assert np.array_equal(_calls(plan, dA, dB, C, be, A1, B1), want[20]), "above the window: the most moduli"
        assert plan.last_count == 15 and len(reads) == 1
        assert np.array_equal(_calls(plan, dA, dB, C, be, A1, B1), want[15]) and len(reads) == 2
        assert plan.deferred.window == (14, 15)
        for A, B, count in ((A1, B1, 15), (A8, B8, 14), (A1, B1, 15)):
            assert np.array_equal(_calls(plan, dA, dB, C, be, A, B), want[count]) and plan.last_count == count
        assert len(reads) == 2, "replays read nothing"


@pytest.mark.gpu
def test_gpu_a_replay_that_no_count_serves_gives_the_library_gemm(cupy_backend):
    """At target 1.78e-22 these phi = 0 operands take 20 moduli and the phi = 1 ones none: replayed, C is the
    library GEMM's, and the count says 0; NaN in a row gives the read path's pattern."""
    be, shape = cupy_backend, (64, 200, 48)
    (A0, B0), (A1, B1) = operands(shape, 0.0), operands(shape, 1.0)
    dA, dB = be.asarray(A0), be.asarray(B0)
    C = be.xp.empty((64, 48))
    options = {"target": 1.78e-22}
    with ozaki2.Plan(dA, dB, out=C, options=options, backend=be) as plan:
        assert np.array_equal(_calls(plan, dA, dB, C, be, A0, B0, 3), ozaki2.matmul(A0, B0, moduli=20, backend=host))
        assert plan.last_count == 20
        got = _calls(plan, dA, dB, C, be, A1, B1)
        ieee = be.xp.empty((64, 48))
        be.gemm(dA, dB, ieee)
        assert plan.last_count == 0 and np.array_equal(got, be.to_numpy(ieee))
        A0[5, 7] = np.nan
        got = _calls(plan, dA, dB, C, be, A0, B0)
        want = ozaki2.matmul(A0, B0, target=1.78e-22, backend=host)
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[~np.isnan(want)],
                                                                               want[~np.isnan(want)])
