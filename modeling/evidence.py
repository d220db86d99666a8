"""What a device's own measurements support: the levels a prediction may choose from at each size.

The recursive predictor (:mod:`modeling.recursive`) prices every level from curves; where those
curves are noisy or extrapolated it can favour a level the device was measured to run slower, or one
deeper than anything measured. :class:`Evidence` holds what was measured and turns it into a
bracket of levels, lowest to deepest, that the predictor then chooses among (:meth:`Evidence.level`):

* with a level sweep (Strassen times per size and level, each size's levels timed in one group):
  at a swept size, its measured best level (:func:`measured_best`); between two swept sizes, the
  levels between their two best ones; below the smallest, none deeper than its best; beyond the
  largest, its best level and no other (deeper levels were not shown to pay there, shallower ones
  were shown to lose);
* without a sweep, from the calibration alone: no level whose bottom products lie below the smallest
  calibrated size, and beyond the largest calibrated size none deeper than the predictor's level at
  that size (its curves say nothing further);
* with neither: every level (nothing measured; the caller says the answer is a model's).

This is what ``level="auto"``'s tables are built from (:mod:`modeling.profile`), so that auto never
runs a level the device's own measurements show to be slower, and what ``gemmlab predict`` answers
with for a stored calibration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

#: A deeper level replaces a shallower one as a size's measured best only when it is faster by more
#: than this fraction: within it the two are not told apart by one sweep's medians.
RESOLUTION = 0.01


class Ranked(Protocol):
    def level(self, x: float, levels: range | list[int]) -> int: ...


def measured_best(times: Mapping[int, float], resolution: float = RESOLUTION) -> int:
    """The best level among measured ``times`` ({level: time}) at one size: from the shallowest, a deeper
    level takes over only where it is more than ``resolution`` faster than the best so far."""
    levels = sorted(times)
    best = levels[0]
    for level in levels[1:]:
        if times[level] < (1 - resolution) * times[best]:
            best = level
    return best


@dataclass(frozen=True)
class Support:
    """The levels the evidence allows at one size (``lowest`` to ``deepest``) and why, in words."""

    lowest: int
    deepest: int
    reason: str


@dataclass(frozen=True)
class Evidence:
    """A device's measurements for one configuration: the calibrated sizes (of its Gemm and Geam curves;
    None: not measured) and the level sweep ``sweep`` ({size: {level: time}}, any unit shared within a
    size; sizes where one level only was timed say nothing and are left out)."""

    calibrated: tuple[float, float] | None = None
    sweep: Mapping[int, Mapping[int, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        kept = {int(n): {int(lv): float(t) for lv, t in times.items()}
                for n, times in sorted(self.sweep.items()) if len(times) >= 2}
        object.__setattr__(self, "sweep", kept)
        object.__setattr__(self, "_best", {n: measured_best(t) for n, t in kept.items()})

    @property
    def best(self) -> dict[int, int]:
        """The measured best level of each swept size."""
        return dict(self._best)

    def support(self, n: float, deepest: int) -> Support:
        """The levels (at most ``deepest``) the measurements allow at size n, before any model is asked."""
        if self.sweep:
            return self._swept(n, deepest)
        if self.calibrated is None:
            return Support(0, deepest, "no measurement of this device: the model's level")
        return Support(0, self._calibrated_bottoms(n, deepest),
                       f"levels whose bottom products are calibrated (>= {self.calibrated[0]:.0f})")

    def _calibrated_bottoms(self, n: float, deepest: int) -> int:
        """The deepest level whose bottom products (n / 2^level) are no smaller than the smallest
        calibrated size (``deepest`` where nothing was calibrated)."""
        if self.calibrated is None:
            return deepest
        lo = self.calibrated[0]
        return max(0, min(deepest, math.floor(math.log2(n / lo) + 1e-12))) if n >= lo else 0

    def _swept(self, n: float, deepest: int) -> Support:
        best = self._best
        sizes = list(best)
        if n in best:
            return Support(min(best[n], deepest), min(best[n], deepest), f"measured best at N = {n:.0f}")
        if n < sizes[0]:
            return Support(0, min(best[sizes[0]], self._calibrated_bottoms(n, deepest)),
                           f"below the smallest swept size {sizes[0]} (best level {best[sizes[0]]} there)")
        if n > sizes[-1]:
            top = min(best[sizes[-1]], deepest)
            return Support(top, top, f"beyond the largest swept size {sizes[-1]}: its measured best level {top}, "
                                     "no deeper level was measured to pay there")
        above = next(s for s in sizes if s > n)
        below = sizes[sizes.index(above) - 1]
        a, b = sorted((best[below], best[above]))
        return Support(min(a, deepest), min(b, deepest),
                       f"between the swept sizes {below} and {above} (best levels {best[below]} and {best[above]})")

    def level(self, model: Ranked, n: float, deepest: int) -> int:
        """``model``'s best level at size n among those the evidence allows (:meth:`support`); without a
        sweep, beyond the calibrated sizes, none deeper than its level at the largest of them."""
        found = self.support(n, deepest)
        top = found.deepest
        if not self.sweep and self.calibrated is not None and n > self.calibrated[1]:
            top = min(top, self.level(model, self.calibrated[1], deepest))
        return model.level(n, range(found.lowest, max(found.lowest, top) + 1))

    def reason(self, model: Ranked, n: float, deepest: int) -> str:
        """Why :meth:`level` answers as it does at n, in words."""
        text = self.support(n, deepest).reason
        if not self.sweep and self.calibrated is not None and n > self.calibrated[1]:
            text += (f"; beyond the largest calibrated size {self.calibrated[1]:.0f}, no deeper than the level "
                     f"there ({self.level(model, self.calibrated[1], deepest)})")
        return text

    def edges(self) -> list[int]:
        """Sizes where :meth:`support` may change: each swept size and its neighbours, and the
        calibration's level limits (for a level table's scan, which must not step over them)."""
        if self.sweep:
            return sorted({s + d for s in self.sweep for d in (-1, 0, 1)})
        if self.calibrated is None:
            return []
        lo, hi = self.calibrated
        limits = [lo * 2**level for level in range(64) if lo * 2**level <= 2 * hi] + [hi]
        return sorted({math.ceil(s) + d for s in limits for d in (-1, 0, 1)})
