"""Gemm(x) as a cubic and Geam(x) as a quadratic, fitted by least squares (times in ms).

The thesis fitted these two curves (MATLAB, ordinary least squares) to a
calibration sweep and derived the crossover and the optimal level from them.
An ordinary fit minimises absolute error, so the largest sizes (seconds)
decide it and the small sizes (microseconds) can be off by several times;
``weighting="relative"`` minimises relative error instead, which the
recursive predictor needs because it evaluates the curves at x/2, x/4, ...
Coefficients are stored highest power first, as the thesis wrote them
(p1 x^3 + p2 x^2 + p3 x + p4).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.polynomial import Polynomial

WEIGHTINGS = ("absolute", "relative")
DEGREES = {"gemm": 3, "geam": 2}
#: Units accepted in a coefficients file, as factors to milliseconds.
UNITS = {"ms": 1.0, "s": 1e3, "us": 1e-3}


@dataclass(frozen=True)
class Fit:
    """A polynomial time curve in ms, with the goodness of fit where it was fitted to data.

    ``sse`` (ms^2) and ``r2`` describe the absolute residuals of the data the
    fit came from; ``rel_rms`` the root-mean-square relative residual. All
    three are None for coefficients given by the user.
    """

    coef: tuple[float, ...]
    weighting: str = "given"
    sse: float | None = None
    r2: float | None = None
    rel_rms: float | None = None
    sizes: tuple[int, ...] = ()

    @property
    def polynomial(self) -> Polynomial:
        return Polynomial(self.coef[::-1])

    def __call__(self, x: Any) -> Any:
        """Time in ms at size(s) x."""
        return np.polyval(self.coef, np.asarray(x, dtype=float))

    @property
    def size_range(self) -> tuple[int, int] | None:
        return (min(self.sizes), max(self.sizes)) if self.sizes else None

    def as_dict(self) -> dict[str, Any]:
        return {"coefficients": list(self.coef), "units": "ms", "weighting": self.weighting,
                "sse": self.sse, "r2": self.r2, "rel_rms": self.rel_rms, "sizes": list(self.sizes)}


def fit_polynomial(sizes: Sequence[float], ms: Sequence[float], degree: int,
                   weighting: str = "absolute") -> Fit:
    """Least-squares polynomial of ``degree`` through (sizes, ms).

    ``weighting="relative"`` weights each residual by 1/ms, minimising the
    relative error. Raises ValueError for too few points, non-positive times
    or an unknown weighting.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    x, y = np.asarray(sizes, dtype=float), np.asarray(ms, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"sizes and times must be 1-D and of one length, got {x.shape} and {y.shape}")
    if len(np.unique(x)) <= degree:
        raise ValueError(f"a degree-{degree} fit needs at least {degree + 1} distinct sizes, got "
                         f"{len(np.unique(x))}; calibrate more sizes (gemmlab calibrate --sizes ...)")
    if not np.all(np.isfinite(y) & (y > 0)):
        raise ValueError("times must be positive and finite")
    weights = 1.0 / y if weighting == "relative" else None
    # Polynomial.fit works on a scaled domain (well conditioned at x ~ 5e4); convert() maps back.
    poly = Polynomial.fit(x, y, degree, w=weights).convert()
    coef = tuple(float(c) for c in poly.coef[::-1])
    coef = (0.0,) * (degree + 1 - len(coef)) + coef
    residual = y - np.polyval(coef, x)
    sse = float(residual @ residual)
    sst = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - sse / sst if sst > 0 else float("nan")
    rel_rms = float(np.sqrt(np.mean((residual / y) ** 2)))
    return Fit(coef, weighting, sse, r2, rel_rms, tuple(int(n) for n in x))


@dataclass(frozen=True)
class TimeModel:
    """Gemm(x) and Geam(x) in ms: the pair every predictor starts from."""

    gemm: Fit
    geam: Fit
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"gemm": self.gemm.as_dict(), "geam": self.geam.as_dict(), "source": self.source}

    @property
    def size_range(self) -> tuple[int, int] | None:
        """Sizes both fits were made from (None for given coefficients)."""
        ranges = [f.size_range for f in (self.gemm, self.geam) if f.size_range]
        if not ranges:
            return None
        return max(r[0] for r in ranges), min(r[1] for r in ranges)


def fit_calibration(rows: Iterable[Mapping[str, Any]], weighting: str = "absolute",
                    source: str = "") -> TimeModel:
    """Fit the cubic and the quadratic to calibration rows (``size``, ``gemm_s``, ``geam_s``)."""
    rows = sorted(rows, key=lambda r: r["size"])
    if not rows:
        raise ValueError("no calibration points to fit; run gemmlab calibrate first")
    sizes = [r["size"] for r in rows]
    fits = {m: fit_polynomial(sizes, [1e3 * r[f"{m}_s"] for r in rows], DEGREES[m], weighting)
            for m in DEGREES}
    return TimeModel(fits["gemm"], fits["geam"], source)


def from_coefficients(doc: Mapping[str, Any], source: str = "coefficients") -> TimeModel:
    """A model from ``{"gemm": [p1..p4], "geam": [q1..q3], "units": "ms"}`` (highest power first)."""
    unit = doc.get("units", "ms")
    if unit not in UNITS:
        raise ValueError(f"units must be one of {sorted(UNITS)}, got {unit!r}")
    fits = {}
    for method, degree in DEGREES.items():
        coef = doc.get(method)
        if not isinstance(coef, (list, tuple)) or len(coef) != degree + 1:
            raise ValueError(f'"{method}" must list {degree + 1} coefficients, highest power first '
                             f"(got {coef!r})")
        fits[method] = Fit(tuple(UNITS[unit] * float(c) for c in coef))
    return TimeModel(fits["gemm"], fits["geam"], source)


#: Exponent of each call's work in its size (GEMM: 2x^3 FLOPs; GEAM: 3x^2 elements moved): beyond the
#: largest measured size a curve keeps that size's rate, so its time grows as x to this power.
WORK_EXPONENTS = {"gemm": 3.0, "geam": 2.0}


@dataclass(frozen=True)
class MeasuredCurve:
    """Times in ms through the measured points: piecewise power laws between neighbours
    (straight lines in log-log), extended past the ends.

    Unlike a fitted polynomial it reproduces every calibrated point, which the
    recursive predictor wants at x/2, x/4, ...; it inherits their noise too.
    Past the ends nothing is measured, so the extension assumes no gain a measurement
    has not shown: with ``work_exponent`` (the power of x the call's work grows as), the
    largest size's rate holds above it, and below the smallest size the first segment's
    law holds but never a steeper one (a smaller call no faster per unit of work than the
    smallest measured). Without it, both end segments' laws are extended as they are, and a
    noisy end segment carries its error far: on a loaded 2-core CPU, in-context GEMMs
    measured at 128 and 256 only (exponent 0.18, both near a 20 ms time slice), extended to
    4096, made the level-1 speed-up at 8192 read 71.
    """

    sizes: tuple[float, ...]
    ms: tuple[float, ...]
    work_exponent: float | None = None

    def __post_init__(self) -> None:
        x = np.asarray(self.sizes, dtype=float)
        if len(x) < 2 or np.any(np.diff(x) <= 0) or x[0] <= 0:
            raise ValueError("a measured curve needs two or more positive sizes in increasing order")
        if not all(t > 0 and np.isfinite(t) for t in self.ms):
            raise ValueError("times must be positive and finite")
        ls, lt = np.log(x), np.log(np.asarray(self.ms, dtype=float))
        low = (lt[1] - lt[0]) / (ls[1] - ls[0])
        high = (lt[-1] - lt[-2]) / (ls[-1] - ls[-2])
        if self.work_exponent is not None:
            low, high = min(low, self.work_exponent), self.work_exponent
        object.__setattr__(self, "_log", (ls, lt, low, high))

    @property
    def size_range(self) -> tuple[float, float]:
        """The smallest and the largest measured size: outside them the curve extrapolates."""
        return float(self.sizes[0]), float(self.sizes[-1])

    def __call__(self, x: Any) -> Any:
        ls, lt, low, high = self._log
        if isinstance(x, (int, float)):
            return self._scalar(math.log(x))
        lx = np.log(np.asarray(x, dtype=float))
        inner = np.interp(lx, ls, lt)
        return np.exp(np.where(lx < ls[0], lt[0] + (lx - ls[0]) * low,
                               np.where(lx > ls[-1], lt[-1] + (lx - ls[-1]) * high, inner)))

    def _scalar(self, lx: float) -> float:
        """The same curve at one size, without arrays (the predictors call it thousands of times)."""
        ls, lt, low, high = self._log
        if lx <= ls[0]:
            return math.exp(lt[0] + (lx - ls[0]) * low)
        if lx >= ls[-1]:
            return math.exp(lt[-1] + (lx - ls[-1]) * high)
        i = int(np.searchsorted(ls, lx, side="right"))
        w = (lx - ls[i - 1]) / (ls[i] - ls[i - 1])
        return math.exp(lt[i - 1] + w * (lt[i] - lt[i - 1]))


@dataclass(frozen=True)
class InContextCurve:
    """The calls inside a Strassen level (``inner``, measured in context over a few sizes) where they
    were measured, and elsewhere the plain curve scaled by the in-context/plain ratio at the nearer end
    of ``inner``'s sizes: the plain calibration, not a two-point power law, says how a call grows
    beyond the in-context sizes."""

    inner: MeasuredCurve
    plain: MeasuredCurve

    @property
    def size_range(self) -> tuple[float, float]:
        """Sizes where one of the two curves is measured."""
        (a, b), (c, d) = self.inner.size_range, self.plain.size_range
        return min(a, c), max(b, d)

    def __call__(self, x: Any) -> Any:
        lo, hi = self.inner.size_range
        if isinstance(x, (int, float)):
            if lo <= x <= hi:
                return self.inner(x)
            edge = lo if x < lo else hi
            return self.plain(x) * self.inner(edge) / self.plain(edge)
        x = np.asarray(x, dtype=float)
        edge = np.clip(x, lo, hi)
        return np.where((x >= lo) & (x <= hi), self.inner(x), self.plain(x) * self.inner(edge) / self.plain(edge))


def curve_range(curve: Any) -> tuple[float, float] | None:
    """The measured sizes of a time curve (None for a model of no measurement: datasheet or transferred
    curves, given coefficients)."""
    found = getattr(curve, "size_range", None)
    return tuple(found) if found else None


def measured_curves(rows: Iterable[Mapping[str, Any]]) -> tuple[MeasuredCurve, MeasuredCurve]:
    """Gemm and Geam through calibration rows (``size``, ``gemm_s``, ``geam_s``), each extended past its
    ends as its work grows (:data:`WORK_EXPONENTS`)."""
    rows = sorted(rows, key=lambda r: r["size"])
    sizes = tuple(float(r["size"]) for r in rows)
    return tuple(MeasuredCurve(sizes, tuple(1e3 * r[f"{m}_s"] for r in rows), WORK_EXPONENTS[m]) for m in DEGREES)
