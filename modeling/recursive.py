"""The recursive predictor: every level's time from the level below, the best level as argmin.

    T_0(x) = Gemm(x)
    T_L(x) = a T_{L-1}(x/2) + b Geam(x/2) + overhead_L(x) + n_temp Alloc(x/2)

a (products) and b (additions, in Geam units) come from the schedule tables
(:mod:`gpu.strassen.costs`), so the model follows fused additions or Otsuka's copies
without a change here. The thesis rule stops at one level and extrapolates by
doubling P; this model evaluates each level, so it sees that the additions
grow as 7^L (x/2^L)^2 and that the bottom products shrink to sizes where the
library is less efficient.

``inner_gemm``/``inner_geam``, when given, are the library's times *inside* a
product: calls on quadrant views issued back to back, as a level issues them
(``gemmlab calibrate --context``). On a GPU these run a few per cent slower
than the isolated, cache-flushed calls of the plain calibration (sustained
clocks, strided views), which moves the first level boundary; T_0, the
baseline a level competes with, stays the plain Gemm(x).

The per-call overhead is the host's: each library call costs ``launch_ms`` of
host time to issue (measured, or fitted to stored Strassen timings). Calls are
asynchronous, so a call's host time is hidden while the device is busy with
that call's own kernels; only the excess shows:

    overhead_L(x) = max(0, n_L h - own_L(x))

with n_L the kernels the call launches itself (its additions, and its GEMMs at
the bottom level) and own_L(x) their device time. This is what makes deep
levels lose at small sizes on a GPU (thousands of microsecond kernels, each
issued from Python) while leaving the large sizes, where the host runs ahead,
unchanged. On the CPU (``overlap=False``) calls are synchronous and the host
time adds: overhead_L = n_L h. Alloc (malloc + free of a quadrant, per temporary the table
allocates) is zero for RUM; the analytic model (:mod:`modeling.analytic`) is
this recursion over Fmul and Fadd.

With no overhead, level L beats level L-1 at x exactly when level L-1 beats
L-2 at x/2, so the boundaries are P, 2P, 4P, ... with P the one-level
crossover: over the same curves the recursion reproduces the thesis rule, and
it departs from it only through the overhead, fused or copied additions, and
the curves it is given (measured points rather than a fitted cubic).

Two honesty rules hold whatever the curves say:

* a level's speed-up never exceeds what its operation count allows
  (:func:`speedup_bound`: (8/7)^L for seven products per level): a level runs at least its
  products' share of the library work, so T_L(x) >= T_0(x) / bound. Curves that claim more
  (noisy or extrapolated ones) are held to it, and :meth:`RecursiveModel.capped` says where;
* :meth:`RecursiveModel.extrapolated` says whether a level's time at x rests on a curve
  evaluated outside the sizes it was measured at.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gpu.strassen.costs import level_counts, schedule_below

from .crossover import crossing, speedup_bound
from .fits import curve_range

Curve = Callable[[float], float]  # size -> ms


@dataclass(frozen=True)
class RecursiveModel:
    """T_L(x) in ms for ``schedule`` (fused additions or not) over Gemm and Geam curves in ms;
    ``launch_ms``: host time per library call; ``overlap``: calls are asynchronous (GPU)."""

    gemm: Curve
    geam: Curve
    schedule: str = "rum"
    fused: bool = False
    launch_ms: float = 0.0
    overlap: bool = True
    alloc: Curve | None = None
    inner_gemm: Curve | None = None
    inner_geam: Curve | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.launch_ms) and self.launch_ms >= 0):
            raise ValueError(f"launch_ms must be a non-negative time in ms, got {self.launch_ms}")

    def time(self, x: float, level: int) -> float:
        """T_level(x) in ms, never below T_0(x) over the level's :func:`speedup_bound`."""
        raw = self._time(self.schedule, float(x), level)
        if level == 0:
            return raw
        return max(raw, float(self.gemm(float(x))) / speedup_bound(self.schedule, level, self.fused))

    def capped(self, x: float, level: int) -> bool:
        """Whether the curves alone give ``level`` a larger speed-up at x than its operation count allows
        (then :meth:`time` holds it to :func:`speedup_bound`)."""
        return level > 0 and self._time(self.schedule, float(x), level) < self.time(x, level)

    def evaluations(self, x: float, level: int) -> list[tuple[Curve, float]]:
        """The (curve, size) pairs ``level``'s speed-up at x reads: the GEMM of x (the baseline), and for a
        level its additions at x/2 .. x/2^level and its bottom products at x/2^level."""
        out: list[tuple[Curve, float]] = [(self.gemm, float(x))]
        if level == 0:
            return out
        geam = self.inner_geam or self.geam
        out += [(geam, x / 2**d) for d in (1, level)]
        out.append((self.inner_gemm or self.gemm, x / 2**level))
        return out

    def extrapolated(self, x: float, level: int) -> bool | None:
        """Whether ``level``'s speed-up at x reads a curve outside its measured sizes (True), only inside
        them (False), or curves that were never measured (None: datasheet, transferred or given curves)."""
        outside = False
        for curve, size in self.evaluations(x, level):
            found = curve_range(curve)
            if found is None:
                return None
            outside |= not found[0] * (1 - 1e-9) <= size <= found[1] * (1 + 1e-9)
        return outside

    def _time(self, schedule: str, x: float, level: int, inner: bool = False) -> float:
        if level < 0:
            raise ValueError(f"level must be >= 0, got {level}")
        gemm = self.inner_gemm if inner and self.inner_gemm else self.gemm
        if level == 0:
            return float(gemm(x))
        geam = self.inner_geam or self.geam
        c = level_counts(schedule, level, self.fused)
        own = c.geams * float(geam(x / 2))
        if level == 1:
            below = 0.0
            own += c.products * float((self.inner_gemm or self.gemm)(x / 2))
        else:
            below = c.products * self._time(schedule_below(schedule, level), x / 2, level - 1, inner=True)
        alloc = c.temporaries * float(self.alloc(x / 2)) if self.alloc and c.temporaries else 0.0
        host = c.launches * self.launch_ms
        return below + own + (max(0.0, host - own) if self.overlap else host) + alloc

    def times(self, x: float, levels: range | list[int]) -> dict[int, float]:
        return {level: self.time(x, level) for level in levels}

    def level(self, x: float, levels: range | list[int]) -> int:
        """The level of ``levels`` with the least predicted time at size x."""
        t = self.times(x, levels)
        return min(t, key=t.__getitem__)

    def speedup(self, x: float, level: int) -> float:
        return self.time(x, 0) / self.time(x, level)

    def boundary(self, level: int, lo: float, hi: float) -> float:
        """Size from which ``level`` beats ``level - 1`` (up to hi); ValueError if none in [lo, hi]."""
        return crossing(lambda x: math.log(self.time(x, level - 1) / self.time(x, level)), lo, hi,
                        f"level {level} against level {level - 1}")

    def boundaries(self, max_level: int, lo: float, hi: float) -> list[float | None]:
        """Where levels 1..max_level start; None where the crossing is not in [lo, hi]."""
        out: list[float | None] = []
        for level in range(1, max_level + 1):
            try:
                out.append(self.boundary(level, lo, hi))
            except ValueError:
                out.append(None)
        return out
