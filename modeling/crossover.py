"""The thesis rule: SpeedUp(x) from the fitted curves, the crossover P, and OptimLevel from P.

    strassen_RUM(x) = b Geam(x/2) + a Gemm(x/2)      (a = 7, b = 15: RUM's table)
    SpeedUp(x)      = Gemm(x) / strassen_RUM(x)
    P               : SpeedUp(P) = 1
    OptimLevel(x)   = 0 below P, 1 on [P, 2P), 2 on [2P, 4P), 3 on [4P, 8P), ...

(Li, "Recursive Strassen algorithm focused on reusing memory space", master's thesis, JAIST, 2023.)
A speed-up is held to what the level's operation count allows (:func:`speedup_bound`), whatever the
fitted curves say far from their data. Also the root finder both predictors use for a level boundary:
where one time curve overtakes another for good.
:func:`crossing` raises where there is none in the range; :func:`find_crossing`
returns :class:`NoCrossover` instead, for callers to whom "no crossover up to
the end of the range" is an answer (level 0 throughout) rather than an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from scipy.optimize import brentq

from gpu.strassen.costs import level_counts, schedule_below

from .fits import TimeModel

#: Points of the scan that brackets a crossing before Brent's method refines it.
SCAN_POINTS = 512
#: Products one Strassen level replaces: a call of side x is eight half-size products' work.
PRODUCTS_REPLACED = 8


@cache
def speedup_bound(schedule: str, level: int, fused: bool = False) -> float:
    """The most a ``level``-level product of ``schedule`` can gain over the library GEMM, from its
    operation count (:func:`gpu.strassen.costs.level_counts`): each level does ``a`` half-size
    products (7) where the GEMM does the work of 8, so with the library no faster per operation on
    smaller products, S_L <= prod 8 / a_l = (8/7)^L. Additions only lower it."""
    bound, name = 1.0, schedule
    for left in range(level, 0, -1):
        bound *= PRODUCTS_REPLACED / level_counts(name, left, fused).products
        name = schedule_below(name, left)
    return bound


def one_level_time(model: TimeModel, x: float, schedule: str = "rum", fused: bool = False) -> float:
    """ms of one Strassen level with library products below: b Geam(x/2) + a Gemm(x/2)."""
    c = level_counts(schedule, 1, fused)
    return float(c.geams * model.geam(x / 2) + c.products * model.gemm(x / 2))


def speedup(model: TimeModel, x: float, schedule: str = "rum", fused: bool = False) -> float:
    """SpeedUp(x) = Gemm(x) / strassen(x) of one level, at most :func:`speedup_bound` (8/7)."""
    return min(float(model.gemm(x)) / one_level_time(model, x, schedule, fused), speedup_bound(schedule, 1, fused))


def last_upward_crossing(xs, gain) -> int | None:
    """Index i such that the gain is <= 0 at xs[i] and > 0 from xs[i + 1] to the end, or None
    where it is > 0 nowhere at the end or everywhere (the crossing lies outside xs)."""
    g = np.asarray(gain, dtype=float)
    if g.size < 2 or g[-1] <= 0:
        return None
    below = np.flatnonzero(g <= 0)
    return int(below[-1]) if below.size else None


def interpolated_crossing(xs, gain) -> float | None:
    """The last upward zero of measured gains, by linear interpolation between the two sizes
    that bracket it; None where it lies outside the sizes."""
    i = last_upward_crossing(xs, gain)
    if i is None:
        return None
    x0, x1, g0, g1 = xs[i], xs[i + 1], gain[i], gain[i + 1]
    return float(x0 + (x1 - x0) * (0 - g0) / (g1 - g0))


@dataclass(frozen=True)
class NoCrossover:
    """The gain is <= 0 at the upper end ``hi`` of the search range [lo, hi]: no size in the range
    from which it stays > 0, so the lower option (level 0) holds throughout the range.
    ``largest_gain`` at ``at``: the best the gain gets (> 0 only where the curve rises and falls
    back, which fitted curves can do)."""

    lo: float
    hi: float
    largest_gain: float
    at: float

    @property
    def detail(self) -> str:
        """How the gain behaves on the range, e.g. ``the gain stays <= 0, largest -0.547 at 512``."""
        how = "the gain stays <= 0" if self.largest_gain <= 0 else f"the gain is <= 0 again at {self.hi:.0f}"
        return f"{how}, largest {self.largest_gain:+.3g} at {self.at:.0f}"

    def __str__(self) -> str:
        return f"no crossover in [{self.lo:.0f}, {self.hi:.0f}] ({self.detail})"

    def as_dict(self) -> dict[str, Any]:
        return {"range": [self.lo, self.hi], "largest_gain": self.largest_gain, "at": self.at}


def crossing(gain: Callable[[float], float], lo: float, hi: float, what: str) -> float:
    """The size from which ``gain(x) > 0`` holds up to ``hi``: the last upward zero of ``gain``.

    Scans [lo, hi] geometrically, then refines the last sign change from <= 0
    to > 0 with Brent's method. Raises ValueError naming the range when gain
    is <= 0 at ``hi`` (no crossover yet) or is already > 0 at ``lo``.
    """
    found = find_crossing(gain, lo, hi, what)
    if isinstance(found, NoCrossover):
        raise ValueError(f"{what}: {found}; calibrate larger sizes or raise the upper end of the range")
    return found


def find_crossing(gain: Callable[[float], float], lo: float, hi: float, what: str) -> float | NoCrossover:
    """As :func:`crossing`, but a gain that is <= 0 at ``hi`` is an answer, :class:`NoCrossover`
    (the range and the largest gain), not an error. ValueError still for a bad range, a model that
    is not finite on it, and a gain already > 0 at ``lo`` (the crossover lies below the range)."""
    if not 0 < lo < hi:
        raise ValueError(f"the search range must satisfy 0 < lo < hi, got [{lo}, {hi}]")
    xs = np.geomspace(lo, hi, SCAN_POINTS)
    g = np.array([gain(x) for x in xs])
    if not np.all(np.isfinite(g)):
        raise ValueError(f"{what}: the model is not finite on [{lo:.0f}, {hi:.0f}] "
                         "(a fitted curve reaches zero); narrow the range to the calibrated sizes")
    i = last_upward_crossing(xs, g)
    if i is None and g[-1] <= 0:
        best = int(np.argmax(g))
        return NoCrossover(float(lo), float(hi), float(g[best]), float(xs[best]))
    if i is None:
        raise ValueError(f"{what}: already past the crossover at the lower end {lo:.0f} of the range; "
                         "calibrate smaller sizes or lower the lower end of the range")
    return float(brentq(gain, xs[i], xs[i + 1], xtol=1e-6 * xs[i]))


def crossover_point(model: TimeModel, lo: float | None = None, hi: float | None = None,
                    schedule: str = "rum", fused: bool = False) -> float:
    """P with SpeedUp(P) = 1, searched in [lo, hi] (default: the sizes the fits were made from,
    the lower end doubled so that x/2 stays calibrated)."""
    lo, hi = search_range(model, lo, hi)
    return crossing(lambda x: speedup(model, x, schedule, fused) - 1.0, lo, hi, "SpeedUp(x) = 1")


def find_crossover_point(model: TimeModel, lo: float | None = None, hi: float | None = None,
                         schedule: str = "rum", fused: bool = False) -> float | NoCrossover:
    """As :func:`crossover_point`, with :class:`NoCrossover` where Strassen does not pay off for good
    anywhere in the range (the thesis rule's answer there: level 0)."""
    lo, hi = search_range(model, lo, hi)
    return find_crossing(lambda x: speedup(model, x, schedule, fused) - 1.0, lo, hi, "SpeedUp(x) = 1")


def search_range(model: TimeModel, lo: float | None, hi: float | None) -> tuple[float, float]:
    """[lo, hi], filled in from the fitted sizes; ValueError where neither gives one."""
    fitted = model.size_range
    if (lo is None or hi is None) and fitted is None:
        raise ValueError("the model came from given coefficients: give the size range to search "
                         "(lo and hi, or --range LO,HI)")
    return (float(lo) if lo is not None else 2.0 * fitted[0],
            float(hi) if hi is not None else float(fitted[1]))


def thesis_level(x: float, P: float, max_level: int) -> int:
    """OptimLevel(x): 0 below P, then one more level per doubling of x, at most ``max_level``."""
    if P <= 0 or max_level < 0:
        raise ValueError(f"need P > 0 and max_level >= 0, got P = {P} and max_level = {max_level}")
    if x < P:
        return 0
    return min(max_level, 1 + math.floor(math.log2(x / P)))


def thesis_boundaries(P: float, max_level: int) -> list[float]:
    """Sizes where levels 1, 2, ..., ``max_level`` start: P, 2P, 4P, ..."""
    return [P * 2 ** (level - 1) for level in range(1, max_level + 1)]
