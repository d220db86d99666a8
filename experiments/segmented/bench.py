"""The segmented launcher against the same kernel on whole arrays: the experiment ``segmented``.

Per point (:mod:`experiments.segmented.points`) one interleaved group times, on the same operands:

* ``whole`` (the baseline) and ``translated``: :func:`gpu.segmented.run_device` on device-resident A, B
  and C, the plain kernel with the plain and the translating accessor; their time ratio is the
  index-translation overhead, with no transfer in it;
* ``1d`` and ``2d``: the executor :func:`gpu.segmented.run` on the tasks of
  ``modeling.decomposition.plan_segments`` with M segments, host memory to host memory.

Launches are checked and planned before anything is timed (the timed region holds the product only). Each
method's product is checked once first, on sampled rows of C against a float64 product of those rows, within
gamma_(N+2) (the inputs are positive, so that is the classical bound), so a wrong product is never stored.
On NumPy the kernel is emulated (see :data:`experiments.segmented.report.EMULATION_NOTE`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from gpu.backend import Backend
from gpu.segmented import FAMILY, TILE, launches, run, run_device
from modeling.decomposition import plan_segments

from ..core.lab import Operands, require_correct, row_error, sample_rows, time_group
from ..core.registry import Context, experiment
from ..core.summary import Summary, spread
from ..core.sweep import group_sweep, store_comparison
from ..core.timing import Comparison
from .points import BUFFERS, PLANS, Point, custom_points, fitting_points, largest_sizes, memory_now, point_params
from .report import (
    EMULATION,
    EXPERIMENT,
    KERNEL,
    METHODS,
    ONE_D,
    TRANSLATED,
    TWO_D,
    WHOLE,
    SegmentedRow,
    segmented_rows,
    segmented_summary,
)

INPUTS = "uniform [0, 1), drawn once per point on the host (no method writes A or B)"


class Arrays:
    """One point's operands: A, B and C on the host, and copies of A and B (and a C) on the device."""

    def __init__(self, backend: Backend, point: Point, seed: int = 7) -> None:
        rng = np.random.default_rng(seed)
        n, dtype = point.n, point.dtype
        self.backend, self.point = backend, point
        self.A, self.B = (rng.random((n, n), dtype=dtype) for _ in range(2))
        self.C = np.empty((n, n), dtype)
        self.dA, self.dB = backend.asarray(self.A), backend.asarray(self.B)
        self.dC = backend.xp.empty((n, n), dtype)

    def works(self) -> dict[str, Callable[[], Any]]:
        """The timed work of each method (launches planned and checked here, not in the timed region)."""
        be, p = self.backend, self.point
        ops = be.ops(FAMILY)
        plans = {name: launches(plan_segments(p.n, p.m, two_d, TILE, p.itemsize).tasks, p.n, TILE)
                 for name, two_d in ((ONE_D, False), (TWO_D, True))}
        return {WHOLE: partial(run_device, be, "whole", self.dA, self.dB, self.dC),
                TRANSLATED: partial(run_device, be, "translated", self.dA, self.dB, self.dC),
                **{name: partial(run, ops, found, self.A, self.B, self.C, BUFFERS) for name, found in plans.items()}}

    def output(self, method: str) -> Any:
        return self.dC if method in (WHOLE, TRANSLATED) else self.C


def checked_works(arrays: Arrays, where: str) -> tuple[dict[str, Callable[[], Any]], dict[str, float]]:
    """:meth:`Arrays.works`, each run once on an output full of NaN and checked on sampled rows (a wrong
    product raises RuntimeError before anything is timed), and the largest relative error of each."""
    be, n = arrays.backend, arrays.point.n
    works = arrays.works()
    rows = sample_rows(n)
    expected = arrays.A[rows].astype(np.float64) @ arrays.B.astype(np.float64)
    u = np.finfo(arrays.point.dtype).eps / 2
    tolerance = (n + 2) * u / (1 - (n + 2) * u)
    errors = {}
    for name, work in works.items():
        out = arrays.output(name)
        out.fill(np.nan)
        work()
        be.synchronize()
        got = np.asarray(be.to_numpy(out[rows if isinstance(out, np.ndarray) else be.asarray(rows)]), dtype=np.float64)
        errors[name] = require_correct(row_error(got, expected), f"{name} at {where}", tolerance,
                                       f"on {len(rows)} sampled rows, largest relative error")
    return works, errors


def store_group(ctx: Context, point: Point, result: Comparison, errors: Mapping[str, float]) -> int:
    """Every method of a timed group as a row, with its time over the group's whole kernel; how many."""
    whole = result.timings[WHOLE].median
    executor = EMULATION if ctx.backend.name == "numpy" else KERNEL
    work = 2 * point.n**3
    return store_comparison(ctx, EXPERIMENT, point_params(point, ctx.regime), result, lambda name: {
        "flops": work, "tflops": work / result.timings[name].median / 1e12,
        "over_whole": result.timings[name].median / whole, "whole_s": whole, "check_error": errors[name],
        "check_rows": len(sample_rows(point.n)), "executor": executor, "buffers": BUFFERS, "tile": TILE,
        "inputs": INPUTS})


def measure_point(ctx: Context, point: Point) -> int:
    """Draw the operands, plan and check every method, time them interleaved (baseline: ``whole``) and store
    the group; rows stored."""
    arrays = Arrays(ctx.backend, point)
    works, errors = checked_works(arrays, f"N = {point.n}")
    result = time_group(Operands(ctx.backend, arrays.dA, arrays.dB, arrays.dC), works, WHOLE, refill=False,
                        regime=ctx.regime)
    return store_group(ctx, point, result, errors)


def stored(ctx: Context, point: Point) -> bool:
    params = point_params(point, ctx.regime)
    return all(ctx.db.has(EXPERIMENT, name, params, ctx.env_key) for name in METHODS)


def run_points(ctx: Context, points: Sequence[Point], skipped: int) -> tuple[dict[str, Any], list[SegmentedRow]]:
    """Measure (or resume) the points, one group each, stored as soon as measured; the counts and the stored
    rows of those points."""
    outcome = group_sweep(ctx, EXPERIMENT, points, partial(stored, ctx), partial(measure_point, ctx),
                          lambda point: f"N={point.n}")
    wanted = {(p.n, p.dtype, p.m) for p in points}
    rows = [r for r in segmented_rows(ctx.db, ctx.env_key, regime=ctx.regime) if (r.n, r.dtype, r.m) in wanted]
    return {"points measured": outcome.measured, "points already stored": outcome.skipped,
            "points left out (memory)": skipped, "sizes": f"N = {spread([p.n for p in points])}"}, rows


def limits_now(backend: Backend) -> tuple[dict[str, dict[str, int | None]], tuple[int, int]]:
    """The largest N of each decomposition with this machine's free memory, FP32 and FP64, and that memory."""
    memory = memory_now(backend)
    return {dtype: largest_sizes(*memory, np.dtype(dtype).itemsize) for dtype in ("float32", "float64")}, memory


@experiment(EXPERIMENT, "The segmented launcher (one kernel over 1-D and 2-D segments with index translation) "
                        "against the same kernel on whole arrays, by size N, and the largest N of each decomposition")
def run_segmented(ctx: Context) -> Summary:
    points, skipped = fitting_points(ctx.backend, custom_points(ctx.backend, PLANS[(ctx.backend.name, ctx.quick)]))
    counts, rows = run_points(ctx, points, skipped)
    return segmented_summary(counts, rows, *limits_now(ctx.backend))
