"""Published rows of the three papers beyond Strassen, and the checks that decide which can be used.

:mod:`modeling.published` loads them with the Strassen rows from ``published.json``:

* :class:`SplitKSpeedUp`: Hattori & Fujimoto's split-K against cuBLAS DGEMM over a range of inner
  dimensions k, as the largest ("up to") or the smallest ("faster in every setting") speed-up;
* :class:`DecompositionResult`: Sakai, Ino & Hagihara's largest N per decomposition, the cost of
  their index translation, the 2-D against 1-D time and the two-GPU scaling;
* :class:`OzakiResult`: Nanai & Fujimoto's accuracy gained over SGEMM in decimal digits per number
  of splits, and their speed-ups over DGEMM and times over SGEMM.

Each check recomputes a row from its own numbers (a memory printed beside a size, a range that is not
empty, a speed-up above what the GEMM count allows) or against the other rows of its paper (more splits
never gain fewer digits), so that a mistyped number is caught rather than drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from gpu.strassen.costs import strassen_memory, units

if TYPE_CHECKING:
    from .published import Citation, Figure

#: How a published number summarises several measurements.
STATISTICS = ("value", "max", "min", "about", "range")
#: Decomposition quantities that are fractions of a time or a speed.
FRACTIONS = ("translation_speed_loss", "slowdown_2d_over_1d", "imbalance_loss")
DECOMPOSITION = ("largest_n", "speedup_two_gpus", *FRACTIONS)
OZAKI = ("digits_gained_over_sgemm", "speedup_over_dgemm", "time_over_sgemm")


@dataclass(frozen=True)
class SplitKSpeedUp:
    """cuBLAS time over split-K time for an m x n output over inner dimensions k in ``k`` (lo, hi): the
    largest of them (``statistic`` "max") or the smallest ("min"); ``strict``: the paper says only that
    the speed-up exceeds ``speedup`` (faster than cuBLAS: above 1)."""

    paper: str
    device: str
    m: int
    n: int
    k: tuple[int, int]
    statistic: str
    speedup: float
    strict: bool
    library: str
    source: Citation
    flag: str | None = None
    note: str = ""


@dataclass(frozen=True)
class DecompositionResult:
    """One number of the decomposition paper: ``quantity`` (see :data:`DECOMPOSITION`) of ``method``
    (``unsplit``, ``1d``, ``2d``, ``translated``), ``value`` or the range ``value``..``high``; for a
    largest N, the data size printed beside it (``memory`` in ``memory_unit``)."""

    paper: str
    device: str
    quantity: str
    method: str
    value: float
    high: float | None
    statistic: str
    dtype: str
    library: str
    source: Citation
    memory: float | None = None
    memory_unit: str = ""
    segments: int | None = None
    gpus: int | None = None
    flag: str | None = None
    note: str = ""


@dataclass(frozen=True)
class OzakiResult:
    """One number of the Ozaki-scheme paper for ``splits`` slices of ``slice_format``: decimal digits
    gained over SGEMM in max relative error (``value``..``high``) at ``phi`` over ``sizes``, or a
    speed-up over DGEMM, or a time over SGEMM. ``fp32_over_fp64``: the GPU's FP32 rate over its FP64
    rate, which bounds the speed-up."""

    paper: str
    device: str
    quantity: str
    splits: int
    value: float
    high: float | None
    statistic: str
    sizes: tuple[int, ...]
    phi: float | None
    slice_format: str
    fp32_over_fp64: float | None
    library: str
    source: Citation
    flag: str | None = None
    note: str = ""


MethodRow = SplitKSpeedUp | DecompositionResult | OzakiResult


def half_unit(printed: str) -> float:
    """Half a unit in the last printed digit: the rounding a printed number carries."""
    return 0.5 * 10.0 ** Decimal(printed).as_tuple().exponent


def memory_problems(f: Figure, figures: Sequence[Figure]) -> list[str]:
    """The thesis's memory: a peak lies at or up to 1% above the schedule's own memory as published
    (inputs overwritten); a saving of RUM is recomputed from the peaks of the same size and level among
    ``figures``, to the printed digit."""
    (n,), level = f.sizes, f.level or 0
    if f.quantity == "peak_memory":
        model = strassen_memory(f.schedule, n, level, overwrite_a=True, overwrite_b=True, protect=False).total / 2**30
        if not model <= f.value <= 1.01 * model:
            return [f"{f.value:g} GiB for {f.schedule} level {level} at {n}; its memory model gives {model:.2f} GiB "
                    f"({units(strassen_memory(f.schedule, n, level, protect=False), n):g} quadrants)"]
        return []
    peaks = {p.schedule: p.value for p in figures if p.quantity == "peak_memory"
             and (p.paper, p.device, p.sizes, p.level) == (f.paper, f.device, f.sizes, f.level)}
    other = f.quantity.removeprefix("memory_saving_over_")
    if not {"rum", other} <= set(peaks):
        return [f"no published peaks of rum and {other} at {n}, level {level}, to check the saving against"]
    saving = 1 - peaks["rum"] / peaks[other]
    return [] if abs(saving - f.value) <= half_unit(f"{100 * f.value:g}") / 100 else \
        [f"the peaks give a saving of {100 * saving:.2f}%, not {100 * f.value:g}%"]


def _range_problems(value: float, high: float | None, statistic: str) -> list[str]:
    found = [] if statistic in STATISTICS else [f"statistic {statistic!r} is not one of {STATISTICS}"]
    if high is not None and high < value:
        found.append(f"range {value:g}..{high:g} is empty")
    if (high is not None) != (statistic == "range"):
        found.append(f"statistic {statistic!r} with high = {high}: a range needs both")
    return found


def splitk_problems(s: SplitKSpeedUp) -> list[str]:
    """Positive speed-up; a k range that runs upwards; a largest or smallest value; the
    "faster" statement is a bound of 1."""
    found = [] if s.speedup > 0 else [f"speed-up {s.speedup} is not positive"]
    if not 1 <= s.k[0] <= s.k[1]:
        found.append(f"k range {s.k} does not run upwards from 1")
    if s.statistic not in ("max", "min"):
        found.append(f"statistic {s.statistic!r}: a speed-up over a k range is its max or its min")
    if s.strict and (s.statistic != "min" or s.speedup != 1):
        found.append("a strict bound is the paper's 'faster in every setting': min > 1")
    return found


def gib(n: int, operands: int = 3, itemsize: int = 4) -> float:
    """GiB of ``operands`` N x N matrices of ``itemsize`` bytes (FP32 A, B and C by default)."""
    return operands * itemsize * n * n / 2**30


def decomposition_problems(d: DecompositionResult) -> list[str]:
    """Fractions lie in (0, 1); a largest N agrees with the data size printed beside it (A, B and C in
    FP32, in GiB, to the printed digit)."""
    found = _range_problems(d.value, d.high, d.statistic)
    if d.quantity not in DECOMPOSITION:
        found.append(f"quantity {d.quantity!r} is not one of {DECOMPOSITION}")
    if d.quantity in FRACTIONS and not 0 < d.value <= (d.high or d.value) < 1:
        found.append(f"{d.quantity} = {d.value:g} is not a fraction in (0, 1)")
    if d.quantity == "largest_n":
        itemsize = {"float32": 4, "float64": 8}.get(d.dtype)
        if itemsize is None or d.memory is None or d.memory_unit != "GiB":
            found.append("a largest N needs its FP32 or FP64 data size in GiB")
        elif abs(gib(int(d.value), itemsize=itemsize) - d.memory) > 0.5:
            found.append(f"A, B and C at N = {d.value:.0f} hold {gib(int(d.value), itemsize=itemsize):.2f} GiB, "
                         f"not the printed {d.memory:g}")
    if d.quantity == "speedup_two_gpus" and not 1 < d.value <= 2:
        found.append(f"two GPUs at {d.value:g}x one: outside (1, 2]")
    return found


def ozaki_problems(o: OzakiResult, rows: Sequence[MethodRow] = ()) -> list[str]:
    """Digits gained do not fall as splits grow (same phi and sizes, over ``rows``); a speed-up over
    DGEMM stays below the FP32/FP64 rate ratio over the s(s+1)/2 SGEMMs of s splits."""
    found = _range_problems(o.value, o.high, o.statistic)
    if o.quantity not in OZAKI:
        found.append(f"quantity {o.quantity!r} is not one of {OZAKI}")
    if o.splits < 2:
        found.append(f"{o.splits} splits: the scheme splits each operand at least twice")
    gemms = o.splits * (o.splits + 1) // 2
    if o.quantity == "speedup_over_dgemm" and o.fp32_over_fp64 and o.value > o.fp32_over_fp64 / gemms:
        found.append(f"{o.value:g}x DGEMM with {gemms} SGEMMs needs SGEMM over {o.value * gemms:.1f}x DGEMM's "
                     f"rate, above the GPU's {o.fp32_over_fp64:g}")
    if o.quantity == "digits_gained_over_sgemm":
        for r in rows:
            if (isinstance(r, OzakiResult) and (r.paper, r.quantity, r.phi, r.sizes) == (o.paper, o.quantity,
                                                                                          o.phi, o.sizes)
                    and r.splits < o.splits and (r.value > o.value or (r.high or r.value) > (o.high or o.value))):
                found.append(f"{o.splits} splits gain {o.value:g}-{o.high or o.value:g} digits, fewer than "
                             f"{r.splits} splits' {r.value:g}-{r.high or r.value:g}")
    return found
