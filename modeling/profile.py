"""Device profiles from measurements: the predictor's inputs and the level tables ``level="auto"`` reads.

A profile (:mod:`gpu.profile`) is plain data. This module makes its content
from a device's measured curves and launch overhead, and turns a profile back
into the recursive predictor:

* ``calibration`` and ``context_calibration``: Gemm(x) and Geam(x) in seconds
  at measured sizes (the plain and the in-context sweeps), as columns;
* ``launch_ms``: host time per library call, per configuration, with a
  ``default`` for the others, and where each came from;
* ``level_sweep``: per configuration, the Strassen times the device was measured
  at (size, level, time over the GEMM of its group), where a level sweep is stored;
* ``levels``: for every schedule and fusion choice, the recursive predictor's
  best level among those the measurements support (:mod:`modeling.evidence`:
  never a level the sweep measured slower, never deeper than the evidence beyond
  the measured sizes), as a table of the sizes where it changes, found on a
  geometric scan and refined to the integer by bisection.

The library looks a level up in the table and never evaluates a model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from gpu.strassen import SCHEDULES, check_schedule
from gpu.strassen.auto import MAX_LEVEL, profile_key

from .crossover import speedup_bound
from .evidence import RESOLUTION, Evidence
from .fits import InContextCurve, measured_curves
from .recursive import RecursiveModel

#: Sizes the level tables cover: beyond the last change the deepest level found holds.
TABLE_RANGE = (16, 2**20)
SCAN_POINTS = 100
CURVES = ("calibration", "context_calibration")


def columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[float]] | None:
    """Calibration rows (``size``, ``gemm_s``, ``geam_s``) as the profile's columns; None if fewer than two."""
    if len(rows) < 2:
        return None
    rows = sorted(rows, key=lambda r: r["size"])
    return {"size": [int(r["size"]) for r in rows], "gemm_s": [float(r["gemm_s"]) for r in rows],
            "geam_s": [float(r["geam_s"]) for r in rows]}


def _rows(cols: Mapping[str, Sequence[float]]) -> list[dict[str, float]]:
    return [{"size": n, "gemm_s": g, "geam_s": a} for n, g, a in zip(cols["size"], cols["gemm_s"], cols["geam_s"])]


def predictor(profile: Mapping[str, Any], schedule: str = "rum", fused: bool = False) -> RecursiveModel:
    """The recursive model of a profile for one configuration (ValueError without a calibration)."""
    if not profile.get("calibration"):
        raise ValueError("the profile holds no calibration; run gemmlab calibrate on that device")
    gemm, geam = measured_curves(_rows(profile["calibration"]))
    launch = profile.get("launch_ms", {})
    model = RecursiveModel(gemm, geam, schedule, fused, float(launch.get(profile_key(schedule, fused),
                                                                         launch.get("default", 0.0))),
                           overlap=bool(profile.get("asynchronous", False)))
    if profile.get("context_calibration"):
        inner_gemm, inner_geam = measured_curves(_rows(profile["context_calibration"]))
        model = replace(model, inner_gemm=InContextCurve(inner_gemm, gemm), inner_geam=InContextCurve(inner_geam, geam))
    return model


def sweep_columns(points: Sequence[tuple[int, int, float]]) -> dict[str, list[float]]:
    """Level-sweep points (size, level, time over the GEMM of the size's group) as a profile's columns."""
    points = sorted(points)
    return {"size": [int(p[0]) for p in points], "level": [int(p[1]) for p in points],
            "over_gemm": [float(p[2]) for p in points]}


def evidence(profile: Mapping[str, Any], schedule: str = "rum", fused: bool = False) -> Evidence:
    """What the profile's measurements support for one configuration: its calibrated sizes and its
    stored level sweep (level 0 at 1 wherever a level was timed against the GEMM of its group), less
    the sizes whose group is not credible (:func:`credible`)."""
    cal = profile.get("calibration") or {}
    calibrated = (float(min(cal["size"])), float(max(cal["size"]))) if cal.get("size") else None
    cols = (profile.get("level_sweep") or {}).get(profile_key(schedule, fused)) or {}
    sweep: dict[int, dict[int, float]] = {}
    for n, level, over in zip(cols.get("size", ()), cols.get("level", ()), cols.get("over_gemm", ())):
        sweep.setdefault(int(n), {0: 1.0})[int(level)] = float(over)
    return Evidence(calibrated, {n: t for n, t in sweep.items() if credible(t, schedule, fused)})


def credible(times: Mapping[int, float], schedule: str, fused: bool) -> bool:
    """Whether one size's measured group ({level: time over its GEMM}) is possible: no level faster than its
    operation count allows (:func:`modeling.crossover.speedup_bound`, with :data:`modeling.evidence.RESOLUTION`
    to spare). A group that breaks it was disturbed (on a loaded CPU, a 128 x 128 GEMM that waited out a
    time slice read 19x a level-1 product's time), and says nothing about the levels."""
    return all(times[0] / t <= (1 + RESOLUTION) * speedup_bound(schedule, level, fused)
               for level, t in times.items() if level)


def deepest_level(schedule: str) -> int:
    """The most levels ``schedule`` can run (every level above the bottom must recurse)."""
    level = 0
    while level < MAX_LEVEL:
        try:
            check_schedule(schedule, level + 1)
        except ValueError:
            break
        level += 1
    return level


def _best(model: RecursiveModel, size: int, deepest: int, found: Evidence) -> int:
    return found.level(model, size, min(deepest, int(math.log2(size))))


def level_table(model: RecursiveModel, deepest: int, lo: int = TABLE_RANGE[0],
                hi: int = TABLE_RANGE[1], found: Evidence | None = None) -> list[list[int]]:
    """[[first size, level], ...]: the model's best level from each size on, over [lo, hi], among the
    levels ``found`` (the device's measurements) supports; every level where it is None."""
    found = found or Evidence()
    grid = sorted({int(x) for x in np.geomspace(lo, hi, SCAN_POINTS)} | {n for n in found.edges() if lo <= n <= hi})
    levels = [_best(model, n, deepest, found) for n in grid]
    table = [[0, 0], [grid[0], levels[0]]] if levels[0] else [[0, 0]]
    for (a, la), (b, lb) in zip(zip(grid, levels), zip(grid[1:], levels[1:])):
        if la == lb:
            continue
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (mid, b) if _best(model, mid, deepest, found) == la else (a, mid)
        table.append([b, lb])
    return table


def level_tables(profile: Mapping[str, Any]) -> dict[str, list[list[int]]]:
    """A level table per configuration key (``rum``, ``rum+fused``, ...) of every schedule, within what
    the profile's measurements support for that configuration (:func:`evidence`)."""
    tables = {}
    for schedule in SCHEDULES:
        deepest = deepest_level(schedule)
        for fused in (False, True):
            tables[profile_key(schedule, fused)] = level_table(predictor(profile, schedule, fused), deepest,
                                                               found=evidence(profile, schedule, fused))
    return tables


def build_profile(backend: str, device: str, *, calibration: Sequence[Mapping[str, Any]],
                  context_calibration: Sequence[Mapping[str, Any]] = (), launch_ms: Mapping[str, float] | None = None,
                  launch_source: Mapping[str, str] | None = None, asynchronous: bool = False,
                  level_sweep: Mapping[str, Sequence[tuple[int, int, float]]] | None = None,
                  **record: Any) -> dict[str, Any]:
    """The content of a device profile (see the module notes); ``level_sweep``: per configuration key,
    (size, level, time over the GEMM of its group) points; ``record``: provenance kept as is."""
    return complete_profile({"backend": backend, "device": device, **record, "asynchronous": bool(asynchronous),
                             "calibration": columns(calibration), "context_calibration": columns(context_calibration),
                             "launch_ms": dict(launch_ms or {}), "launch_source": dict(launch_source or {}),
                             "level_sweep": {k: sweep_columns(v) for k, v in (level_sweep or {}).items()}})


def complete_profile(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` (a profile's inputs, curves as columns) with its level tables added."""
    if not doc.get("calibration"):
        raise ValueError(f"a profile of {doc.get('device')} [{doc.get('backend')}] needs a calibration of at "
                         "least two sizes")
    return {**doc, "levels": level_tables(doc)}
