"""The one answer of ``gemmlab predict``: a level, the range its models span, which model is trusted and
why, what the answer rests on (a measurement, the calibrated curves, an extrapolation of them, or a
model of no measurement), and whether the product fits in the GPU's memory at all.

The models can disagree (the thesis rule and the recursive predictor; the members of the transfer
ensemble): the answer is one level, from the model trusted for the source (:data:`TRUSTED`), with the
range all of them span. For a stored calibration it is the level ``level="auto"`` runs: the recursive
predictor among the levels the device's measurements support (:class:`modeling.evidence.Evidence`).
A product whose operands do not fit in the GPU's memory has no level on that GPU: the answer says so,
and where it can run instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gpu.strassen import matmul_memory
from modeling.evidence import Evidence
from modeling.recursive import RecursiveModel

ITEMSIZE = 8
#: The model each source's answer comes from, and why it is trusted over the others.
TRUSTED = {
    "stored": "it prices every level from this device's measured Gemm and Geam, the calls inside a level and the "
              "launch overhead (the thesis rule doubles one crossover of fitted curves), and keeps to the levels the "
              "device's measurements support, as level='auto' does",
    "coefficients": "it prices every level from the given curves with the given launch overhead (without one it "
                    "agrees with the thesis rule)",
    "transfer": "it counts every level's additions and the transferred launch overhead, which the thesis rule's "
                "doubling of P leaves out; the range spans the thesis rule and the transfer ensemble (refits leaving "
                "out each training GPU, and the known launch overheads' range)",
    "analytic": "peak rates at measured efficiencies, level by level, no launch overhead (the thesis rule doubles "
                "its one-level crossover)",
}


#: The trusted model of each source, by name.
MODEL_NAMES = {"stored": "recursive predictor within the measurements", "coefficients": "recursive predictor",
               "transfer": "recursive predictor of the pooled transfer fit", "analytic": "analytic model"}


def byte_text(n: float) -> str:
    """Bytes in decimal units, as datasheets give memory: ``24 TB``, ``141 GB``."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


@dataclass(frozen=True)
class Memory:
    """An n x n x n FP64 product against one GPU's memory: A, B and C, and each level's whole product
    (:func:`gpu.strassen.matmul_memory`, inputs kept as ``matmul`` keeps them by default)."""

    device: str
    device_bytes: float
    source: str
    size: int
    level_bytes: dict[int, int]

    @classmethod
    def of(cls, device: str, device_bytes: float, source: str, size: int, levels: Iterable[int],
           schedule: str = "rum") -> Memory:
        return cls(device, float(device_bytes), source, size,
                   {lv: matmul_memory(schedule, size, size, size, lv, ITEMSIZE).total for lv in levels})

    @property
    def operands_bytes(self) -> int:
        return 3 * self.size * self.size * ITEMSIZE

    @property
    def fits(self) -> bool:
        return self.operands_bytes <= self.device_bytes

    @property
    def levels_that_fit(self) -> list[int]:
        return [lv for lv, b in self.level_bytes.items() if b <= self.device_bytes]

    def text(self) -> str:
        need = (f"A, B and C need {byte_text(self.operands_bytes)} ({byte_text(self.operands_bytes / 3)} each) "
                f"of the {self.device}'s {byte_text(self.device_bytes)} ({self.source})")
        if not self.fits:
            return (f"{need}: the product does not fit on one {self.device}. Run it out of core "
                    "(gpu.outofcore.matmul streams panels of host operands through the GPU; gpu.multigpu spreads its "
                    "blocks over several GPUs); its block products are smaller than N, so N's level is not theirs")
        missing = [lv for lv in self.level_bytes if lv not in self.levels_that_fit]
        if missing:
            return (f"{need}; level {missing[0]} and deeper would need {byte_text(self.level_bytes[missing[0]])} "
                    "with their temporaries, more than the device has")
        return f"{need}: every level fits"

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "device_bytes": self.device_bytes, "source": self.source,
                "operands_bytes": self.operands_bytes, "fits": self.fits, "levels_that_fit": self.levels_that_fit,
                "bytes_by_level": self.level_bytes, "note": self.text()}


@dataclass(frozen=True)
class Answer:
    """``level`` (None: none on this GPU, the operands do not fit), the ``range`` the models span, the
    trusted ``model`` and why, and what it rests on: ``basis`` is ``measured`` (a level sweep timed this
    size), ``calibrated`` (its curves read only at measured sizes), ``extrapolated`` (beyond them) or
    ``model`` (no measurement of this device), explained in ``basis_text``."""

    level: int | None
    range: tuple[int, int]
    model: str
    reason: str
    basis: str
    basis_text: str
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "range": list(self.range)}


def levels_of(size: int, max_level: int) -> range:
    """Levels up to ``max_level`` with at least one row at the bottom."""
    return range(min(max_level, max(int(math.log2(size)), 0)) + 1)


def basis(kind: str, model: RecursiveModel, size: int, level: int, found: Evidence | None) -> tuple[str, str]:
    """What a level at ``size`` rests on, as a word and a sentence."""
    if kind != "stored" or found is None:
        return "model", "no measurement of this device: every figure is modelled"
    if size in found.sweep:
        return "measured", f"the level sweep timed N = {size}"
    lo, hi = found.calibrated or (None, None)
    if any(model.extrapolated(size, lv) for lv in {0, level}):
        return "extrapolated", (f"N = {size} or its level's bottom products lie outside the calibrated sizes "
                                f"{lo:.0f}-{hi:.0f}: the curves are extrapolated, not a measurement-backed answer")
    return "calibrated", f"read from the curves at calibrated sizes ({lo:.0f}-{hi:.0f})"


def answer(kind: str, model: RecursiveModel, size: int, max_level: int, others: Mapping[str, int],
           found: Evidence | None = None, memory: Memory | None = None) -> Answer:
    """The one answer of a prediction at ``size`` by source ``kind`` (a key of :data:`TRUSTED`), from its
    trusted ``model``, the other models' levels (``others``: name -> level) and, for a stored calibration,
    what the device's measurements support (``found``)."""
    levels = levels_of(size, max_level)
    if kind == "stored" and found is not None:
        level = found.level(model, size, levels[-1])
        reason = f"{TRUSTED[kind]} ({found.reason(model, size, levels[-1])})"
    else:
        level, reason = model.level(size, levels), TRUSTED[kind]
    note = None
    if memory is not None and not memory.fits:
        level, note = None, memory.text()
    elif memory is not None and level not in memory.levels_that_fit:
        fitting = [lv for lv in levels if lv in memory.levels_that_fit]
        level, note = model.level(size, fitting), memory.text()
    spread = [*others.values(), *([] if level is None else [level])]
    word, text = basis(kind, model, size, 0 if level is None else level, found)
    return Answer(level, (min(spread), max(spread)), MODEL_NAMES[kind], reason, word, text, note)


def speedup_line(payload: Mapping[str, Any]) -> list[str]:
    """Each level's predicted speed-up, marked where it extrapolates the calibrated curves (*) or is held
    to its operation-count bound (^), with what the marks mean."""
    marks = {lv: ("*" if payload["extrapolated"].get(lv) else "") + ("^" if lv in payload["capped"] else "")
             for lv in payload["speedups"]}
    lines = ["predicted speed-up by level: " + ", ".join(f"L{lv} {s:.3f}{marks[lv]}"
                                                         for lv, s in payload["speedups"].items())]
    if any("*" in m for m in marks.values()):
        lo, hi = payload["calibrated_range"]
        lines.append(f"  * extrapolated: reads the curves beyond the calibrated sizes {lo:.0f}-{hi:.0f}, "
                     "not a measurement-backed figure")
    if any("^" in m for m in marks.values()):
        lines.append("  ^ held to the operation-count bound (8/7)^L: the curves alone give more, which no level can")
    return lines


def answer_lines(payload: Mapping[str, Any]) -> list[str]:
    """The memory check and the one answer, as text."""
    a = payload["answer"]
    lo, hi = a["range"]
    span = f"{lo}" if lo == hi else f"{lo}-{hi}"
    level = "none on one GPU" if a["level"] is None else f"level {a['level']}"
    lines = [] if payload.get("memory") is None else [f"memory: {payload['memory']['note']}"]
    return lines + [f"answer: {level} (the models span {span}), by the {a['model']}: {a['reason']}",
                    f"  rests on: {a['basis_text']}"]
