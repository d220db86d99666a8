"""Device profiles from measurements: the predictor's inputs and the level tables ``level="auto"`` reads.

A profile (:mod:`gpu.profile`) is plain data. This module makes its content
from a device's measured curves and launch overhead, and turns a profile back
into the recursive predictor:

* ``calibration`` and ``context_calibration``: Gemm(x) and Geam(x) in seconds
  at measured sizes (the plain and the in-context sweeps), as columns;
* ``launch_ms``: host time per library call, per configuration, with a
  ``default`` for the others, and where each came from;
* ``levels``: for every schedule and fusion choice, the recursive predictor's
  best level as a table of the sizes where it changes, found on a geometric
  scan and refined to the integer by bisection.

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

from .fits import measured_curves
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
        model = replace(model, inner_gemm=inner_gemm, inner_geam=inner_geam)
    return model


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


def _best(model: RecursiveModel, size: int, deepest: int) -> int:
    return model.level(size, range(min(deepest, int(math.log2(size))) + 1))


def level_table(model: RecursiveModel, deepest: int, lo: int = TABLE_RANGE[0],
                hi: int = TABLE_RANGE[1]) -> list[list[int]]:
    """[[first size, level], ...]: the model's best level from each size on, over [lo, hi]."""
    grid = sorted({int(x) for x in np.geomspace(lo, hi, SCAN_POINTS)})
    levels = [_best(model, n, deepest) for n in grid]
    table = [[0, 0], [grid[0], levels[0]]] if levels[0] else [[0, 0]]
    for (a, la), (b, lb) in zip(zip(grid, levels), zip(grid[1:], levels[1:])):
        if la == lb:
            continue
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (mid, b) if _best(model, mid, deepest) == la else (a, mid)
        table.append([b, lb])
    return table


def level_tables(profile: Mapping[str, Any]) -> dict[str, list[list[int]]]:
    """A level table per configuration key (``rum``, ``rum+fused``, ...) of every schedule."""
    tables = {}
    for schedule in SCHEDULES:
        deepest = deepest_level(schedule)
        for fused in (False, True):
            tables[profile_key(schedule, fused)] = level_table(predictor(profile, schedule, fused), deepest)
    return tables


def build_profile(backend: str, device: str, *, calibration: Sequence[Mapping[str, Any]],
                  context_calibration: Sequence[Mapping[str, Any]] = (), launch_ms: Mapping[str, float] | None = None,
                  launch_source: Mapping[str, str] | None = None, asynchronous: bool = False,
                  **record: Any) -> dict[str, Any]:
    """The content of a device profile (see the module notes); ``record``: provenance kept as is."""
    return complete_profile({"backend": backend, "device": device, **record, "asynchronous": bool(asynchronous),
                             "calibration": columns(calibration), "context_calibration": columns(context_calibration),
                             "launch_ms": dict(launch_ms or {}), "launch_source": dict(launch_source or {})})


def complete_profile(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` (a profile's inputs, curves as columns) with its level tables added."""
    if not doc.get("calibration"):
        raise ValueError(f"a profile of {doc.get('device')} [{doc.get('backend')}] needs a calibration of at "
                         "least two sizes")
    return {**doc, "levels": level_tables(doc)}
