"""Tests for the as-called timer (experiments.core.ascalled and the host clock of the protocol): a loop of
back-to-back calls and one synchronise by the host's clock, the host time of one call without a synchronise,
beside the device time of the same rounds; on NumPy and on a scripted asynchronous device."""
from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import pytest

from experiments.core.ascalled import AS_CALLED, Call, as_called, calls_for, host_seconds, time_called
from experiments.core.lab import Operands
from experiments.core.timing import measure_interleaved
from gpu.backend import Timer, get_backend

#: A single attempt: these tests check clocks, not the protocol's re-measurement.
ONCE = {"max_attempts": 1, "warmup": 1}


class AsyncDevice:
    """A device that runs what the host queues after the host has moved on: ``enqueue`` returns at once,
    ``synchronize`` waits until the queued work is done, and the timer reads the device's own clock
    (as CUDA events do: from when the device reaches the start to when it reaches the end)."""

    name, asynchronous = "async-fake", True

    def __init__(self) -> None:
        self.busy_until = 0.0
        self.syncs = 0

    def enqueue(self, seconds: float) -> None:
        self.busy_until = max(time.perf_counter(), self.busy_until) + seconds

    def synchronize(self) -> None:
        self.syncs += 1
        wait = self.busy_until - time.perf_counter()
        if wait > 0:
            time.sleep(wait)

    @contextmanager
    def timer(self, hide_launch: bool = False):
        t = Timer()
        start = max(time.perf_counter(), self.busy_until)
        yield t
        end = max(time.perf_counter(), self.busy_until)
        self.synchronize()
        t.seconds = end - start

    def flush_cache(self) -> None:
        pass

    def telemetry(self):
        return None


def spin(seconds: float) -> None:
    """Host work of ``seconds`` (a busy wait: sleep's granularity would blur sub-millisecond times)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def launch(device: AsyncDevice, host_s: float, device_s: float, wait: bool = False):
    """A call that spends ``host_s`` on the host, queues ``device_s`` of device work and returns (or, with
    ``wait``, waits for the device before returning, as a check that reads a result back does)."""
    def call() -> None:
        spin(host_s)
        device.enqueue(device_s)
        if wait:
            device.synchronize()
    return call


def test_a_known_sleep_is_its_per_call_time_on_numpy():
    be = get_backend("numpy")
    t = as_called(lambda: time.sleep(3e-3), be, calls=4, **ONCE)
    assert 3e-3 <= t.median < 6e-3               # a sleep can oversleep on a loaded machine, never undersleep
    assert len(t.samples) >= 10 and "4 calls back to back, then one synchronise" in t.launch
    assert 3e-3 <= host_seconds(be, lambda: time.sleep(3e-3), repeats=5) < 6e-3


def test_the_closing_synchronise_counts_the_device_work_a_loop_queued():
    device = AsyncDevice()
    t = as_called(launch(device, 0.2e-3, 4e-3), device, calls=5, **ONCE)
    assert 3.9e-3 <= t.median < 6e-3            # device-bound: the host's 0.2 ms per call hides behind it


def test_host_time_leaves_out_a_synchronise_the_call_does_not_make():
    device = AsyncDevice()
    assert host_seconds(device, launch(device, 0.3e-3, 8e-3), repeats=5) < 2e-3
    assert host_seconds(device, launch(device, 0.3e-3, 8e-3, wait=True), repeats=5) >= 8e-3


def test_a_call_that_waits_for_the_device_costs_its_host_work_on_top():
    device = AsyncDevice()
    free = as_called(launch(device, 2e-3, 10e-3), device, calls=4, **ONCE).median
    waits = as_called(launch(device, 2e-3, 10e-3, wait=True), device, calls=4, **ONCE).median
    assert 10e-3 <= free and waits >= 12e-3 and free < waits - 1e-3     # the host's 2 ms hide only where not waited


def test_wall_and_device_clocks_share_the_rounds():
    device = AsyncDevice()
    issued = []
    called = launch(device, 1e-3, 3e-3, wait=True)
    res = measure_interleaved({"device": launch(device, 0.0, 3e-3), "called": lambda: (issued.append(1), called())},
                              device, wall={"called"}, calls={"called": 3}, **ONCE)
    assert len(issued) == 1 + 3 * 10                # a warm-up, then three calls per sample
    assert res["device"].median < 3.6e-3            # events: the device's time, one call per sample
    assert res["called"].median >= 3.9e-3           # the host's clock: host work and device work, serialised
    assert res["device"].launch == "counted" and res["called"].launch.startswith("as called: 3 calls")
    with pytest.raises(ValueError, match="not among those timed"):
        measure_interleaved({"a": lambda: None}, device, wall={"b"})


def test_calls_for_fills_the_pipeline_within_bounds():
    assert calls_for(1e-3) == 100 and calls_for(1.0) == 1 and calls_for(0.0) == 512
    assert calls_for(1e-3, asynchronous=False) == 1        # a loop of synchronous calls: their sum, whatever the count
    with pytest.raises(ValueError, match="calls"):
        as_called(lambda: None, get_backend("numpy"), calls=0)


def test_time_called_gives_each_configuration_its_three_times_and_both_ratios():
    be = get_backend("numpy")
    ops = Operands.uniform(be, 32)
    works = {"gemm": lambda: np.matmul(ops.A, ops.B, out=ops.C), "slow": lambda: (time.sleep(1e-3), ops.A @ ops.B)}
    public = {"slow": Call("slow(A, B)", lambda: (time.sleep(2e-3), ops.A @ ops.B)),
              "defaults": Call("method(A, B)", lambda: time.sleep(1e-3), max_calls=2)}
    called = time_called(ops, works, "gemm", public, Call("numpy.matmul(A, B, out=C)", works["gemm"]), calls=3,
                         refill=False, **ONCE)
    assert set(called.device.timings) == {"gemm", "slow"}           # the device group, as stored before
    assert set(called.result.timings) == {"gemm", "slow", *(AS_CALLED + n for n in ("gemm", "slow", "defaults"))}
    slow = called.meta("slow")
    assert slow["call"] == "slow(A, B)" and slow["reference_call"] == "numpy.matmul(A, B, out=C)"
    assert 2e-3 <= slow["as_called_s"] < 20e-3 and 2e-3 <= slow["host_s"] < 20e-3
    assert 1e-3 <= slow["device_s"] < slow["as_called_s"]
    assert slow["ratio_as_called"] == pytest.approx(slow["reference_s"] / slow["as_called_s"])
    assert slow["ratio_device"] == pytest.approx(called.device.ratio("slow"))
    assert slow["as_called_calls"] == called.calls and len(slow["as_called_samples"]) >= 10
    defaults = called.meta("defaults")
    assert defaults["device_s"] is None and defaults["ratio_device"] is None and defaults["as_called_s"] >= 1e-3
    assert defaults["as_called_calls"] == 2 and "2 calls back to back" in defaults["as_called_launch"]
    assert called.meta("gemm")["ratio_as_called"] == 1.0


@pytest.mark.gpu
def test_on_a_gpu_a_loop_of_library_gemms_as_called_is_its_device_time_and_one_call_host_time_is_short():
    be = get_backend("cupy")
    ops = Operands.uniform(be, 4096)
    gemm = lambda: be.xp.matmul(ops.A, ops.B, out=ops.C)      # noqa: E731
    device = measure_interleaved({"gemm": gemm}, be, regime="cold", **ONCE)["gemm"].median
    called = as_called(gemm, be, calls=calls_for(device), regime="cold", **ONCE).median
    assert called == pytest.approx(device, rel=0.1)          # dispatch hides behind 2-3 ms of device work
    assert host_seconds(be, gemm, repeats=5) < 0.2 * device  # no synchronise in one call's host time


def test_by_default_a_slow_call_fills_the_pipeline_with_fewer_calls_than_the_reference(monkeypatch):
    be = get_backend("numpy")
    monkeypatch.setattr(type(be), "asynchronous", True, raising=False)
    ops = Operands.uniform(be, 8)
    fast = Call("numpy.matmul(A, B)", lambda: ops.A @ ops.B)
    public = {"slow": Call("slow(A, B)", lambda: time.sleep(0.02))}
    called = time_called(ops, {"gemm": fast.fn}, "gemm", public, fast, refill=False, **ONCE)
    assert called.meta("gemm")["as_called_calls"] == called.calls > 50
    # sized by the slow call's own measured time: a sleep of 20 ms lasts at least that (more on a loaded host)
    assert 1 < called.meta("slow")["as_called_calls"] <= calls_for(0.02) < 10


def test_free_memory_between_points_frees_the_plans_every_family_keeps():
    from experiments.core.lab import free_memory
    from gpu.strassen import api as strassen_api

    A = np.ones((64, 64))
    strassen_api.matmul(A, A, backend="numpy")
    assert len(strassen_api.PLANS) >= 1
    assert free_memory(get_backend("numpy")) > 0
    assert len(strassen_api.PLANS) == 0
