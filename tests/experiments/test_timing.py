"""Tests for experiments.timing: the measurement protocol, driven by a scripted fake backend."""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import pytest

import gpu
from experiments.core.timing import Comparison, Timing, attempts_within, compare, measure, measure_interleaved
from gpu.backend import Timer

STABLE = [1.04, 0.96, 1.00, 1.02, 0.97, 1.03, 0.98, 1.01, 0.99, 1.045]  # spread 0.044, median 1.005
FLAT = [1.0] * 10


def outlier(x: float, base: float = 1.0) -> list[float]:
    """Nine samples of ``base`` and one of ``x``: spread grows with ``x``."""
    return [base] * 9 + [x]


class FakeBackend:
    """Hands out scripted sample times and logs every protocol call in order."""

    def __init__(self, times):
        self._times = iter(times)
        self.log: list[str] = []
        self.flushes = 0

    @contextmanager
    def timer(self):
        t = Timer()
        self.log.append("start")
        yield t
        self.log.append("stop")
        t.seconds = next(self._times)

    def synchronize(self):
        self.log.append("sync")

    def flush_cache(self):
        self.flushes += 1
        self.log.append("flush")

    def telemetry(self):
        return None


def work(fake: FakeBackend, name: str = "w"):
    def fn():
        fake.log.append(name)
    return fn


def calls(fake: FakeBackend, names=("w",)) -> list[str]:
    return [e for e in fake.log if e in names]


def interleave(a: list[float], b: list[float]) -> list[float]:
    """Sample times in the order two methods run: a b, then b a, ... (the order rotates each round)."""
    return [x for i, pair in enumerate(zip(a, b)) for x in (pair if i % 2 == 0 else pair[::-1])]


def test_stable_batch_is_taken_at_once():
    fake = FakeBackend(STABLE)
    t = measure(work(fake), fake, repeats=10, warmup=0)
    assert t.attempts == 1 and t.stable and t.rejected == []
    assert t.samples == STABLE
    assert t.median == pytest.approx(1.005)
    assert t.spread == pytest.approx(0.0445 / 1.0045)


def test_unstable_batch_is_measured_again():
    first = outlier(2.0)
    fake = FakeBackend(first + STABLE)
    t = measure(work(fake), fake, warmup=0)
    assert t.attempts == 2 and t.stable
    assert t.samples == STABLE
    assert t.rejected == [first]


def test_tolerance_option_decides_stability():
    fake = FakeBackend(outlier(1.1))  # spread about 0.089
    t = measure(work(fake), fake, warmup=0, tolerance=0.1)
    assert t.attempts == 1 and t.stable and t.tolerance == 0.1


def test_all_unstable_reports_least_spread_batch():
    a, b, c = outlier(3.0), outlier(1.5), outlier(2.0)
    fake = FakeBackend(a + b + c)
    t = measure(work(fake), fake, warmup=0, max_attempts=3)
    assert t.attempts == 3 and not t.stable
    assert t.samples == b
    assert t.rejected == [a, c]


def test_max_attempts_bounds_the_retries():
    fake = FakeBackend(outlier(2.0) * 5)
    t = measure(work(fake), fake, warmup=0, max_attempts=5)
    assert t.attempts == 5 and not t.stable and len(t.rejected) == 4
    assert fake.log.count("start") == 50


def test_warmup_runs_before_timing_and_is_not_timed():
    fake = FakeBackend(outlier(2.0) + FLAT)  # two attempts
    t = measure(work(fake), fake, repeats=10, warmup=3)
    assert t.attempts == 2
    assert len(calls(fake)) == 3 + 10 * 2
    first = fake.log.index("start")
    assert fake.log[:first] == ["w", "w", "w", "sync"]
    timed = fake.log[first:]
    assert timed == ["start", "w", "stop"] * 20  # each timed region holds exactly one call


def test_buffer_rotation_uses_callables_in_turn():
    fake = FakeBackend(FLAT)
    fns = [work(fake, n) for n in ("0", "1", "2")]
    measure(fns, fake, repeats=10, warmup=2)
    seq = calls(fake, ("0", "1", "2"))
    assert seq[:6] == ["0", "1", "2"] * 2  # warm-up runs every buffer set twice (a graph's build on the second)
    assert seq[6:] == ["0", "1", "2"] * 3 + ["0"]


def test_interleaved_rounds_alternate_methods():
    fake = FakeBackend(interleave(FLAT, [2.0] * 10))
    res = measure_interleaved({"a": work(fake, "a"), "b": work(fake, "b")}, fake, warmup=1)
    seq = calls(fake, ("a", "b"))
    assert seq == ["a", "b"] + ["a", "b", "b", "a"] * 5       # warm-up, then the order rotates each round
    assert res["a"].samples == FLAT and res["b"].samples == [2.0] * 10


def test_one_unstable_method_remeasures_both():
    a1, b1 = [1.01] * 10, outlier(4.0, 2.0)
    a2, b2 = FLAT, [2.0] * 10
    fake = FakeBackend(interleave(a1, b1) + interleave(a2, b2))
    res = measure_interleaved({"a": work(fake, "a"), "b": work(fake, "b")}, fake, warmup=0)
    assert res["a"].attempts == res["b"].attempts == 2
    assert res["a"].samples == a2 and res["a"].rejected == [a1]
    assert res["b"].samples == b2 and res["b"].rejected == [b1]
    assert res["a"].stable and res["b"].stable


def test_all_unstable_interleaved_reports_one_common_batch():
    # batch 1: a wild, b calm; batch 2: both mildly off -> batch 2 has the smaller worst spread
    a1, b1, a2, b2 = outlier(3.0), FLAT, outlier(1.3), outlier(1.3)
    fake = FakeBackend(interleave(a1, b1) + interleave(a2, b2))
    res = measure_interleaved({"a": work(fake, "a"), "b": work(fake, "b")}, fake, warmup=0,
                              max_attempts=2)
    assert res["a"].samples == a2 and res["b"].samples == b2
    assert not res["a"].stable and not res["b"].stable


def test_compare_ratios_over_baseline():
    fake = FakeBackend(interleave([2.0] * 10, FLAT))
    cmp = compare({"base": work(fake, "base"), "fast": work(fake, "fast")}, fake, "base", warmup=0)
    assert isinstance(cmp, Comparison) and cmp.baseline == "base"
    assert cmp.ratios() == {"base": 1.0, "fast": 2.0}
    assert cmp.ratio("fast") == 2.0


def test_compare_unknown_baseline_raises():
    fake = FakeBackend([])
    with pytest.raises(ValueError, match="baseline"):
        compare({"a": work(fake, "a")}, fake, "nope")
    assert fake.log == []


@pytest.mark.parametrize("repeats", [0, 9])
def test_too_few_repeats_raise(repeats):
    fake = FakeBackend(FLAT)
    with pytest.raises(ValueError, match="repeats"):
        measure(work(fake), fake, repeats=repeats)


def test_minimum_repeats_accepted():
    fake = FakeBackend(FLAT)
    assert len(measure(work(fake), fake, repeats=10).samples) == 10


def test_empty_rotation_raises():
    fake = FakeBackend(FLAT)
    with pytest.raises(ValueError, match="empty"):
        measure([], fake)


@pytest.mark.parametrize("flush", [True, False])
def test_flush_once_per_timed_sample(flush):
    fake = FakeBackend(outlier(2.0) + FLAT)  # two attempts
    measure(work(fake), fake, repeats=10, warmup=2, flush=flush)
    if not flush:
        assert fake.flushes == 0 and "flush" not in fake.log
        return
    assert fake.flushes == 20
    assert "flush" not in fake.log[:fake.log.index("sync")]  # not during warm-up
    starts = [i for i, e in enumerate(fake.log) if e == "start"]
    assert all(fake.log[i - 1] == "flush" for i in starts)  # right before, outside the timer


def test_meta_holds_protocol_outcome():
    first = outlier(2.0)
    fake = FakeBackend(first + STABLE)
    meta = measure(work(fake), fake, warmup=0).meta()
    assert meta["median_s"] == pytest.approx(1.005)
    assert meta["attempts"] == 2 and meta["stable"] is True
    assert meta["spread"] == pytest.approx(0.0445 / 1.0045)
    assert meta["rejected_batches"] == [first]


@pytest.mark.parametrize("budget, attempts", [(21.9, 1), (22.0, 2), (33.0, 3)])
def test_retries_stop_where_one_more_batch_would_pass_the_time_budget(budget, attempts):
    # Each unstable batch lasts 11 timed seconds: a retry is taken while the batches so far, and one
    # more of their mean length, fit the budget.
    fake = FakeBackend(outlier(2.0) * 3)
    t = measure(work(fake), fake, warmup=0, max_attempts=3, retry_seconds=budget)
    assert t.attempts == attempts and not t.stable
    assert t.meta()["batch_s"] == pytest.approx(11.0)


@pytest.mark.parametrize("budget, attempts", [(41.0, 1), (42.0, 2)])
def test_the_time_budget_counts_every_method_and_every_call(budget, attempts):
    # Two methods, two calls per sample: the timer reads 21 s over the first batch's 20 samples (each
    # sample its reading over the two calls), so a retry needs a budget of 42 s.
    fake = FakeBackend([1.0] * 19 + [2.0] + [1.0] * 20)
    t = measure_interleaved({"a": work(fake, "a"), "b": work(fake, "b")}, fake, warmup=0, calls=2,
                            retry_seconds=budget)
    assert t["a"].attempts == attempts and t["a"].stable == (attempts == 2)
    assert t["b"].batch_s == pytest.approx(21.0 if attempts == 1 else 20.5)


@pytest.mark.parametrize("batch_s, attempts", [(40.0, 3), (41.0, 2), (60.0, 2), (61.0, 1), (500.0, 1),
                                               (0.0, 3), (math.nan, 3)])
def test_the_batches_a_budget_allows(batch_s, attempts):
    assert attempts_within(batch_s) == attempts     # 120 s, at most three batches
    assert attempts_within(batch_s, max_attempts=1) == 1


def test_a_stable_batch_is_never_measured_again():
    fake = FakeBackend(FLAT * 2)
    assert measure(work(fake), fake, warmup=0, retry_seconds=0.0).attempts == 1


def test_timing_defaults_and_mean():
    t = Timing(samples=[1.0, 2.0, 6.0])
    assert (t.median, t.mean, t.attempts, t.stable, t.rejected) == (2.0, 3.0, 1, True, [])
    assert t.spread == pytest.approx(1.0)


def test_real_numpy_backend_gemm():
    backend = gpu.get_backend("numpy")
    A, B, C = np.ones((16, 16)), np.ones((16, 16)), np.zeros((16, 16))
    t = measure(lambda: backend.gemm(A, B, C), backend)
    assert len(t.samples) == 10
    assert all(math.isfinite(s) and s > 0 for s in t.samples)
    assert np.all(C == 16.0)


def test_a_nan_sample_is_never_stable():
    be = FakeBackend([1.0] * 9 + [math.nan] + [1.0] * 10)
    timing = measure(lambda: None, be, warmup=0)
    assert timing.attempts == 2 and timing.stable and all(math.isfinite(s) for s in timing.samples)
    with pytest.raises(RuntimeError, match="positive finite"):
        measure(lambda: None, FakeBackend([math.nan] * 30), warmup=0)


def test_no_methods_is_a_clear_error():
    with pytest.raises(ValueError, match="nothing to time"):
        measure_interleaved({}, FakeBackend([]))


@pytest.mark.parametrize("options", [{"warmup": -1}, {"tolerance": 0.0}, {"tolerance": math.nan},
                                     {"max_attempts": 0}, {"retry_seconds": -1.0},
                                     {"retry_seconds": math.nan}])
def test_bad_protocol_options_are_refused(options):
    with pytest.raises(ValueError):
        measure(lambda: None, FakeBackend([1.0] * 30), **options)


def test_setup_runs_before_each_sample_outside_the_timer():
    fake = FakeBackend(FLAT)
    measure_interleaved({"m": work(fake, "w")}, fake, warmup=1, setup={"m": work(fake, "setup")})
    timed = [e for e in fake.log if e in ("setup", "start", "stop")]
    assert timed == ["setup", "start", "stop"] * 10


class AsyncFake(FakeBackend):
    """A fake whose device runs asynchronously, and whose timer logs whether the launch is hidden."""

    asynchronous = True

    @contextmanager
    def timer(self, hide_launch=False):
        t = Timer()
        self.log.append("hold" if hide_launch else "start")
        yield t
        self.log.append("stop")
        t.seconds = next(self._times)


@pytest.mark.parametrize("hide", [True, False])
def test_hide_launch_reaches_every_sample_and_the_record(hide):
    fake = AsyncFake([1.0] * 10)
    timing = measure(work(fake), fake, warmup=0, hide_launch=hide)
    opened = [e for e in fake.log if e in ("hold", "start")]
    assert opened == ["hold" if hide else "start"] * 10
    assert timing.meta()["launch"] == ("hidden" if hide else "counted")


def test_a_synchronous_backend_records_its_launch_as_counted():
    timing = measure(lambda: None, gpu.backend.get_backend("numpy"), warmup=0, hide_launch=True, telemetry=None)
    assert timing.meta()["launch"] == "counted"


def test_calls_back_to_back_continue_the_rotation_and_report_the_time_per_call():
    fake = FakeBackend([3.0] * 10)
    fns = [work(fake, n) for n in ("0", "1")]
    timing = measure(fns, fake, repeats=10, warmup=0, calls=3)
    first = fake.log.index("start")
    assert fake.log[first:first + 5] == ["start", "0", "1", "0", "stop"]     # one sample: three calls
    assert calls(fake, ("0", "1"))[3:6] == ["1", "0", "1"]                    # the next goes on from there
    assert timing.samples == [1.0] * 10 and timing.meta()["launch"] == "counted, 3 calls back to back"
    with pytest.raises(ValueError, match="calls per sample must be at least 1"):
        measure(fns, fake, calls=0)


def test_every_method_leads_a_round_in_turn():
    """Under a power cap a sample starts at the clock its predecessor left: no method always follows another."""
    fake = FakeBackend([1.0] * 30)
    res = measure_interleaved({k: work(fake, k) for k in "abc"}, fake, warmup=0)
    seq = calls(fake, ("a", "b", "c"))
    rounds = [seq[i:i + 3] for i in range(0, 30, 3)]
    assert rounds[:3] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]] and rounds[3] == rounds[0]
    assert all(t.meta()["order"] == "rotated each round" for t in res.values())


def test_a_fixed_order_is_kept_where_asked_and_recorded():
    fake = FakeBackend([1.0] * 20)
    res = measure_interleaved({k: work(fake, k) for k in "ab"}, fake, warmup=0, rotate=False)
    assert calls(fake, ("a", "b")) == ["a", "b"] * 10
    assert res["a"].meta()["order"] == "fixed"


def test_first_calls_time_each_after_one_untimed_call_and_screen_the_slow():
    from experiments.core.timing import first_calls, slower_than

    runs = []
    be = gpu.backend.get_backend("numpy")
    seconds = first_calls(be, {"a": lambda: runs.append("a"), "b": lambda: runs.append("b")},
                          clock=lambda backend, work: (work(), 2.0 if runs[-1] == "b" else 1.0)[1])
    assert runs == ["a", "b", "a", "b"] and seconds == {"a": 1.0, "b": 2.0}
    assert slower_than(seconds, "a", 1.5) == {"b"} and slower_than(seconds, "a", 3.0) == set()
    assert slower_than({"ref": 1.0, "x": 0.5}, "ref", 1.0) == set()
