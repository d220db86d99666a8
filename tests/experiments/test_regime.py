"""The power regimes of the protocol, driven by a fake backend and a fake NVML reader:
sustained runs settling rounds until the SM clock settles and records it; cold idles before each
sample; every sample stores its clock, power and throttle reasons; the record names the regime."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from experiments.core import regime as rg
from experiments.core.regime import COLD, SUSTAINED, Regime, get_regime
from experiments.core.timing import measure, measure_interleaved
from gpu.backend import Timer
from gpu.backend.telemetry import Reading, reason_names


class FakeNvml:
    """SM clocks in a script (then the last one forever); power follows the clock."""

    def __init__(self, clocks, reasons=0x4):
        self.clocks, self.reasons, self.reads = list(clocks), reasons, 0

    def read(self) -> Reading:
        self.reads += 1
        mhz = self.clocks.pop(0) if len(self.clocks) > 1 else self.clocks[0]
        return Reading(mhz, mhz / 3.0, self.reasons)


class Device:
    def __init__(self, telemetry=None):
        self.log, self._telemetry = [], telemetry

    @contextmanager
    def timer(self):
        t = Timer()
        self.log.append("start")
        yield t
        self.log.append("stop")
        t.seconds = 1.0

    def synchronize(self):
        self.log.append("sync")

    def flush_cache(self):
        pass

    def telemetry(self):
        return self._telemetry


def test_regimes_by_name_and_bad_values():
    assert get_regime("sustained") is SUSTAINED and get_regime("cold") is COLD and get_regime(COLD) is COLD
    with pytest.raises(ValueError, match="regime must be one of"):
        get_regime("warm")
    with pytest.raises(ValueError, match="settle_min_s <= settle_max_s"):
        Regime("sustained", settle_min_s=5, settle_max_s=1)


def test_sustained_settles_until_the_clock_stops_falling_then_records_every_sample():
    nvml = FakeNvml([1980, 1900, 1700, 1600, 1560, 1555, 1552, 1550])
    dev = Device(nvml)
    runs = []
    t = measure(lambda: runs.append(1), dev, regime=Regime("sustained", settle_max_s=10.0), warmup=1)
    meta = t.meta()
    assert meta["regime"] == "sustained" and meta["settled"] is True
    assert meta["settle_sm_mhz"] == [1560, 1555, 1552], "stopped once three rounds agreed within 2%"
    assert meta["settle_rounds"] == 7 and len(runs) == 1 + 7 + 10
    assert len(meta["telemetry"]) == 10 and meta["sm_clock_mhz"] == 1550 and meta["power_w"] == pytest.approx(1550 / 3)
    assert all(s["start"]["reasons"] == 0x4 for s in meta["telemetry"])
    assert reason_names(meta["throttle_reasons"]) == ["sw_power_cap"]


def test_settling_gives_up_at_its_limit_and_says_so():
    clocks = [1980 - 50 * i for i in range(400)]
    dev = Device(FakeNvml(clocks))
    meta = measure(lambda: None, dev, regime=Regime("sustained", settle_min_s=0.0, settle_max_s=0.02),
                   warmup=0).meta()
    assert meta["settled"] is False and meta["settle_s"] >= 0.02


def test_cold_idles_before_every_sample(monkeypatch):
    slept = []
    monkeypatch.setattr(rg.time, "sleep", slept.append)
    dev = Device(FakeNvml([600]))
    meta = measure_interleaved({"a": lambda: None, "b": lambda: None}, dev, regime=COLD, warmup=0)["a"].meta()
    assert slept == [COLD.gap_s] * 20 and meta["regime"] == "cold" and "settle_s" not in meta
    assert dev.log.count("sync") >= 20, "the idle gap starts after queued work"


def test_without_telemetry_the_regime_is_recorded_and_nothing_settles():
    meta = measure(lambda: None, Device(None), warmup=0).meta()
    assert meta["regime"] == "sustained" and "telemetry" not in meta and "settle_s" not in meta


def test_telemetry_is_read_outside_the_timed_region():
    nvml = FakeNvml([1500])
    dev = Device(nvml)
    measure(lambda: dev.log.append("work"), dev, regime=Regime("cold"), warmup=0, telemetry=nvml)
    first = dev.log.index("work")
    assert dev.log[first - 1] == "start" and dev.log[first + 1] == "stop"
    assert nvml.reads == 20, "one reading at the start and one at the end of each of 10 samples"
