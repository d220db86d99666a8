"""Power regimes of a measurement, and the telemetry each sample carries.

A power-capped GPU (the H100 and H200 at 700 W) runs the same kernel at different clocks
depending on what ran before it: a DGEMM after an idle second starts near 1980 MHz, and
after seconds of back-to-back DGEMMs it sits at 1500-1700 MHz with the software power cap
as the throttle reason. A speed-up is only a result beside its regime:

* ``sustained`` (the default for headline numbers: what long HPC runs see): after the
  warm-up, every method's work (with its per-sample setup) is run back to back, in
  rounds, until the SM clock settles (the last :data:`SETTLE_WINDOW` rounds within
  ``tolerance`` of each other, after at least ``settle_min_s``, at most ``settle_max_s``);
  then the samples are timed back to back.
* ``cold``: the device idles ``gap_s`` seconds before each sample, so each starts from
  the idle clock.

Every sample carries a telemetry reading (SM clock, power, throttle reasons) at its start
and end where the backend has telemetry (``Backend.telemetry()``, NVML on a GPU). Without
telemetry (the CPU) ``sustained`` cannot see a clock to settle and runs no settling rounds;
the regime is still recorded.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu.backend import Backend
from gpu.profile import REGIMES as REGIME_NAMES

#: Rounds whose SM clocks must agree before a sustained measurement starts.
SETTLE_WINDOW = 3


@dataclass(frozen=True)
class Regime:
    """How a measurement treats the device's power state (see the module notes)."""

    name: str
    gap_s: float = 0.0
    settle_min_s: float = 0.0
    settle_max_s: float = 0.0
    tolerance: float = 0.02

    def __post_init__(self) -> None:
        if self.name not in REGIME_NAMES:
            raise ValueError(f"regime must be one of {', '.join(REGIME_NAMES)}, got {self.name!r}")
        if min(self.gap_s, self.settle_min_s, self.settle_max_s) < 0 or self.settle_min_s > self.settle_max_s:
            raise ValueError(f"regime {self.name}: need 0 <= settle_min_s <= settle_max_s and gap_s >= 0")


SUSTAINED = Regime("sustained", settle_min_s=3.0, settle_max_s=30.0)
COLD = Regime("cold", gap_s=1.0)
REGIMES: dict[str, Regime] = {r.name: r for r in (SUSTAINED, COLD)}


#: The regime of results stored before regimes were recorded.
UNRECORDED = "unrecorded"


def panel_group(dtype: str, regime: str) -> str:
    """What a figure panel of stored rows groups by: the dtype, and the regime where one was recorded."""
    return dtype if regime == UNRECORDED else f"{dtype}, {regime}"


def of_regime(measurements: Sequence[Any], regime: str) -> list[Any]:
    """The measurements taken in ``regime``; where there are none, those stored before regimes
    were recorded (no ``regime`` parameter), so older results still serve."""
    mine = [m for m in measurements if m.params.get("regime") == regime]
    return mine or [m for m in measurements if "regime" not in m.params]


def get_regime(regime: str | Regime) -> Regime:
    """A regime by name (``sustained`` or ``cold``), or the one given."""
    if isinstance(regime, Regime):
        return regime
    try:
        return REGIMES[regime]
    except (KeyError, TypeError):
        raise ValueError(f"regime must be one of {sorted(REGIMES)}, got {regime!r}") from None


def reading(telemetry: Any) -> dict[str, Any] | None:
    """One telemetry reading as a dict (None without telemetry)."""
    return None if telemetry is None else telemetry.read().as_dict()


def settle(regime: Regime, rounds: Callable[[], None], backend: Backend, telemetry: Any) -> dict[str, Any]:
    """For ``sustained``: run ``rounds`` (every method once, setup included) back to back until the SM
    clock settles; what it took, for the stored record. Nothing for ``cold`` or without telemetry."""
    if regime.name != "sustained" or telemetry is None or regime.settle_max_s == 0:
        return {}
    start, clocks = time.perf_counter(), []
    while True:
        rounds()
        backend.synchronize()
        clocks.append(telemetry.read().sm_mhz)
        elapsed = time.perf_counter() - start
        window = clocks[-SETTLE_WINDOW:]
        steady = len(window) == SETTLE_WINDOW and max(window) - min(window) <= regime.tolerance * max(window)
        if elapsed >= regime.settle_max_s or (steady and elapsed >= regime.settle_min_s):
            return {"settle_s": elapsed, "settle_rounds": len(clocks), "settled": steady,
                    "settle_sm_mhz": window}


def idle(regime: Regime, backend: Backend) -> None:
    """For ``cold``: let the device idle before a sample."""
    if regime.gap_s:
        backend.synchronize()
        time.sleep(regime.gap_s)


def summary(regime: Regime, telemetry: Sequence[Mapping[str, Any] | None], settled: Mapping[str, Any]) -> dict:
    """What the results database keeps of a batch's regime and telemetry: the per-sample readings,
    their median SM clock and power (mean of start and end), and every throttle reason seen."""
    out: dict[str, Any] = {"regime": regime.name, **settled}
    seen = [t for t in telemetry if t]
    if not seen:
        return out
    clock = [(t["start"]["sm_mhz"] + t["end"]["sm_mhz"]) / 2 for t in seen]
    power = [(t["start"]["power_w"] + t["end"]["power_w"]) / 2 for t in seen]
    reasons = 0
    for t in seen:
        reasons |= t["start"]["reasons"] | t["end"]["reasons"]
    return {**out, "telemetry": list(telemetry), "sm_clock_mhz": statistics.median(clock),
            "power_w": statistics.median(power), "throttle_reasons": reasons}
