"""The seed papers' published measurements as data, with the checks that decide which rows can be used.

The transfer model learns efficiency curves from every device the project knows; the papers' own
results are devices too, measured on their GPUs (K20, K40, P100, V100, A100, RTX 2080 SUPER) with
their library versions. ``published.json`` next to this module holds them as rows. The papers are in
Japanese: every number was transcribed from them into English, and each row keeps the transcribed
sentence it comes from (``quote``), so that a reader can check the number against its words:

* :class:`ThesisFit`: the thesis's fitted Gemm (cubic) and Geam (quadratic) and its crossover P
  (thesis Table 4.2, for P100, V100, A100);
* :class:`Boundary`: measured level boundaries and crossovers (where level L starts to win);
* :class:`SpeedUp`: measured speed-ups over the library DGEMM;
* :class:`Figure`: other published numbers (efficiency ratios, gains, register files, peak memory);
* :class:`Claim`: results published without a number (Otsuka's K20 and P100);
* the split-K, decomposition and Ozaki rows of :mod:`modeling.published_methods`.

Every row cites its paper and the table, figure or part of the paper it comes from. A published
row can be wrong: the thesis's A100 and V100 coefficients do not give their own crossover. So
:func:`problems` recomputes each row against its own numbers and the hardware table, the data
records the reason as ``flag`` (the tests require both to agree), and :func:`usable` leaves the
flagged rows out of anything fitted to them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from gpu.strassen.costs import level_counts

from . import hardware
from . import published_methods as pm
from .crossover import NoCrossover, find_crossover_point
from .fits import DEGREES, TimeModel, from_coefficients

PAPERS = ("otsuka2020", "thesis2023", "hattori2016", "sakai2016", "nanai2021")
STRASSEN_PAPERS = PAPERS[:2]
#: The thesis: measured level boundaries lie 2-7% below the predicted 2P, 4P.
THESIS_SHORTFALL = (0.02, 0.07)
#: Relative slack of a boundary printed as "about" when a level is checked against it.
APPROXIMATE = 0.05


@dataclass(frozen=True)
class Citation:
    """Where a row comes from: the paper, its table or figure (or, where the transcription names none,
    the part of the paper: "headline results"), and the transcribed sentences that print the numbers."""

    paper: str
    where: str
    quote: tuple[str, ...]

    def __str__(self) -> str:
        return f"{load().papers[self.paper]}, {self.where} (in Japanese; numbers transcribed from the paper)"


@dataclass(frozen=True)
class ThesisFit:
    """Gemm(x) = p1 x^3 + ... + p4 and Geam(x) = q1 x^2 + q2 x + q3 in ms, as printed (strings keep
    the printed digits), the published crossover P and the sizes the fit was made from."""

    device: str
    gemm: tuple[str, ...]
    geam: tuple[str, ...]
    crossover: int
    sizes: tuple[int, int]
    library: str
    r2: str
    source: Citation
    flag: str | None = None
    note: str = ""
    paper: str = "thesis2023"
    units: str = "ms"

    def time_model(self) -> TimeModel:
        """The printed curves as a :class:`~modeling.fits.TimeModel` (converted to ms)."""
        doc = {"gemm": [float(c) for c in self.gemm], "geam": [float(c) for c in self.geam], "units": self.units}
        return from_coefficients(doc, f"{self.device}: {self.source}")


@dataclass(frozen=True)
class Boundary:
    """Measured size from which ``level`` beats ``level - 1`` (level 1: the crossover with the library)."""

    paper: str
    device: str
    level: int
    size: float
    approximate: bool
    predicted: float | None
    schedule: str
    library: str
    source: Citation
    flag: str | None = None
    note: str = ""


@dataclass(frozen=True)
class SpeedUp:
    """Measured library time over Strassen time at ``size`` (``level`` None where not published)."""

    paper: str
    device: str
    size: int
    speedup: float
    level: int | None
    schedule: str
    library: str
    source: Citation
    flag: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Figure:
    """Any other published number: ``value`` (or the range ``value``..``high``) of ``quantity``."""

    paper: str
    device: str
    quantity: str
    value: float
    high: float | None
    unit: str
    sizes: tuple[int, ...]
    level: int | None
    schedule: str
    library: str
    source: Citation
    flag: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Claim:
    """A published result the spec restates without a number."""

    paper: str
    device: str
    text: str
    source: Citation
    flag: str | None = None


Row = ThesisFit | Boundary | SpeedUp | Figure | Claim | pm.SplitKSpeedUp | pm.DecompositionResult | pm.OzakiResult


@dataclass(frozen=True)
class Published:
    """All rows of the data file, and the full references of the papers they cite."""

    papers: dict[str, str]
    fits: tuple[ThesisFit, ...]
    boundaries: tuple[Boundary, ...]
    speedups: tuple[SpeedUp, ...]
    figures: tuple[Figure, ...]
    claims: tuple[Claim, ...]
    splitk: tuple[pm.SplitKSpeedUp, ...]
    decomposition: tuple[pm.DecompositionResult, ...]
    ozaki: tuple[pm.OzakiResult, ...]

    @property
    def rows(self) -> tuple[Row, ...]:
        return (*self.fits, *self.boundaries, *self.speedups, *self.figures, *self.claims, *self.splitk,
                *self.decomposition, *self.ozaki)


@dataclass(frozen=True)
class DeviceResults:
    """Everything one paper (or both) published for one device."""

    device: str
    fits: tuple[ThesisFit, ...]
    boundaries: tuple[Boundary, ...]
    speedups: tuple[SpeedUp, ...]
    figures: tuple[Figure, ...]
    claims: tuple[Claim, ...]


def _row(cls: type, doc: dict[str, Any]) -> Any:
    """One row of the JSON file as ``cls`` (lists become tuples, the source a :class:`Citation`)."""
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()}
    source = doc["source"]
    return cls(**{**fields, "source": Citation(source["paper"], source["where"], tuple(source["quote"]))})


@cache
def load() -> Published:
    """The rows of ``published.json`` (read once)."""
    doc = json.loads(resources.files(__package__).joinpath("published.json").read_text(encoding="utf-8"))
    return Published(doc["papers"], *(tuple(_row(cls, d) for d in doc[key]) for cls, key in (
        (ThesisFit, "fits"), (Boundary, "boundaries"), (SpeedUp, "speedups"), (Figure, "figures"),
        (Claim, "claims"), (pm.SplitKSpeedUp, "splitk"), (pm.DecompositionResult, "decomposition"),
        (pm.OzakiResult, "ozaki"))))


# --- accessors ----------------------------------------------------------------------------------

def published_devices() -> tuple[str, ...]:
    """Devices with at least one published row, in the hardware table's order."""
    named = {row.device for row in load().rows}
    return tuple(name for name in hardware.GPUS if name in named)


def device_name(name: str) -> str:
    """The published device a short or CUDA name refers to (``Tesla V100-SXM2-32GB`` -> ``V100``)."""
    devices = published_devices()
    if name in devices:
        return name
    try:
        found = hardware.lookup(name).name
    except ValueError:
        found = None
    if found not in devices:
        raise ValueError(f"no published results for {name!r}; published: {', '.join(devices)}")
    return found


def results(name: str, paper: str | None = None) -> DeviceResults:
    """One device's Strassen rows, of one paper (``otsuka2020``, ``thesis2023``) or of both."""
    if paper is not None and paper not in STRASSEN_PAPERS:
        raise ValueError(f"paper must be one of {STRASSEN_PAPERS}, got {paper!r}")
    device, data = device_name(name), load()
    pick = lambda rows: tuple(r for r in rows if r.device == device and paper in (None, r.paper))
    return DeviceResults(device, pick(data.fits), pick(data.boundaries), pick(data.speedups),
                         pick(data.figures), pick(data.claims))


def thesis_fits(name: str | None = None) -> tuple[ThesisFit, ...]:
    """The thesis's Table 4.2 rows, all or one device's (flagged ones included: see :func:`usable`)."""
    fits = load().fits
    return fits if name is None else tuple(f for f in fits if f.device == device_name(name))


def otsuka_results(name: str) -> DeviceResults:
    """Otsuka 2020's results for K20, P100 or V100."""
    return results(name, "otsuka2020")


def thesis_results(name: str) -> DeviceResults:
    """The thesis's results for P100, V100 or A100."""
    return results(name, "thesis2023")


def usable(rows: Iterable[Row]) -> tuple[Row, ...]:
    """The rows whose checks find nothing: the only ones a fit may learn from."""
    return tuple(r for r in rows if not problems(r))


def flagged() -> list[tuple[Row, list[str]]]:
    """Every row the checks reject, with the reasons."""
    return [(r, found) for r in load().rows if (found := problems(r))]


# --- checks -------------------------------------------------------------------------------------

def _gain_basis(fit: ThesisFit) -> tuple[np.ndarray, np.ndarray]:
    """g(x) = Gemm(x) - a Gemm(x/2) - b Geam(x/2), zero where SpeedUp(x) = 1, is linear in the
    coefficients: g = sum_i c_i phi_i(x) with phi_i(x) = w_i x^k_i, w_i from the RUM table's a and b.
    Returns (c, [w, k])."""
    counts = level_counts("rum", 1)
    coef, weights, powers = [], [], []
    for curve, gemm in ((fit.gemm, True), (fit.geam, False)):
        degree = DEGREES["gemm" if gemm else "geam"]
        for i, printed in enumerate(curve):
            k = degree - i
            coef.append(float(printed))
            weights.append((1.0 - counts.products * 0.5**k) if gemm else -counts.geams * 0.5**k)
            powers.append(k)
    return np.array(coef), np.array([weights, powers])


def crossover_tolerance(fit: ThesisFit) -> float:
    """How far the crossover of the printed coefficients may lie from the published P through rounding
    alone: sum_i |phi_i(P)| h_i / |g'(P)| (h_i half a unit of the last printed digit), plus the
    0.5 of P's own rounding to an integer."""
    coef, (weights, powers) = _gain_basis(fit)
    half = np.array([pm.half_unit(c) for c in (*fit.gemm, *fit.geam)])
    x = float(fit.crossover)
    spread = float(np.sum(np.abs(weights * x**powers) * half))
    slope = float(np.sum(coef * weights * powers * x ** np.maximum(powers - 1, 0)))
    return spread / abs(slope) + 0.5 if slope else math.inf


def crossover_of(fit: ThesisFit) -> float | NoCrossover:
    """SpeedUp(x) = 1 solved with the printed coefficients, searched over the sizes measured."""
    return find_crossover_point(fit.time_model(), *fit.sizes)


def implied_rates(fit: ThesisFit) -> tuple[float, float]:
    """(DGEMM FLOP/s, DGEAM bytes/s) the printed curves give at the largest size measured."""
    x, model = float(fit.sizes[1]), fit.time_model()
    return 2 * x**3 / (1e-3 * float(model.gemm(x))), 24 * x**2 / (1e-3 * float(model.geam(x)))


def fit_problems(fit: ThesisFit) -> list[str]:
    """Where a printed fit contradicts itself (its crossover) or the device (rates above its peaks)."""
    found = []
    model, xs = fit.time_model(), np.geomspace(*fit.sizes, 256)
    if not (np.all(model.gemm(xs) > 0) and np.all(model.geam(xs) > 0)):
        found.append("a printed curve is not positive over the sizes measured")
    P, tol = crossover_of(fit), crossover_tolerance(fit)
    if isinstance(P, NoCrossover):
        found.append(f"the printed coefficients give no crossover in {fit.sizes} ({P.detail})")
    elif abs(P - fit.crossover) > tol:
        found.append(f"the printed coefficients give P = {P:.0f}, not the published {fit.crossover} "
                     f"(rounding of the printed digits allows +-{tol:.1f})")
    gpu = hardware.lookup(fit.device)
    flops, bandwidth = implied_rates(fit)
    if flops > gpu.peak_flops:
        found.append(f"Gemm implies {flops / 1e12:.1f} TFLOP/s at {fit.sizes[1]}, above the {gpu.name}'s "
                     f"{gpu.peak_flops / 1e12:g} TFLOP/s peak")
    if bandwidth > gpu.bandwidth:
        found.append(f"Geam implies {bandwidth / 1e9:.0f} GB/s at {fit.sizes[1]}, above the {gpu.name}'s "
                     f"{gpu.bandwidth_gbs:g} GB/s")
    return found


def _published_crossover(paper: str, device: str) -> float | None:
    fit = [f for f in load().fits if f.paper == paper and f.device == device]
    return float(fit[0].crossover) if fit else None


def boundary_problems(b: Boundary) -> list[str]:
    """A boundary must follow its paper's rule: predicted = 2^(L-1) P, measured 2-7% below it (thesis)."""
    found = []
    if b.level < 1 or b.size <= 0:
        found.append(f"level {b.level} at size {b.size} is not a boundary")
    P = _published_crossover(b.paper, b.device)
    if b.paper != "thesis2023" or P is None or b.level < 2:
        return found
    rule = P * 2 ** (b.level - 1)
    if b.predicted is not None and abs(b.predicted - rule) > 2 ** (b.level - 1) * 0.5:
        found.append(f"predicted {b.predicted:g} is not 2^{b.level - 1} P = {rule:g} with the published P")
    shortfall = 1 - b.size / (b.predicted or rule)
    lo, hi = THESIS_SHORTFALL
    if not lo <= shortfall <= hi:
        found.append(f"measured {b.size:g} lies {100 * shortfall:.1f}% below the predicted {b.predicted or rule:g}, "
                     f"outside the thesis's {100 * lo:g}-{100 * hi:g}%")
    return found


def speedup_problems(s: SpeedUp) -> list[str]:
    """A speed-up must be positive, within the operation-count bound (8/7)^L of its level, and its level
    must agree with the same paper's measured boundaries on that device."""
    found = [] if s.speedup > 0 else [f"speed-up {s.speedup} is not positive"]
    if s.level is None:
        return found
    if s.speedup > (8 / 7) ** s.level + 5e-4:
        found.append(f"{s.speedup} exceeds the level-{s.level} bound (8/7)^{s.level} = {(8 / 7) ** s.level:.3f}")
    for b in load().boundaries:
        if (b.paper, b.device) != (s.paper, s.device):
            continue
        slack = APPROXIMATE if b.approximate else 0.0
        if s.size >= b.size * (1 + slack) and s.level < b.level:
            found.append(f"level {s.level} at {s.size}, above the measured level-{b.level} boundary {b.size:g}")
        if s.size < b.size * (1 - slack) and s.level >= b.level:
            found.append(f"level {s.level} at {s.size}, below the measured level-{b.level} boundary {b.size:g}")
    return found


def figure_problems(f: Figure) -> list[str]:
    """Ratios lie in (0, 1]; a register file must match the hardware table's row; peak memories and
    savings must follow the memory model and each other (:func:`~modeling.published_methods.memory_problems`)."""
    found = pm.memory_problems(f, load().figures) if f.quantity.startswith(("peak_memory", "memory_saving")) else []
    if f.quantity.endswith("_measured_over_predicted") and not 0 < f.value <= 1:
        found.append(f"{f.quantity} = {f.value} is not in (0, 1]")
    if f.high is not None and f.high < f.value:
        found.append(f"range {f.value}..{f.high} is empty")
    if f.quantity == "register_file_per_sm":
        table = hardware.lookup(f.device).registers_per_sm * 4 / 1024
        if f.value != table:
            found.append(f"register file {f.value:g} KB, but the hardware table's {f.device} has {table:g} KB")
    return found


def problems(row: Row) -> list[str]:
    """Why ``row`` cannot be used (empty: it can). Recomputed from the numbers, never read from ``flag``."""
    checks = {ThesisFit: fit_problems, Boundary: boundary_problems, SpeedUp: speedup_problems,
              Figure: figure_problems, pm.SplitKSpeedUp: pm.splitk_problems,
              pm.DecompositionResult: pm.decomposition_problems,
              pm.OzakiResult: lambda o: pm.ozaki_problems(o, load().ozaki)}
    check = checks.get(type(row))
    return check(row) if check else []


def flag_mismatches() -> list[str]:
    """Rows whose stored ``flag`` disagrees with :func:`problems` (flagged in the data but passing the
    checks, or failing them unflagged): the data and the checks must say the same."""
    return [f"{type(r).__name__} {r.device} ({r.source}): flag {r.flag!r}, checks {found}"
            for r in load().rows if bool(r.flag) != bool(found := problems(r))]
