"""Our Strassen measurements in the shapes the paper comparisons need: per-level speed-up sweeps, the sizes
where a level overtakes the one below, the best configuration at a size, the library's efficiency against
the device's peaks, and the memory of each schedule in quadrant units."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from modeling import hardware
from modeling.crossover import interpolated_crossing, last_upward_crossing

from ..core.csvio import ExportRow
from ..strassen.rows import DEFAULTS
from .exports import device, regime

QUADRANT_BYTES = 8     # FP64: one (N/2)^2 quadrant holds N^2 / 4 elements of 8 bytes


@dataclass(frozen=True)
class LevelSweep:
    """Per size, per level, the time and the speed-up over the library GEMM of its group."""

    device: str
    regime: str
    method: str
    times: dict[int, dict[int, float]]
    speedups: dict[int, dict[int, float]]
    rows: tuple[ExportRow, ...]

    def at(self, size: int, level: int | None = None) -> tuple[float, int] | None:
        """(speed-up, level) at ``size``: of ``level``, or of the best level measured; None if not measured."""
        found = self.speedups.get(size, {})
        if level is None:
            found = {lv: s for lv, s in found.items() if lv > 0}
            return (max(found.values()), max(found, key=found.__getitem__)) if found else None
        return (found[level], level) if level in found else None

    def boundary(self, level: int) -> tuple[float, int, int] | None:
        """Where ``level`` overtakes ``level - 1`` for good (the log of their time ratio interpolated linearly
        in N between the two measured sizes that bracket its last upward zero, as ``gemmlab levels`` finds
        boundaries), with those sizes; None where it does not within the sweep."""
        sizes = [n for n in sorted(self.times) if {level, level - 1} <= set(self.times[n])]
        gain = [math.log(self.times[n][level - 1] / self.times[n][level]) for n in sizes]
        i = last_upward_crossing(sizes, gain)
        if i is None:
            return None
        return interpolated_crossing(sizes, gain), sizes[i], sizes[i + 1]


def level_sweep(rows: Sequence[ExportRow], experiment: str = "level-validation") -> LevelSweep:
    """The sweep of one export's ``experiment`` rows (FP64, one method)."""
    mine = [r for r in rows if r.experiment == experiment and r.params.get("dtype") == "float64"]
    methods = {r.method for r in mine}
    if len(methods) != 1:
        raise ValueError(f"{experiment}: expected one configuration, got {sorted(methods)}")
    times: dict[int, dict[int, float]] = {}
    speedups: dict[int, dict[int, float]] = {}
    for r in mine:
        n, level = r.params["size"], r.params["level"]
        times.setdefault(n, {})[level] = r.value
        speedups.setdefault(n, {})[level] = float(r.meta["speedup"])
    return LevelSweep(device(mine), regime(mine), methods.pop(), times, speedups, tuple(mine))


@dataclass(frozen=True)
class Best:
    """The fastest configuration stored at one size: its speed-up, level and name, and its row."""

    speedup: float
    level: int
    method: str
    row: ExportRow


def best_configurations(rows: Sequence[ExportRow], regime_name: str = "sustained") -> dict[int, Best]:
    """Per size, the configuration of ``strassen-speedup`` with the highest speed-up over its group's
    DGEMM, in one power regime."""
    out: dict[int, Best] = {}
    for r in rows:
        p = r.params
        if r.experiment != "strassen-speedup" or r.method in ("gemm", DEFAULTS) or p.get("regime") != regime_name:
            continue
        s = r.meta.get("speedup")
        if s is not None and (p["size"] not in out or s > out[p["size"]].speedup):
            out[p["size"]] = Best(float(s), p["level"], r.method, r)
    return dict(sorted(out.items()))


def calibration(rows: Sequence[ExportRow]) -> dict[int, dict[str, float]]:
    """FP64 Gemm and Geam seconds (``gemm_s``, ``geam_s``) and rates by size, from ``calibration`` rows."""
    out: dict[int, dict[str, float]] = {}
    for r in rows:
        if r.experiment == "calibration" and r.params.get("dtype") == "float64":
            point = out.setdefault(r.params["size"], {"size": r.params["size"]})
            point[f"{r.method}_s"] = r.value
            point[f"{r.method}_rate"] = 1e12 * r.meta["tflops"] if r.method == "gemm" else 1e9 * r.meta["gbs"]
    return {n: p for n, p in sorted(out.items()) if {"gemm_s", "geam_s"} <= set(p)}


def efficiency(rows: Sequence[ExportRow], method: str, from_size: int) -> tuple[float, float, list[int]]:
    """The lowest and highest measured rate of ``method`` (gemm: FLOP/s, geam: bytes/s) over the device's
    peak (the hardware table's) from ``from_size`` on, and the sizes they span."""
    gpu = hardware.lookup(device(r for r in rows if r.experiment == "calibration"))
    peak = gpu.peak_flops if method == "gemm" else gpu.bandwidth
    found = {n: p[f"{method}_rate"] / peak for n, p in calibration(rows).items() if n >= from_size}
    if not found:
        raise ValueError(f"no calibration of {method} from N = {from_size}")
    return min(found.values()), max(found.values()), sorted(found)


def memory_units(rows: Sequence[ExportRow], level: int) -> dict[str, tuple[float, int]]:
    """Per schedule, the measured peak of A, B, C and what the product allocated beyond them at ``level``,
    in units of one (N/2)^2 FP64 quadrant (12 for A, B and C alone), with the N it was measured at."""
    out = {}
    for r in rows:
        p = r.params
        if r.experiment == "strassen-memory" and p["level"] == level and p["dtype"] == "float64":
            n = p["size"]
            out[r.method] = ((3 * n * n * 8 + r.value) / (QUADRANT_BYTES * (n // 2) ** 2), n)
    return out


def memory_by_level(rows: Sequence[ExportRow]) -> dict[str, dict[int, float]]:
    """Per schedule, per level, the measured memory in quadrant units (see :func:`memory_units`)."""
    levels = sorted({r.params["level"] for r in rows if r.experiment == "strassen-memory"})
    out: dict[str, dict[int, float]] = {}
    for level in levels:
        for schedule, (found, _) in memory_units(rows, level).items():
            out.setdefault(schedule, {})[level] = found
    return out


def memory_parts(rows: Sequence[ExportRow], schedule: str, level: int) -> str:
    """What the measured product allocated beyond A, B and C, by purpose, in quadrant units (the memory
    model's split, which the measurement matched exactly)."""
    for r in rows:
        p = r.params
        if r.experiment == "strassen-memory" and (r.method, p["level"], p["dtype"]) == (schedule, level, "float64"):
            quad = QUADRANT_BYTES * (p["size"] // 2) ** 2
            parts = [f"{r.meta['model'][k] / quad:g} for {k}" for k in ("support", "copies", "temporaries")
                     if r.meta["model"][k]]
            return "quadrants: " + " + ".join(["12 for A, B and C", *parts])
    raise ValueError(f"no strassen-memory row of {schedule} at level {level}")
