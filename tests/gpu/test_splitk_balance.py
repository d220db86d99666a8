"""Split-K's balanced wave: the SM classes (:mod:`gpu.splitk.sm_classes`), the chunks wider on the faster class
(:func:`gpu.splitk.plan.balanced`), and on the GPU the claims that let any block compute any chunk: the bits
depend on the plan only, never on which SM ran which chunk."""

import numpy as np
import pytest

from gpu.backend import get_backend
from gpu.splitk.api import run
from gpu.splitk.plan import ALIGN, MAX_RATIO, SplitPlan, balanced, balanced_wave, widest
from gpu.splitk.sm_classes import GAP, SMClasses, classify, preference
from tests.gpu.test_splitk import assert_within_bound, host, operands

H200_FAST = (6, 7, 32, 33, 34, 35, 36, 37, 40, 41, 42, 43, 54, 55, 78, 79, 80, 81, 84, 85, 86, 87, 126, 127)


def h200_rates(noise=0.0, seed=0):
    """The H200's measured pattern: 24 SMs 1.298 times as fast as the other 108 (bytes per second)."""
    rng = np.random.default_rng(seed)
    rates = [1.298e10 if s in H200_FAST else 1e10 for s in range(132)]
    return [r * (1 + noise * rng.standard_normal()) for r in rates]


# --- the classes ----------------------------------------------------------------------------------

def test_two_clean_classes_are_found_and_their_ratio_rounded_down():
    found = classify(range(132), h200_rates(noise=0.002))
    assert found == SMClasses(H200_FAST, 41 / 32, tuple(range(132)))


@pytest.mark.parametrize("case", ["one class", "noisy", "an SM twice", "a small jump", "one SM"])
def test_no_classes_where_the_speeds_do_not_part_cleanly(case):
    rates, smids = h200_rates(), list(range(132))
    if case == "one class":
        rates = [1e10 * (1 + 0.001 * i) for i in range(132)]
    elif case == "noisy":
        rates = h200_rates(noise=0.05, seed=3)
    elif case == "an SM twice":
        smids[5] = 6
    elif case == "a small jump":
        rates = [1e10 * (GAP - 0.01 if s in H200_FAST else 1) for s in smids]
    else:
        rates, smids = [1e10], [0]
    assert classify(smids, rates) is None


def test_the_ratio_is_capped():
    found = classify(range(4), [1e10, 1e10, 3e10, 3e10])
    assert found.fast == (2, 3) and found.ratio == MAX_RATIO


def test_each_chunk_is_preferred_by_one_slot_of_one_sm_the_wider_ones_by_the_faster_sms():
    found = SMClasses((1, 4), 1.25, (0, 1, 2, 4))                  # SM 3 not measured
    table = preference(found, 2)
    assert len(table) == 5 * 2
    assert table[2:4] == [0, 1] and table[8:10] == [2, 3]           # the fast SMs: chunks 0-3
    assert sorted(table[0:4] + table[4:6] + table[8:10]) == list(range(8)) and table[6:8] == [0, 0]


# --- the balanced wave ----------------------------------------------------------------------------

@pytest.mark.parametrize("k, chunks, fast, ratio", [(2**22, 132, 24, 41 / 32), (2**20, 264, 48, 1.25),
                                                   (2**24, 132, 24, 1.5), (10**6 + 3, 100, 7, 1.125)])
def test_a_balanced_wave_cuts_k_whole_with_wider_chunks_first(k, chunks, fast, ratio):
    unit = ALIGN if k % ALIGN == 0 else 1
    p = balanced(SplitPlan(16, 16, k, chunks, 12, unit=unit), fast, ratio)
    bounds = p.bounds()
    assert p.fast == fast and len(bounds) == chunks and bounds[0][0] == 0 and bounds[-1][1] == k
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    wide, rest = {e - s for s, e in bounds[:fast]}, {e - s for s, e in bounds[fast:]}
    assert wide == {p.fast_units * unit} and rest <= {p.base * unit, (p.base + 1) * unit}
    assert p.width == max(wide | rest) == p.fast_units * unit
    assert ratio * min(rest) * (1 - 2 / p.base) <= min(wide) <= ratio * max(rest)
    assert p.as_dict()["fast"] == fast


def test_a_balanced_wave_stays_plain_where_nothing_would_be_wider():
    plain = SplitPlan(16, 16, 2**20, 132, 12, unit=ALIGN)
    assert balanced(plain, 0, 1.3) == plain and balanced(plain, 24, 1.0) == plain
    short = SplitPlan(16, 16, 4096, 64, 8, unit=ALIGN)                 # one unit a chunk: nothing to widen
    assert balanced(short, 8, 1.5) == short
    with pytest.raises(ValueError, match="times as wide"):
        balanced(plain, 24, 1.6)
    with pytest.raises(ValueError, match="leave too little"):
        SplitPlan(16, 16, 2**20, 132, 12, unit=ALIGN, fast=100, fast_units=200)


@pytest.mark.parametrize("m, k", [(16, 2**20), (64, 2**24), (32, 4096 * 3)])
def test_what_a_ranking_away_from_the_device_proves_covers_a_balanced_wave(m, k):
    width, chunks = widest(m, m, k, 132, True)
    for per_sm in (1, 2, 4):
        wave = balanced_wave(m, m, k, 132 * per_sm, True, per_sm, MAX_RATIO)
        assert wave.width + wave.chunks <= width + chunks


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_balanced_wave_on_numpy_is_within_its_bound(deterministic):
    be = get_backend("numpy")
    A, B = operands(be, 16, 2**16, 24, 5)
    split = balanced_wave(16, 24, 2**16, 40, deterministic, 6, 1.375)
    C = np.empty((16, 24))
    P = np.empty((split.chunks, 16, 24)) if deterministic else None
    run(be, be.ops("splitk"), split, A, B, C, 1.0, 0.0, P)
    assert split.fast == 6 and split.width > -(-2**16 // 40)
    assert_within_bound(C, A, B, split.width, split.chunks)


# --- on the GPU -----------------------------------------------------------------------------------

def _balanced_launch(be, monkeypatch, m, k, fast_sms=None):
    """A balanced wave of one block per SM for an m x k by k x m product, the bulk kernel's launch of it with a
    preference table for SM classes ``fast_sms`` (the device's SMs, every ninth fast where None), its operands and
    its partials' buffer."""
    from gpu.splitk import kernels, sm_probe

    if int(be.xp.cuda.Device().compute_capability) < 90:
        pytest.skip("the bulk-copy kernel needs sm_90")
    sms = be.ops("splitk").limits().sm_count
    fast = tuple(range(0, sms, 9)) if fast_sms is None else fast_sms
    monkeypatch.setattr(sm_probe, "classes", lambda device: SMClasses(fast, 1.25, tuple(range(sms))))
    v = kernels.Variant.tuned_bulk(m, m)
    split = balanced_wave(m, m, k, sms, True, len(fast), 1.25)
    A, B = operands(be, m, k, m, 29)
    launch = kernels.ChunkLaunch(v, split, A, B, (np.int64(m), np.int64(1), np.int64(m * m)), False)
    return launch, split, A, B, be.xp.full((split.chunks, m, m), np.nan)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [16, 32])
def test_the_bits_of_a_balanced_wave_do_not_hang_on_which_sm_runs_which_chunk(cupy_backend, monkeypatch, m):
    """Blocks claim the chunks their SM prefers, else any free one: with the right table, with every SM preferring
    chunk 0 (all but one block take the first free chunk after it) and with the fast SMs reversed, the partials
    are the same bits, every chunk written once, and the claim flags are left at zero for the next launch."""
    from gpu.splitk import kernels

    be = cupy_backend
    launch, split, A, B, P = _balanced_launch(be, monkeypatch, m, 2**20)
    assert launch.boxes is not None and launch.claims[1] == 1, "one block per SM, each on the bulk kernel"
    launch(A, B, P, 1.0)
    want = host(be, P)
    assert not np.isnan(want).any() and not host(be, launch.claims[3]).any()
    scrambled = (lambda found, slots: [0] * (max(found.sms) + 1) * slots,
                 lambda found, slots: preference(found, slots)[::-1])
    for table in scrambled:
        monkeypatch.setattr(kernels, "preference", table)
        other = kernels.ChunkLaunch(kernels.Variant.tuned_bulk(m, m), split, A, B,
                                    (np.int64(m), np.int64(1), np.int64(m * m)), False)
        for _ in range(2):
            P.fill(np.nan)
            other(A, B, P, 1.0)
            assert np.array_equal(host(be, P), want)
        assert not host(be, other.claims[3]).any()
    assert_within_bound(want.sum(axis=0), host(be, A), host(be, B), split.width, split.chunks)


@pytest.mark.gpu
def test_a_balanced_wave_gives_the_pipelined_kernels_bits_where_the_operands_cannot_be_mapped(cupy_backend,
                                                                                              monkeypatch):
    """The pipelined kernel cuts the same wider chunks (``chunk_span``) by block index, with no claims: its
    partials are the bulk kernel's bits, as for a plain split."""
    from gpu.splitk import kernels

    be = cupy_backend
    launch, split, A, B, P = _balanced_launch(be, monkeypatch, 16, 2**20)
    launch(A, B, P, 1.0)
    bulk = kernels.Variant.tuned_bulk(16, 16)
    pipe = kernels.Variant.pipe(16, 16, int(bulk.name.split(",")[4]), 3)
    Q = be.xp.full_like(P, np.nan)
    kernels.ChunkLaunch(pipe, split, A, B, (np.int64(16), np.int64(1), np.int64(256)), False)(A, B, Q, 1.0)
    assert np.array_equal(host(be, Q), host(be, P))


@pytest.mark.gpu
def test_the_default_split_is_a_balanced_wave_where_the_device_has_two_classes(cupy_backend):
    """The device's SM classes, measured once: where there are two, the automatic split of an output the bulk
    kernel covers with one block is one wave, wider on the faster SMs, and the call's product is within the bound
    of its widest chunk; a given chunk count stays plain."""
    from gpu.splitk import matmul, sm_probe

    be = cupy_backend
    ops = be.ops("splitk")
    found = sm_probe.classes(be.xp.cuda.Device().id)
    assert sm_probe.classes(be.xp.cuda.Device().id) is found
    split = ops.split(np.float64, 32, 32, 2**22)
    if found is None or int(be.xp.cuda.Device().compute_capability) < 90:
        assert split.fast == 0
        return
    sms = ops.limits().sm_count
    assert len(found.sms) == sms and 1 < found.ratio <= MAX_RATIO
    assert split.chunks % sms == 0 and split.fast == len(found.fast) * split.chunks // sms
    assert ops.split(np.float64, 32, 32, 2**22, chunks=sms).fast == 0
    A, B = operands(be, 32, 2**22, 32, 31)
    C = matmul(A, B)
    assert_within_bound(host(be, C), host(be, A), host(be, B), split.width, split.chunks)
