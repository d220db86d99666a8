"""Otsuka's and the thesis's published Strassen numbers beside ours.

Ours: the sustained level sweeps of the H100 and the H200 (``rum+fused``, levels 0-4 interleaved with
DGEMM per size), the H100's best configuration per size (``strassen-speedup``, sustained), its
calibration (library efficiency) and its measured memory per schedule (``strassen-memory``).
Otsuka's schedule and the thesis's 2-stream RUM are not among ours: the comparisons name the
configuration on each side, and the gains over Lai's and Otsuka's schedules are "not measured".
"""

from __future__ import annotations

from typing import Any

from modeling import published as pub

from .compare import Comparison, not_measured
from .exports import FILES, Exports
from .sweeps import LevelSweep, best_configurations, efficiency, level_sweep, memory_parts, memory_units

DEVICES = {"H100": "h100-levels", "H200": "h200-levels"}
GIB = 2**30


def sweeps(ex: Exports, devices: tuple[str, ...] = ("H100", "H200")) -> dict[str, LevelSweep]:
    return {d: level_sweep(ex.rows(DEVICES[d])) for d in devices}


def cited(row: Any, **fields: Any) -> Comparison:
    """A comparison of a published ``row``: its paper, device and citation filled in."""
    return Comparison(paper=row.paper, paper_device=row.device, citation=str(row.source), where=row.source.where,
                      **fields)


def _sweep_source(sw: LevelSweep) -> str:
    return f"{FILES[DEVICES[sw.device]]} ({sw.method})"


def speedup(row: Any, sw: LevelSweep) -> Comparison:
    """The speed-up at the row's size, at its level (or our best level where it names none)."""
    found = sw.at(row.size, row.level)
    level = f"level {row.level}" if row.level else "best level"
    ours = {"value": found[0], "high": None, "match": f"same N, {level}"
            + ("" if row.level else f" (ours: level {found[1]})")} if found else not_measured(
        f"N = {row.size} not in the {sw.device} sweep")
    return cited(row, quantity=f"speed-up over DGEMM, {level}", point=f"N = {row.size}", paper_value=row.speedup,
                 paper_high=None, statistic="value", device=sw.device, regime=sw.regime, source=_sweep_source(sw),
                 note=f"paper: {row.schedule} schedule, {row.library}; ours: {sw.method}, sequential", **ours)


def boundary(row: Any, sw: LevelSweep) -> Comparison:
    """The size where the row's level overtakes the one below, interpolated between measured sizes."""
    what = "crossover with DGEMM (level 1)" if row.level == 1 else f"level {row.level} overtakes {row.level - 1}"
    if row.schedule.endswith("parallel"):
        ours = not_measured("no 2-stream schedule in our sweeps")
    elif (found := sw.boundary(row.level)) is None:
        ours = not_measured(f"level {row.level} never overtakes {row.level - 1} in the {sw.device} sweep")
    else:
        ours = {"value": found[0], "high": None,
                "match": f"interpolated between measured N = {found[1]} and {found[2]}"}
    return cited(row, quantity=what, point=f"level {row.level}", paper_value=row.size, paper_high=None,
                 statistic="about" if row.approximate else "value", device=sw.device, regime=sw.regime,
                 source=_sweep_source(sw), fmt=",.0f", note=f"paper: {row.schedule} schedule", **ours)


def efficiency_row(row: Any, ex: Exports, sw: LevelSweep) -> Comparison:
    """Otsuka's measured-over-predicted rate (the library against the peak) beside ours over the same sizes."""
    method = row.quantity.split("_")[0]
    lo, hi, sizes = efficiency(ex.rows(DEVICES[sw.device]), method, row.sizes[0])
    peak = "peak FP64 FLOP/s" if method == "gemm" else "memory bandwidth (3 accesses of 8 bytes per element)"
    return cited(row, quantity=f"{method.upper()} rate over the {peak}", point=f"N >= {row.sizes[0]}",
                 paper_value=row.value, paper_high=None, statistic="value", device=sw.device, value=lo, high=hi,
                 match=f"the paper's sizes: ours lowest to highest over the calibrated N = {sizes[0]}-{sizes[-1]}",
                 regime=sw.regime,
                 source=f"{FILES[DEVICES[sw.device]]} (calibration)", note="ours against the hardware table's peak")


def unmeasured(row: Any, device: str, why: str, quantity: str, point: str, fmt: str = ".1%") -> Comparison:
    return cited(row, quantity=quantity, point=point, paper_value=row.value, paper_high=row.high,
                 statistic="range" if row.high is not None else "value", device=device, regime="", source="",
                 fmt=fmt, **not_measured(why))


def otsuka(ex: Exports) -> list[Comparison]:
    """Otsuka's V100: 1.124x at 14336 (level 2), equal at 5200, the library's efficiency, the gains over Lai."""
    data, found = pub.load(), sweeps(ex)
    mine = lambda rows: [r for r in rows if r.paper == "otsuka2020" and r.device == "V100"]
    out = [speedup(s, sw) for s in mine(data.speedups) for sw in found.values()]
    out += [boundary(b, sw) for b in mine(data.boundaries) for sw in found.values()]
    for f in mine(data.figures):
        if f.quantity.endswith("measured_over_predicted"):
            out += [efficiency_row(f, ex, sw) for sw in found.values()]
        elif f.quantity == "gain_over_lai":
            sizes = "-".join(str(n) for n in f.sizes)
            out.append(unmeasured(f, "H100", "Lai's schedule is not timed in our sweeps",
                                  f"gain of {f.schedule} over Lai", f"N = {sizes}"))
        elif f.quantity == "concurrency_vanishes_above":
            out.append(unmeasured(f, "H100", "concurrent library GEMMs are not timed in our sweeps",
                                  "N above which concurrent GEMMs stop overlapping", "", ",.0f"))
    return out


def best(row: Any, ex: Exports) -> Comparison:
    """The H100's best configuration of the ``strassen-speedup`` export at the row's size."""
    rows = ex.rows("h100-strassen")
    found = best_configurations(rows).get(row.size)
    ours = {"value": found.speedup, "high": None, "match": f"same N (ours: {found.method}, level {found.level})"} \
        if found else not_measured(f"N = {row.size} not in the strassen-speedup export")
    return cited(row, quantity="speed-up over DGEMM, best configuration", point=f"N = {row.size}",
                 paper_value=row.speedup, paper_high=None, statistic="value", device="H100", regime="sustained",
                 source=FILES["h100-strassen"], note=f"paper: {row.schedule}, {row.library}", **ours)


def memory(row: Any, ex: Exports) -> Comparison:
    """The thesis's peak memory or RUM's saving, in quadrant units, beside ours at our N."""
    (n,), level = row.sizes, row.level
    ours = memory_units(ex.rows("h100-memory"), level)
    common = {"device": "H100", "regime": "", "source": f"{FILES['h100-memory']} (inputs preserved)"}
    scaled = f"scaled: at a fixed level each schedule's memory is a fixed multiple of N^2 (paper N = {n}, ours " \
             f"N = {ours['rum'][1]})"
    if row.quantity == "peak_memory":
        paper = row.value * GIB / (8 * (n // 2) ** 2)
        value = ours[row.schedule][0]
        note = f"paper {row.value:g} GiB at N = {n}, inputs overwritten; ours, inputs kept: " \
               + memory_parts(ex.rows("h100-memory"), row.schedule, level)
        return cited(row, quantity=f"peak memory, {row.schedule} level {level}, in (N/2)^2 quadrants",
                     point=f"level {level}", paper_value=paper, paper_high=None, statistic="value", value=value,
                     high=None, match=scaled, fmt=".3f", note=note, **common)
    other = row.quantity.removeprefix("memory_saving_over_")
    saving = 1 - ours["rum"][0] / ours[other][0]
    return cited(row, quantity=f"memory saved by RUM against {other}, level {level}", point=f"level {level}",
                 paper_value=row.value, paper_high=None, statistic="value", value=saving, high=None, match=scaled,
                 fmt=".2%", note="ours keeps A and B, so RUM takes a separate support where the thesis's "
                                 "overwrites them: " + memory_parts(ex.rows("h100-memory"), "rum", level), **common)


def thesis(ex: Exports) -> list[Comparison]:
    """The thesis's speed-ups (A100, V100, P100), level boundaries, gains and memory table, beside the H100."""
    data, (sw,) = pub.load(), sweeps(ex, ("H100",)).values()
    mine = lambda rows: [r for r in rows if r.paper == "thesis2023"]
    out = [c for s in mine(data.speedups) for c in (speedup(s, sw), best(s, ex))]
    out += [boundary(b, sw) for b in mine(data.boundaries)]
    for f in mine(data.figures):
        if f.quantity.startswith(("peak_memory", "memory_saving")):
            out.append(memory(f, ex))
        else:
            other = f.quantity.removeprefix("gain_over_")
            out.append(unmeasured(f, "H100", f"{other.capitalize()}'s schedule is not timed in our sweeps",
                                  f"gain of {f.schedule} over {other.capitalize()}, level {f.level}",
                                  f"N = {f.sizes[0]}"))
    return out
